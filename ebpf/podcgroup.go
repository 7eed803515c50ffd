package ebpf

// Pod mode: the sidecar is a container of the pod it enforces, so the programs go on the
// pod's cgroup (the parent of the sidecar's own container cgroup) and the sidecar's cgroup is
// exempt (Config.ExemptCgroup). FindPodCgroup finds both, in the host's cgroup v2 hierarchy as
// mounted at a root directory (in a pod: a hostPath mount of the node's /sys/fs/cgroup).
//
// The calling process's cgroup comes from /proc/self/cgroup ("0::PATH"), PATH being relative
// to the root of its cgroup namespace. That root is found by id: the inode of a cgroup2 mount
// rooted at it (the container's own /sys/fs/cgroup, which mountinfo shows with root "/"), or
// of a detached cgroup2 mount made for the purpose (fsopen/fsmount, never attached anywhere),
// matched against the directories under the root directory. In the host's cgroup namespace
// that is the root directory itself; in a container's private one, a bounded search finds it
// (kubepods* subtrees first).

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Bounds of the search for the cgroup namespace's root under the root directory.
const (
	podSearchMaxDepth = 10
	podSearchMaxDirs  = 50000
)

// PodCgroups are the cgroups of pod mode.
type PodCgroups struct {
	// Pod is the pod's cgroup: where the programs attach (Config.Cgroup).
	Pod string
	// Self is the calling process's own cgroup, exempt (Config.ExemptCgroup).
	Self string
}

// FindPodCgroup finds the calling process's cgroup and its parent under root, the root of the
// cgroup v2 hierarchy as mounted here (empty: Cgroup2Root; on a hybrid node, a root that is
// the v1 tmpfs with the v2 hierarchy at root/unified means that). It refuses, with an error wrapping
// ErrInvalidConfig, when root is not the hierarchy's root, when the process's cgroup cannot be
// found under it, and when the parent would be the hierarchy's root (a process that is not in
// a container of a pod).
func FindPodCgroup(root string) (PodCgroups, error) {
	if root == "" {
		r, err := Cgroup2Root()
		if err != nil {
			return PodCgroups{}, err
		}
		root = r
	}
	root = filepath.Clean(root)
	if checkCgroup2(root) != nil && checkCgroup2(filepath.Join(root, "unified")) == nil {
		// A hybrid node (cgroup v1 controllers, the v2 hierarchy at unified/): a hostPath
		// of /sys/fs/cgroup shows the v2 hierarchy there.
		root = filepath.Join(root, "unified")
	}
	if err := checkCgroup2(root); err != nil {
		return PodCgroups{}, fmt.Errorf("cgroup root: %w", err)
	}
	if isRoot, err := isRootCgroup(root); err != nil {
		return PodCgroups{}, err
	} else if !isRoot {
		return PodCgroups{}, invalidf("%s is not the root of the cgroup v2 hierarchy (a container's own cgroup namespace shows only its subtree): mount the host's, e.g. a hostPath of /sys/fs/cgroup", root)
	}
	rel, err := ownCgroupPath()
	if err != nil {
		return PodCgroups{}, err
	}
	nsID, err := cgroupNSRootID()
	if err != nil {
		return PodCgroups{}, err
	}
	nsRoot, err := findCgroupByID(root, nsID)
	if err != nil {
		return PodCgroups{}, err
	}
	self := filepath.Join(nsRoot, rel)
	if err := checkMember(self, os.Getpid()); err != nil {
		return PodCgroups{}, err
	}
	pod := filepath.Dir(self)
	if self == root || pod == root || !isUnder(pod, root) {
		return PodCgroups{}, invalidf("this process's cgroup %s is not a container's cgroup inside a pod's cgroup: pod mode would enforce the root cgroup", self)
	}
	return PodCgroups{Pod: pod, Self: self}, nil
}

// ownCgroupPath reads the process's cgroup v2 path, relative to its cgroup namespace's root.
func ownCgroupPath() (string, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("read /proc/self/cgroup: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			if !strings.HasPrefix(p, "/") || p == "/.." || strings.HasPrefix(p, "/../") {
				return "", invalidf("this process's cgroup %q lies outside its cgroup namespace", p)
			}
			return filepath.Clean(p), nil
		}
	}
	return "", invalidf("/proc/self/cgroup has no cgroup v2 entry (0::): a cgroup v2 hierarchy is needed")
}

