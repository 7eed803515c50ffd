package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/test/privtest"
)

func TestPlanDisk(t *testing.T) {
	st := &State{Dir: "/var/lib/airlock/sandboxes/sb", Container: &ContainerState{Bundle: "/run/airlock/bundles/x-sb"}}
	if d, err := planDisk(0, st); d != nil || err != nil {
		t.Errorf("planDisk(0) = %+v, %v; want none", d, err)
	}
	if _, err := planDisk(MinDiskSize-1, st); err == nil || !strings.Contains(err.Error(), "at least 16M") {
		t.Errorf("planDisk below the minimum: %v, want an error naming 16M", err)
	}
	d, err := planDisk(32<<20+100, st)
	if err != nil {
		t.Fatal(err)
	}
	want := DiskState{Size: 32 << 20, Image: "/var/lib/airlock/sandboxes/sb/disk.img", Mount: "/run/airlock/bundles/x-sb/disk"}
	if *d != want {
		t.Errorf("planDisk = %+v, want %+v", *d, want)
	}
	st.Container.Disk = d
	if st.Container.writableDir() != want.Mount {
		t.Errorf("writableDir = %q, want the disk's mount %q", st.Container.writableDir(), want.Mount)
	}
}

// With a disk, /tmp and the working directory are binds of its directories (nosuid, nodev),
// no tmpfs; a --mount at the working directory still takes its place.
func TestContainerMountsOnDisk(t *testing.T) {
	st := testState()
	st.Container.Disk = &DiskState{Size: 32 << 20, Mount: "/run/airlock/bundles/x-sb/disk"}
	got := map[string]string{}
	for _, m := range containerMounts(st.Container, rootView{}) {
		if m.Destination == "/tmp" || m.Destination == "/work" {
			got[m.Destination] = m.Source
			if m.Type != "bind" || !slices.Contains(m.Options, "nosuid") || !slices.Contains(m.Options, "nodev") || slices.Contains(m.Options, "ro") {
				t.Errorf("%s: %+v, want a writable nosuid,nodev bind", m.Destination, m)
			}
		}
	}
	if got["/tmp"] != "/run/airlock/bundles/x-sb/disk/tmp" || got["/work"] != "/run/airlock/bundles/x-sb/disk/work" {
		t.Errorf("sources %v, want the disk's tmp and work", got)
	}
	if s := st.Limits.describe(st.Container); !strings.Contains(s, "/tmp and /work on a 32M disk") {
		t.Errorf("describe = %q", s)
	}
	st.Container.Mounts = []Mount{{Source: "/srv/w", Dest: "/work", Writable: true}}
	for _, m := range containerMounts(st.Container, rootView{}) {
		if m.Destination == "/work" && m.Source != "/srv/w" {
			t.Errorf("/work from %s although a --mount is there", m.Source)
		}
	}
	if s := st.Limits.describe(st.Container); !strings.Contains(s, ", /tmp on a 32M disk") {
		t.Errorf("describe with the workdir mounted = %q", s)
	}
}

