package node

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/ebpf"
)

// Cgroups are a pod's cgroups in the node's cgroup v2 hierarchy.
type Cgroups struct {
	// Pod is the pod's cgroup: the programs attach here.
	Pod string
	// Sidecar is the sidecar container's cgroup, below Pod: exempt, and the only cgroup whose
	// processes may talk to the agent.
	Sidecar string
}

// maxSearchDepth bounds the search for a pod's cgroup below the hierarchy's root: kubelet's
// cgroupRoot, kubepods, the QoS class and the pod are a handful of levels.
const maxSearchDepth = 8

// V2Root returns the root of the node's cgroup v2 hierarchy as mounted at dir: dir itself on
// a cgroup v2 node, dir/unified on a hybrid one (cgroup v1 controllers, the v2 hierarchy at
// unified/).
func V2Root(dir string) (string, error) {
	for _, p := range []string{dir, filepath.Join(dir, "unified")} {
		var st unix.Statfs_t
		if unix.Statfs(p, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return p, nil
		}
	}
	return "", fmt.Errorf("find cgroup v2 hierarchy: neither %s nor %s/unified is a cgroup2 mount", dir, dir)
}

// FindCgroups finds the cgroups of the pod with uid and of its container containerID (the
// runtime's ID, without the "containerd://" prefix) under root, the cgroup v2 hierarchy's
// root. It knows kubelet's two drivers:
//
//	cgroupfs: [ROOT/]kubepods[/QOS]/pod<UID>/<ID>
//	systemd:  kubepods.slice[/kubepods-QOS.slice]/kubepods[-QOS]-pod<UID_>.slice/<rt>-<ID>.scope
//
// (UID_ is the UID with '-' written as '_'; rt is cri-containerd, crio or docker). The pod's
// directory is searched breadth first, at most maxSearchDepth levels down. An error wrapping
// os.ErrNotExist means a cgroup is not (yet, or any longer) there.
func FindCgroups(root, uid, containerID string) (Cgroups, error) {
	if uid == "" || containerID == "" || strings.ContainsAny(uid+containerID, "/.") {
		return Cgroups{}, fmt.Errorf("find pod cgroup: invalid pod UID %q or container ID %q", uid, containerID)
	}
	pod, err := findPodDir(root, uid)
	if err != nil {
		return Cgroups{}, err
	}
	entries, err := os.ReadDir(pod)
	if err != nil {
		return Cgroups{}, fmt.Errorf("read pod cgroup: %w", err)
	}
	for _, e := range entries {
		if e.IsDir() && isContainerDir(e.Name(), containerID) {
			return Cgroups{Pod: pod, Sidecar: filepath.Join(pod, e.Name())}, nil
		}
	}
	return Cgroups{}, fmt.Errorf("find container cgroup: no cgroup of container %s in %s: %w", containerID, pod, os.ErrNotExist)
}

// isPodDir reports whether a directory name is the cgroup of the pod with uid.
func isPodDir(name, uid string) bool {
	if name == "pod"+uid {
		return true // cgroupfs
	}
	return strings.HasPrefix(name, "kubepods") && strings.HasSuffix(name, "-pod"+strings.ReplaceAll(uid, "-", "_")+".slice")
}

// isContainerDir reports whether a directory name is the cgroup of container id.
func isContainerDir(name, id string) bool {
	if name == id {
		return true // cgroupfs
	}
	for _, rt := range []string{"cri-containerd-", "crio-", "docker-"} {
		if name == rt+id+".scope" {
			return true // systemd; crio-conmon-ID.scope is CRI-O's monitor, not the container
		}
	}
	return false
}

// findPodDir searches root breadth first for the pod's directory; kubepods subtrees first.
func findPodDir(root, uid string) (string, error) {
	level := []string{root}
	for depth := 0; depth < maxSearchDepth && len(level) > 0; depth++ {
		var kube, other []string
		for _, dir := range level {
			entries, err := os.ReadDir(dir)
			if err != nil {
				continue // gone meanwhile
			}
			for _, e := range entries {
				if !e.IsDir() {
					continue
				}
				p := filepath.Join(dir, e.Name())
				if isPodDir(e.Name(), uid) {
					return p, nil
				}
				if strings.HasPrefix(e.Name(), "kubepods") || strings.Contains(dir, "kubepods") {
					kube = append(kube, p)
				} else if depth < 2 {
					// kubelet's cgroupRoot (e.g. /airlock-kube-ID) may sit above kubepods.
					other = append(other, p)
				}
			}
		}
		level = append(kube, other...)
	}
	return "", fmt.Errorf("find pod cgroup: no cgroup of pod %s under %s: %w", uid, root, os.ErrNotExist)
}

// containerCgroups returns the cgroup ids (ebpf.CgroupID: the directory's inode) of the
// containers ids (runtime ID by container name) found in the pod's cgroup directory podDir,
// by container name; a container whose cgroup is not there is left out.
func containerCgroups(podDir string, ids map[string]string) map[uint64]string {
	out := map[uint64]string{}
	if podDir == "" || len(ids) == 0 {
		return out
	}
	entries, err := os.ReadDir(podDir)
	if err != nil {
		return out
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		for name, id := range ids {
			if id == "" || !isContainerDir(e.Name(), id) {
				continue
			}
			if cgid, err := ebpf.CgroupID(filepath.Join(podDir, e.Name())); err == nil {
				out[cgid] = name
			}
		}
	}
	return out
}

// inCgroupDir reports whether cgid is the id of a directory right below dir (a container's
// cgroup of the pod, whichever container it is).
func inCgroupDir(dir string, cgid uint64) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if id, err := ebpf.CgroupID(filepath.Join(dir, e.Name())); err == nil && id == cgid {
			return true
		}
	}
	return false
}
