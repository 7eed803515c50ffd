package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// cgroupV1Root is where a hybrid host mounts its cgroup v1 hierarchies.
const cgroupV1Root = "/sys/fs/cgroup"

// hybridCgroups reports whether this host is hybrid: /sys/fs/cgroup is not itself cgroup2, and
// v1 hierarchies are mounted under it.
func hybridCgroups() bool {
	var st unix.Statfs_t
	if unix.Statfs(cgroupV1Root, &st) != nil || st.Type == unix.CGROUP2_SUPER_MAGIC {
		return false
	}
	return isCgroupV1(filepath.Join(cgroupV1Root, "memory")) || isCgroupV1(filepath.Join(cgroupV1Root, "pids"))
}

func isCgroupV1(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == unix.CGROUP_SUPER_MAGIC
}

// v1LimitDirs are the v1 hierarchies that hold the limits: a runtime whose cgroup support
// does not work on a hybrid host (crun 1.8 refuses one whose v2 hierarchy has any controller)
// runs without it, and airlock places the container in these itself.
var v1LimitDirs = []string{"memory", "pids", "cpu"}

// createV1Cgroups makes rel in the v1 memory, pids and cpu hierarchies and writes the limits
// there; it returns the directories it made.
func createV1Cgroups(rel string, l Limits) ([]string, error) {
	var made []string
	for _, h := range v1LimitDirs {
		base := filepath.Join(cgroupV1Root, h)
		if !isCgroupV1(base) {
			continue
		}
		dir := filepath.Join(base, rel)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return made, fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		made = append(made, dir)
		if err := writeV1Limits(h, dir, l); err != nil {
			return made, err
		}
	}
	return made, nil
}

func writeV1Limits(h, dir string, l Limits) error {
	var files [][2]string
	switch {
	case h == "memory" && l.Memory > 0:
		files = append(files, [2]string{"memory.limit_in_bytes", strconv.FormatInt(l.Memory, 10)})
		if _, err := os.Stat(filepath.Join(dir, "memory.memsw.limit_in_bytes")); err == nil {
			files = append(files, [2]string{"memory.memsw.limit_in_bytes", strconv.FormatInt(l.Memory, 10)})
		}
	case h == "pids" && l.Pids > 0:
		files = append(files, [2]string{"pids.max", strconv.Itoa(l.Pids)})
	case h == "cpu" && l.CPU > 0:
		files = append(files, [2]string{"cpu.cfs_period_us", "100000"}, [2]string{"cpu.cfs_quota_us", strconv.FormatInt(int64(l.CPU*100000), 10)})
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f[0]), []byte(f[1]), 0o644); err != nil {
			return fmt.Errorf("cgroup %s: set %s to %s: %w", dir, f[0], f[1], err)
		}
	}
	return nil
}

// moveThreadV1 moves the calling thread (locked to its goroutine) into the v1 cgroup dirs: v1
// places threads one by one, so a process the thread starts next begins in them, and the rest
// of this process stays where it is. back moves the thread to where it was (a locked thread
// that is the main one is parked, not ended, when its goroutine returns: it must not keep the
// sandbox's cgroups busy).
func moveThreadV1(dirs []string) (back func() error, err error) {
	tid := []byte(strconv.Itoa(unix.Gettid()))
	var orig []string
	for _, d := range dirs {
		cur, err := threadCgroupIn(d)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(d, "tasks"), tid, 0o644); err != nil {
			return nil, fmt.Errorf("enter cgroup %s: %w", d, err)
		}
		orig = append(orig, cur)
	}
	return func() error {
		for _, o := range orig {
			if err := os.WriteFile(filepath.Join(o, "tasks"), tid, 0o644); err != nil {
				return fmt.Errorf("leave for cgroup %s: %w", o, err)
			}
		}
		return nil
	}, nil
}

// threadCgroupIn is the calling thread's cgroup directory in the v1 hierarchy that holds dir.
func threadCgroupIn(dir string) (string, error) {
	rest := strings.TrimPrefix(dir, cgroupV1Root+"/")
	h, _, _ := strings.Cut(rest, "/")
	data, err := os.ReadFile("/proc/thread-self/cgroup")
	if err != nil {
		return "", fmt.Errorf("read this thread's cgroups: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && slices.Contains(strings.Split(parts[1], ","), h) {
			return filepath.Join(cgroupV1Root, h, parts[2]), nil
		}
	}
	return "", fmt.Errorf("this thread is in no %s cgroup", h)
}
