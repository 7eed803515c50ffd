package kubecluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// stopTimeout bounds how long a component gets to exit after SIGTERM.
const stopTimeout = 20 * time.Second

// Stop tears the cluster down: kubelet first (so it restarts nothing), then every process in
// the cluster's cgroups (the pods), the other components in reverse order, every process left
// in the cluster's namespaces (containerd's shims), the namespace holder, and last the
// cgroups, depth first, from every hierarchy. It returns what it could not remove.
func (c *Cluster) Stop() error {
	var errs []error
	for i := len(c.procs) - 1; i >= 0; i-- {
		if c.procs[i].name == "kubelet" {
			c.procs[i].stop()
		}
	}
	killCgroupTree(c.CgroupRoot)
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].stop()
	}
	if c.pid != 0 {
		killNamespaceMembers(c.pid)
	}
	if c.holder != nil {
		_ = c.holder.Process.Kill()
		_ = c.holder.Wait()
	}
	if c.CgroupRoot != "" {
		if err := removeCgroupTree(c.CgroupRoot); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	// nsenter passes the signal on; the group holds nsenter and its child.
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
	p.log.Close()
}

// cgroupDirs lists root's directories in every hierarchy, deepest first.
func cgroupDirs(root string) []string {
	var dirs []string
	for _, h := range cgroupHierarchies() {
		_ = filepath.Walk(filepath.Join(h, root), func(p string, info os.FileInfo, err error) error {
			if err == nil && info.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	sort.Slice(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/") })
	return dirs
}

// killCgroupTree SIGKILLs every process in root's cgroups and waits (bounded) for them to go.
func killCgroupTree(root string) {
	if root == "" {
		return
	}
	deadline := time.Now().Add(stopTimeout)
	for {
		alive := 0
		for _, d := range cgroupDirs(root) {
			b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					alive++
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		if alive == 0 || time.Now().After(deadline) {
			return
		}
		time.Sleep(100 * time.Millisecond) // bounded wait for the kernel to reap killed tasks
	}
}

// killNamespaceMembers SIGKILLs every process sharing holder's network or mount namespace,
// but holder itself.
func killNamespaceMembers(holder int) {
	netns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", holder))
	mntns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", holder))
	if netns == "" {
		return
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == holder {
			continue
		}
		n, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
		m, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid))
		if n == netns || m == mntns {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// removeCgroupTree removes root's cgroups, depth first, from every hierarchy.
func removeCgroupTree(root string) error {
	var errs []error
	for _, d := range cgroupDirs(root) {
		var err error
		for i := 0; i < 50; i++ { // a killed task can linger a moment in its cgroup
			if err = syscall.Rmdir(d); err == nil || errors.Is(err, syscall.ENOENT) || !errors.Is(err, syscall.EBUSY) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}