// cgroupNSRootID returns the id of the root cgroup of the process's cgroup namespace: the
// inode of a cgroup2 mount rooted at it, or of a detached mount made for the purpose.
func cgroupNSRootID() (uint64, error) {
	if dir, ok := nsRootMount(); ok {
		if id, err := cgroupID(dir); err == nil {
			return id, nil
		}
	}
	fsfd, err := unix.Fsopen("cgroup2", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return 0, fmt.Errorf("find this process's cgroup namespace root: no cgroup2 mount of it, and fsopen(cgroup2): %w", err)
	}
	defer unix.Close(fsfd)
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return 0, fmt.Errorf("find this process's cgroup namespace root: fsconfig(cgroup2): %w", err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_RDONLY)
	if err != nil {
		return 0, fmt.Errorf("find this process's cgroup namespace root: fsmount(cgroup2): %w", err)
	}
	defer unix.Close(mfd)
	var st unix.Stat_t
	if err := unix.Fstat(mfd, &st); err != nil {
		return 0, fmt.Errorf("find this process's cgroup namespace root: %w", err)
	}
	return st.Ino, nil
}

// nsRootMount finds a cgroup2 mount whose root is the process's cgroup namespace root:
// mountinfo shows a cgroup2 mount's root relative to the reader's namespace, "/" for it.
func nsRootMount() (string, bool) {
	mounts, err := Mounts("cgroup2")
	if err != nil {
		return "", false
	}
	for _, m := range mounts {
		if m.Root == "/" {
			return m.Point, true
		}
	}
	return "", false
}

// findCgroupByID searches root's cgroup directories, breadth first and bounded, for the one
// whose id is id. Directories named kubepods* are searched first at every level.
func findCgroupByID(root string, id uint64) (string, error) {
	if got, err := cgroupID(root); err == nil && got == id {
		return root, nil
	}
	level := []string{root}
	seen := 0
	for depth := 1; depth <= podSearchMaxDepth && len(level) > 0; depth++ {
		var next []string
		for _, dir := range level {
			entries, err := os.ReadDir(dir)
			if err != nil {
				continue // gone meanwhile, or not readable: not ours
			}
			for _, ent := range entries {
				if !ent.IsDir() {
					continue
				}
				seen++
				if seen > podSearchMaxDirs {
					return "", invalidf("this process's cgroup (id %d) not found among the first %d cgroups under %s", id, podSearchMaxDirs, root)
				}
				p := filepath.Join(dir, ent.Name())
				if info, err := ent.Info(); err == nil {
					if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Ino == id {
						return p, nil
					}
				}
				next = append(next, p)
			}
		}
		slices.SortStableFunc(next, func(a, b string) int { return kubepodsFirst(a) - kubepodsFirst(b) })
		level = next
	}
	return "", invalidf("this process's cgroup (id %d) is not under %s (searched %d levels): is it the node's cgroup2 root?", id, root, podSearchMaxDepth)
}

// kubepodsFirst orders directories whose path names a kubepods subtree before the others.
func kubepodsFirst(p string) int {
	if strings.Contains(p, "/kubepods") {
		return 0
	}
	return 1
}

// checkMember checks that pid is in the cgroup dir itself.
func checkMember(dir string, pid int) error {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if errors.Is(err, os.ErrNotExist) {
		return invalidf("this process's cgroup %s does not exist under the cgroup root", dir)
	}
	if err != nil {
		return fmt.Errorf("read %s/cgroup.procs: %w", dir, err)
	}
	want := strconv.Itoa(pid)
	for _, f := range strings.Fields(string(data)) {
		if f == want {
			return nil
		}
	}
	return invalidf("this process (pid %d) is not in %s: the cgroup root does not show this process's hierarchy", pid, dir)
}

// CheckNodePinRoot checks that pinRoot (empty: DefaultPinRoot), or its closest existing
// parent, is already on a bpf filesystem. Open would otherwise mount one, which in a
// container is private to it: the pins, and with them the programs on the pod's cgroup,
// would go when the sidecar container goes. Pod mode needs the node's /sys/fs/bpf mounted
// in. Errors wrap ErrInvalidConfig.
func CheckNodePinRoot(pinRoot string) error {
	if pinRoot == "" {
		pinRoot = DefaultPinRoot
	}
	if !onBPFFS(pinRoot) {
		return invalidf("%s is not on a bpf filesystem: mount the node's /sys/fs/bpf into the sidecar (hostPath), or the enforcement would not outlive a sidecar restart", pinRoot)
	}
	return nil
}
