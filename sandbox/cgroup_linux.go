package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// createCgroup makes the sandbox's cgroup v2 directory (its parent too, if missing) and writes
// the limits. It fails if the directory exists: a leftover must be reaped, not adopted.
func createCgroup(path string, lim Limits) error {
	parent := filepath.Dir(path)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("create cgroup parent %s: %w", parent, err)
	}
	var want []string
	if lim.CPU > 0 {
		want = append(want, "cpu")
	}
	if lim.Memory > 0 {
		want = append(want, "memory")
	}
	if lim.Pids > 0 {
		want = append(want, "pids")
	}
	if len(want) > 0 {
		if err := enableControllers(parent, want); err != nil {
			return err
		}
	}
	if err := os.Mkdir(path, 0o755); err != nil {
		return fmt.Errorf("create cgroup %s: %w", path, err)
	}
	write := func(file, value string) error {
		if err := os.WriteFile(filepath.Join(path, file), []byte(value), 0o644); err != nil {
			return fmt.Errorf("cgroup %s: set %s to %s: %w", path, file, value, err)
		}
		return nil
	}
	const period = 100000
	if lim.CPU > 0 {
		if err := write("cpu.max", fmt.Sprintf("%d %d", int64(lim.CPU*period), period)); err != nil {
			return err
		}
	}
	if lim.Memory > 0 {
		if err := write("memory.max", strconv.FormatInt(lim.Memory, 10)); err != nil {
			return err
		}
	}
	if lim.Pids > 0 {
		if err := write("pids.max", strconv.Itoa(lim.Pids)); err != nil {
			return err
		}
	}
	return nil
}

// checkCgroup2Dir fails unless path (or, while it does not exist yet, its nearest existing
// ancestor) lies on a cgroup v2 filesystem: a plain directory would take the sandbox's
// processes nowhere and its kernel programs could not attach.
func checkCgroup2Dir(path string) error {
	p := path
	for {
		var fs unix.Statfs_t
		err := unix.Statfs(p, &fs)
		if err == nil {
			if fs.Type != unix.CGROUP2_SUPER_MAGIC {
				return fmt.Errorf("cgroup parent %s is not on a cgroup v2 filesystem (%s is not)", path, p)
			}
			return nil
		}
		if !errors.Is(err, unix.ENOENT) || p == "/" {
			return fmt.Errorf("cgroup parent %s: %w", path, err)
		}
		p = filepath.Dir(p)
	}
}

// enableControllers turns the controllers on for parent's children, which needs them to be
// available in parent (cgroup.controllers).
func enableControllers(parent string, want []string) error {
	avail, err := os.ReadFile(filepath.Join(parent, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", parent, err)
	}
	have := strings.Fields(string(avail))
	var add []string
	for _, c := range want {
		if !contains(have, c) {
			return fmt.Errorf("cgroup %s: the %s controller is not available there (cgroup.controllers: %q); drop the limit or enable it in the parent", parent, c, strings.TrimSpace(string(avail)))
		}
		add = append(add, "+"+c)
	}
	if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte(strings.Join(add, " ")), 0o644); err != nil {
		return fmt.Errorf("cgroup %s: enable %s: %w", parent, strings.Join(want, ", "), err)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// removeCgroup kills every process in the cgroup and its children (cgroup.kill), waits until
// it is empty and removes it with its child directories. A missing cgroup is not an error.
func removeCgroup(ctx context.Context, path string) error {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := checkCgroup2Dir(path); err != nil {
		return err // never write cgroup.kill into, or rmdir, a directory that is no cgroup
	}
	if err := os.WriteFile(filepath.Join(path, "cgroup.kill"), []byte("1"), 0o644); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("kill cgroup %s: %w", path, err)
	}
	if err := waitUnpopulated(ctx, path); err != nil {
		return err
	}
	return rmdirTree(path)
}

// waitUnpopulated waits until cgroup.events says "populated 0", watching it with inotify (the
// kernel signals a change of that file as a modification).
func waitUnpopulated(ctx context.Context, path string) error {
	events := filepath.Join(path, "cgroup.events")
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return fmt.Errorf("inotify: %w", err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, events, unix.IN_MODIFY); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("watch %s: %w", events, err)
	}
	buf := make([]byte, 4096)
	for {
		populated, err := cgroupPopulated(events)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !populated {
			return nil
		}
		// Wait for the next change, bounded by ctx: poll(2) with a short timeout so that a
		// cancelled context is noticed.
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(pfd, 100); err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("wait for %s: %w", events, err)
		}
		_, _ = unix.Read(fd, buf)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("cgroup %s still has processes: %w", path, err)
		}
	}
}

func cgroupPopulated(events string) (bool, error) {
	data, err := os.ReadFile(events)
	if err != nil {
		return false, err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), " "); ok && k == "populated" {
			return v != "0", nil
		}
	}
	return false, fmt.Errorf("%s: no populated line", events)
}

// rmdirTree removes a cgroup directory and its child cgroups, deepest first (cgroupfs only
// allows rmdir of a cgroup without children; the files inside need no removal).
func rmdirTree(path string) error {
	entries, err := os.ReadDir(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read cgroup %s: %w", path, err)
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := rmdirTree(filepath.Join(path, e.Name())); err != nil {
				return err
			}
		}
	}
	// The kernel may still be tearing down a just-killed task: EBUSY for a moment.
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := unix.Rmdir(path)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w", path, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
