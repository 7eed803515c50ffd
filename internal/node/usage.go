package node

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// This file answers OpUsage: the CPU time and memory of the pod's running app containers,
// read from their cgroups, so that the unprivileged sidecar can meter each identity of a
// pod (its containers) as a local sandbox's meter reads each identity's cgroup. The agent
// reads only the cgroups below the asking pod's own cgroup directory, of the containers the
// API server reports for that pod: the request names nothing, so no pod can ask for
// another's.

// V1MemoryRoot returns the node's cgroup v1 memory hierarchy as mounted at dir (dir/memory)
// when the node is hybrid (V2Root is dir/unified) and it is mounted, else "": on a cgroup v2
// node the memory figures are the v2 hierarchy's own.
func V1MemoryRoot(dir string) string {
	var st unix.Statfs_t
	if unix.Statfs(filepath.Join(dir, "unified"), &st) != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
		return ""
	}
	p := filepath.Join(dir, "memory")
	if unix.Statfs(p, &st) != nil || st.Type != unix.CGROUP_SUPER_MAGIC {
		return ""
	}
	return p
}

// usage reads the counters of each running app container of the pod the API server
// reported and whose cgroup is below the pod's, sorted by container name. A container whose
// cgroup is gone meanwhile is left out.
func (st *podState) usage() ([]ContainerUsage, error) {
	st.mu.Lock()
	podDir, ids := st.cg.Pod, make(map[string]string, len(st.pod.Containers))
	for name, id := range st.pod.Containers {
		ids[name] = id
	}
	st.mu.Unlock()
	if podDir == "" {
		return nil, errors.New("the pod's cgroup is not known yet")
	}
	entries, err := os.ReadDir(podDir)
	if err != nil {
		return nil, fmt.Errorf("read pod cgroup: %w", err)
	}
	var out []ContainerUsage
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		for name, id := range ids {
			if id == "" || !isContainerDir(e.Name(), id) {
				continue
			}
			u, err := st.a.readUsage(filepath.Join(podDir, e.Name()))
			if errors.Is(err, fs.ErrNotExist) {
				continue // the container ended meanwhile
			}
			if err != nil {
				return nil, fmt.Errorf("container %s: %w", name, err)
			}
			u.Container, u.ID = name, id
			out = append(out, u)
		}
	}
	slices.SortFunc(out, func(a, b ContainerUsage) int { return strings.Compare(a.Container, b.Container) })
	return out, nil
}

// readUsage reads one container cgroup's counters: cpu.stat, which the v2 core keeps for
// every cgroup (on a hybrid node's v2 hierarchy too), and the memory files of the v2
// hierarchy when the memory controller is on there, else of the v1 memory hierarchy at the
// same path relative to the root (kubelet and the runtimes use one path in every
// hierarchy). An error wrapping fs.ErrNotExist means the cgroup is gone.
func (a *Agent) readUsage(dir string) (ContainerUsage, error) {
	var u ContainerUsage
	stat, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return u, err
	}
	for _, line := range strings.Split(string(stat), "\n") {
		k, v, _ := strings.Cut(line, " ")
		n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		switch k {
		case "user_usec":
			u.CPUUserUsec = n
		case "system_usec":
			u.CPUSystemUsec = n
		}
	}
	cur, peak := "memory.current", "memory.peak"
	memDir := dir
	if _, err := os.Stat(filepath.Join(dir, cur)); errors.Is(err, fs.ErrNotExist) {
		rel, err := filepath.Rel(a.cfg.CgroupRoot, dir)
		if a.cfg.V1MemoryRoot == "" || err != nil || strings.HasPrefix(rel, "..") {
			return u, nil // no hierarchy counts its memory
		}
		memDir, cur, peak = filepath.Join(a.cfg.V1MemoryRoot, rel), "memory.usage_in_bytes", "memory.max_usage_in_bytes"
	}
	if u.MemoryBytes, err = readCgroupUint(filepath.Join(memDir, cur)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return u, nil // not in the v1 memory hierarchy (not made there, or gone)
		}
		return u, err
	}
	// memory.peak is Linux 5.19 and later; before it the current value is all there is.
	p, err := readCgroupUint(filepath.Join(memDir, peak))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return u, err
	}
	u.Memory, u.MemoryPeakBytes = true, max(p, u.MemoryBytes)
	return u, nil
}

// readCgroupUint reads a cgroup file holding one unsigned number.
func readCgroupUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	return n, nil
}