// makeDisk and releaseDisk on this host: the disk caps what is written into it (ENOSPC), its
// image is reserved in full at once and does not grow, its directories belong to the mapped
// root, and the release leaves no mount, loop device or file; it is idempotent and cleans up
// after a make that stopped halfway.
func TestDiskOnHost(t *testing.T) {
	privtest.Require(t, "mkfs.ext4")
	st := &State{Dir: t.TempDir(), Container: &ContainerState{Bundle: filepath.Join(t.TempDir(), "bundles", "b", "x-sb"), IDBase: DefaultIDBase + 12345}}
	d, err := planDisk(MinDiskSize, st)
	if err != nil {
		t.Fatal(err)
	}
	st.Container.Disk = d
	t.Cleanup(func() { _ = releaseDisk(d) })
	began := time.Now()
	if err := makeDisk(st); err != nil {
		t.Fatal(err)
	}
	t.Logf("made a %s disk in %s", formatBytes(d.Size), time.Since(began))
	if !strings.HasPrefix(d.Loop, "/dev/loop") || backingFile(d.Loop) != d.Image {
		t.Fatalf("loop device %q backs %q, want %s", d.Loop, backingFile(d.Loop), d.Image)
	}
	for _, sub := range []string{diskTmp, diskWork} {
		var s unix.Stat_t
		if err := unix.Stat(filepath.Join(d.Mount, sub), &s); err != nil || s.Uid != st.Container.IDBase || s.Mode&0o7777 != 0o1777 {
			t.Errorf("%s: uid %d mode %o (%v), want %d and 1777", sub, s.Uid, s.Mode&0o7777, err, st.Container.IDBase)
		}
	}
	before := allocated(t, d.Image)
	if before < d.Size {
		t.Errorf("image: %d bytes allocated, want all %d reserved", before, d.Size)
	}
	f, err := os.Create(filepath.Join(d.Mount, diskTmp, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	var werr error
	buf := make([]byte, 1<<20)
	written := 0
	for range 4 * MinDiskSize >> 20 {
		var n int
		n, werr = f.Write(buf)
		written += n
		if werr != nil {
			break
		}
	}
	f.Close()
	if !errors.Is(werr, unix.ENOSPC) || written > MinDiskSize {
		t.Errorf("writing %d MiB: wrote %d bytes, error %v; want ENOSPC within %d", 4*MinDiskSize>>20, written, werr, MinDiskSize)
	}
	if used := diskUsage(d); used < int64(written) || used > d.Size {
		t.Errorf("diskUsage = %d, want between %d written and %d", used, written, d.Size)
	}
	if after := allocated(t, d.Image); after != before {
		t.Errorf("image allocation went from %d to %d bytes: the host paid for the write", before, after)
	}
	began = time.Now()
	if err := releaseDisk(d); err != nil {
		t.Fatal(err)
	}
	t.Logf("released it in %s", time.Since(began))
	wantReleased(t, d)
	if err := releaseDisk(d); err != nil {
		t.Errorf("second release: %v", err)
	}

	// A make that stops after the image (mkfs failed, say): the release removes it, and the
	// next make starts over.
	if err := makeImage(d); err != nil {
		t.Fatal(err)
	}
	if err := releaseDisk(d); err != nil {
		t.Fatal(err)
	}
	wantReleased(t, d)
	// A loop device bound but never mounted goes when its file is closed (autoclear).
	if err := makeImage(d); err != nil {
		t.Fatal(err)
	}
	dev, loop, err := attachLoop(d.Image)
	if err != nil {
		t.Fatal(err)
	}
	loop.Close()
	if b := backingFile(dev); b != "" {
		t.Errorf("%s still backed by %q after its only user closed it", dev, b)
	}
}

// wantReleased fails t unless nothing of d is left: its mount, file and loop device.
func wantReleased(t *testing.T, d *DiskState) {
	t.Helper()
	if _, err := os.Stat(d.Image); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("image %s still there (%v)", d.Image, err)
	}
	if _, err := os.Stat(d.Mount); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("mount point %s still there (%v)", d.Mount, err)
	}
	if d.Loop != "" && backingFile(d.Loop) == d.Image {
		t.Errorf("%s still backed by %s", d.Loop, d.Image)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), " "+d.Mount+" ") {
		t.Errorf("%s is still mounted", d.Mount)
	}
}

// backingFile is the file behind loop device dev, "" when none.
func backingFile(dev string) string {
	b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "loop", "backing_file"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// allocated is how many bytes of the host's filesystem file takes.
func allocated(t *testing.T, file string) int64 {
	t.Helper()
	var s unix.Stat_t
	if err := unix.Stat(file, &s); err != nil {
		t.Fatal(err)
	}
	return s.Blocks * 512
}
