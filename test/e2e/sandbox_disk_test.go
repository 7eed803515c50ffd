//go:build linux

package e2e

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestSandboxHostileDisk: --disk 32M caps all a sandbox writes outside its rw mounts, /tmp
// and the working directory together. A 100 MiB write stops with ENOSPC at the cap, and so
// does a write into the other directory afterwards and a preallocation past it; the host
// paid for the disk once, at create (its image does not grow), and a neighbour without a
// disk writes on; list shows the use against the cap; delete leaves no loop device, mount
// or image behind. On runc, crun and runsc (whose Gofer writes to the disk for it).
func TestSandboxHostileDisk(t *testing.T) {
	runHostileOn(t, append(slices.Clone(hostileRuntimes), "runsc"), func(t *testing.T, h *hostile) {
		const capBytes = 32 << 20
		name, _, r := h.createOut(t, "disk", "--disk", "32M")
		if !strings.Contains(r.Stdout, "/tmp and /work on a 32M disk (ext4 on /dev/loop") {
			t.Errorf("create --disk 32M: the container line does not name the disk:\n%s", r.Stdout)
		}
		neighbour, _, _ := h.createOut(t, "nodisk")
		disk := diskOf(t, h.sbEnv, name)
		before := allocatedBytes(t, disk.Image)
		if before < capBytes {
			t.Errorf("the disk image takes %d bytes on the host, want all %d reserved at create", before, capBytes)
		}

		r = h.sh(t, name, `dd if=/dev/zero of=/tmp/fill bs=1M count=100 2>&1; echo "tmp=$(wc -c < /tmp/fill)"
dd if=/dev/zero of=/work/more bs=1M count=8 2>&1; echo "work=$(wc -c < /work/more)"
fallocate -l 100M /work/prealloc 2>/dev/null && echo fallocate=ok || echo fallocate=denied`)
		t.Logf("--disk 32M, 100 MiB into /tmp, 8 MiB into /work:\n%s", r.Stdout)
		tmp, _ := strconv.ParseInt(attemptResult(r.Stdout, "tmp"), 10, 64)
		work, _ := strconv.ParseInt(attemptResult(r.Stdout, "work"), 10, 64)
		if strings.Count(r.Stdout, "No space left on device") < 2 || tmp <= 0 || tmp+work > capBytes {
			t.Errorf("--disk 32M: wrote %d bytes into /tmp and %d into /work; want ENOSPC for both, %d bytes at most together:\n%s", tmp, work, capBytes, r)
		}
		if attemptResult(r.Stdout, "fallocate") != "denied" {
			t.Errorf("--disk 32M: preallocating 100 MiB past the cap succeeded:\n%s", r.Stdout)
		}
		if after := allocatedBytes(t, disk.Image); after != before {
			t.Errorf("the disk image went from %d to %d bytes on the host: the sandbox's write reached the host", before, after)
		}
		info, _ := h.info(t, name)
		if info.DiskBytes != capBytes || info.DiskUsedBytes < tmp || info.DiskUsedBytes > capBytes {
			t.Errorf("list: disk_bytes %d, disk_used_bytes %d; want %d, and at least the %d bytes written", info.DiskBytes, info.DiskUsedBytes, capBytes, tmp)
		}
		if r := h.run(t, nil, nil, "sandbox", "list", "--state-dir", h.stateDir); !strings.Contains(r.Stdout, "/32.0M (") {
			t.Errorf("sandbox list does not show the use against the cap:\n%s", r.Stdout)
		}
		if r := h.sh(t, neighbour, "dd if=/dev/zero of=/tmp/n bs=1M count=8 2>&1 && wc -c < /tmp/n"); r.Code != 0 || !strings.HasSuffix(r.Stdout, "8388608\n") {
			t.Errorf("a neighbour without a disk could not write 8 MiB into its /tmp: %s", r)
		}

		if r := h.run(t, nil, nil, "sandbox", "delete", "--state-dir", h.stateDir, name); r.Code != 0 {
			t.Fatalf("delete: %s", r)
		}
		if b := loopBacking(disk.Loop); b == disk.Image {
			t.Errorf("after delete %s is still attached to %s", disk.Loop, b)
		}
		for _, p := range []string{disk.Image, disk.Mount} {
			if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("after delete %s is still there (%v)", p, err)
			}
		}
		if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), " "+disk.Mount+" ") {
			t.Errorf("after delete %s is still mounted", disk.Mount)
		}

		// A create that fails after the disk is made (the runtime cannot start the container)
		// undoes it: no image, no loop device on it.
		failed := h.name("diskfail")
		h.cleanupSandbox(t, failed)
		r = h.run(t, nil, createEnv(), append([]string{"sandbox", "create", failed}, h.createArgs("--disk", "32M", "--runtime", "/bin/false")...)...)
		image := filepath.Join(h.stateDir, "sandboxes", failed, "disk.img")
		if r.Code == 0 || !strings.Contains(r.Stderr, "step container") {
			t.Errorf("create with a runtime that fails: %s; want the container step to fail", r)
		}
		if _, err := os.Stat(image); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after a failed create the image %s is still there (%v)", image, err)
		}
		loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
		for _, l := range loops {
			if b, _ := os.ReadFile(l); strings.HasPrefix(string(b), image) {
				t.Errorf("after a failed create %s is still attached to %s", l, image)
			}
		}
	})
}

// diskState is a sandbox state file's disk (sandbox.DiskState).
type diskState struct {
	Size  int64  `json:"size"`
	Image string `json:"image"`
	Mount string `json:"mount"`
	Loop  string `json:"loop"`
}

// diskOf reads sandbox name's disk from its state file.
func diskOf(t *testing.T, e *sbEnv, name string) diskState {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(e.stateDir, "sandboxes", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Container struct {
			Disk *diskState `json:"disk"`
		} `json:"container"`
	}
	if err := json.Unmarshal(data, &st); err != nil || st.Container.Disk == nil || st.Container.Disk.Loop == "" {
		t.Fatalf("state of %s: no disk with a loop device (%v):\n%s", name, err, data)
	}
	return *st.Container.Disk
}

// allocatedBytes is how much of the host's filesystem file takes.
func allocatedBytes(t *testing.T, file string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(file, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// loopBacking is the file behind loop device dev, "" when none.
func loopBacking(dev string) string {
	b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "loop", "backing_file"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
