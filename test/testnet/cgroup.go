//go:build linux

package testnet

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Cgroup is a cgroup v2 directory a test created, standing in for a sandbox's cgroup. Its
// processes are killed and the directory (with any children) removed when the test ends.
type Cgroup struct {
	// Path is the cgroup's directory.
	Path string
	dir  *os.File // open directory, for CLONE_INTO_CGROUP
}

// Cgroup2Root returns where the cgroup v2 hierarchy is mounted, from /proc/self/mountinfo
// (/sys/fs/cgroup on a unified host, /sys/fs/cgroup/unified on a hybrid one). It repeats
// ebpf.Cgroup2Root on purpose: ebpf's tests import testnet, so testnet cannot import ebpf.
func Cgroup2Root() (string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("read mountinfo: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		if f := strings.Fields(post); len(f) == 0 || f[0] != "cgroup2" {
			continue
		}
		if f := strings.Fields(pre); len(f) >= 5 {
			return f[4], nil
		}
	}
	return "", errors.New("no cgroup2 hierarchy in /proc/self/mountinfo")
}

// NewCgroup creates a uniquely named cgroup under the cgroup v2 root and removes it in
// t.Cleanup, after killing whatever still runs in it.
func NewCgroup(t testing.TB) *Cgroup {
	t.Helper()
	root, err := Cgroup2Root()
	if err != nil {
		t.Fatalf("testnet: %v", err)
	}
	name := uniqueName()
	c := newCgroupAt(t, filepath.Join(root, name))
	// On a hybrid host a runtime makes the sandboxes' cgroups under this one in each v1
	// hierarchy too (mkdir -p); their parents there are this test's to remove as well.
	t.Cleanup(func() { removeV1Twins(t, name) })
	return c
}

// removeV1Twins removes the cgroup called name (and what is under it) from every cgroup v1
// hierarchy mounted under /sys/fs/cgroup; absent ones are not errors.
func removeV1Twins(t testing.TB, name string) {
	hier, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		return
	}
	for _, h := range hier {
		base := filepath.Join("/sys/fs/cgroup", h.Name())
		var st unix.Statfs_t
		if unix.Statfs(base, &st) != nil || st.Type != unix.CGROUP_SUPER_MAGIC {
			continue
		}
		if err := (&Cgroup{Path: filepath.Join(base, name)}).remove(); err != nil {
			t.Errorf("testnet: remove cgroup %s: %v", filepath.Join(base, name), err)
		}
	}
}

// Child creates a cgroup inside c (a sandbox making its own sub-cgroup).
func (c *Cgroup) Child(t testing.TB, name string) *Cgroup {
	t.Helper()
	return newCgroupAt(t, filepath.Join(c.Path, name))
}

func newCgroupAt(t testing.TB, path string) *Cgroup {
	t.Helper()
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatalf("testnet: create cgroup: %v", err)
	}
	dir, err := os.Open(path)
	if err != nil {
		t.Fatalf("testnet: open cgroup: %v", err)
	}
	c := &Cgroup{Path: path, dir: dir}
	t.Cleanup(func() {
		dir.Close()
		if err := c.remove(); err != nil {
			t.Errorf("testnet: remove cgroup %s: %v", path, err)
		}
	})
	return c
}

// Procs returns the pids in the cgroup itself (not its children).
func (c *Cgroup) Procs() ([]int, error) {
	data, err := os.ReadFile(filepath.Join(c.Path, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// remove kills the cgroup's processes (children first) and removes the directories. It
// polls for the processes to be gone: the kernel reaps them asynchronously.
func (c *Cgroup) remove() error {
	entries, err := os.ReadDir(c.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := (&Cgroup{Path: filepath.Join(c.Path, e.Name())}).remove(); err != nil {
				return err
			}
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids, err := c.Procs()
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		for _, pid := range pids {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		err = unix.Rmdir(c.Path)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond) // polling the kernel's asynchronous reaping, bounded
	}
}

// Command returns a command that runs name with args inside the network namespace ns and
// starts directly in cgroup c (clone3 CLONE_INTO_CGROUP: no moment outside it). The caller
// sets Env, Stdin and so on before Start.
func (c *Cgroup) Command(ctx context.Context, ns *Netns, name string, args ...string) *exec.Cmd {
	cmd := ns.Command(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(c.dir.Fd()), Pdeathsig: syscall.SIGKILL}
	return cmd
}

// CommandHostMounts is Command without the mount changes of `ip netns exec` (which remounts
// /sys for the namespace, hiding /sys/fs/cgroup and /sys/fs/bpf): it enters only the network
// namespace (nsenter --net), as a sidecar container shares its pod's network but sees its own
// mounts. nsenter execs the program, so the pid is the program's.
func (n *Netns) CommandHostMounts(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + filepath.Join(netnsDir, n.Name), "--", name}, args...)...)
}
