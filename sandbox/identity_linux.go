package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/airlock-dev/airlock/policy"
)

// Identities (spec.identities of the sandbox's policy) run as `sandbox exec --as NAME`: in a
// cgroup of their own below the sandbox's, in every hierarchy the container's processes are
// in (the sidecar tells them apart by their v2 cgroup; the v1 limits stay the sandbox's, as
// v1 memory and pids limits hold for a whole subtree), as a uid of their own inside, with no
// capabilities and no_new_privs. Different uids without CAP_SYS_PTRACE, CAP_KILL or
// CAP_SETUID keep one identity from tracing, reading the memory of, taking descriptors from,
// signalling or becoming another's processes; the cgroup file system is masked read-only
// inside, so none can move itself.

// IdentityUIDBase is the uid (and gid) inside a sandbox of the first identity it runs; each
// further identity gets the next one, kept in the sandbox's state and never given to another.
const IdentityUIDBase = 20000

// maxIdentities bounds the uids handed to identities (below the sandbox's 65536).
const maxIdentities = 4096

// prepareIdentity checks that as is an identity of st's policy, gives it its uid (saved in
// st under the store lock) and makes its cgroup. It returns the uid and the cgroup's
// directory name below the sandbox's.
func (m *Manager) prepareIdentity(st *State, as string) (int, string, error) {
	if st.Container.Rootless {
		return 0, "", fmt.Errorf("--as %s: --runtime %s maps only the sandbox's root, and each identity needs a uid of its own: use runc or crun",
			as, filepath.Base(st.Container.Runtime))
	}
	pol, err := policy.Load(st.Policy)
	if err != nil {
		return 0, "", fmt.Errorf("--as %s: load the sandbox's policy: %w", as, err)
	}
	if _, ok := pol.Identity(as); !ok {
		have := "none"
		if names := pol.IdentityNames(); len(names) > 0 {
			have = strings.Join(names, ", ")
		}
		return 0, "", fmt.Errorf("--as %s: policy %q has no identity %q (spec.identities: %s)", as, pol.Name(), as, have)
	}
	uid, fresh, err := m.identityUID(st, as)
	if err != nil {
		return 0, "", err
	}
	if fresh {
		if err := shareDirs(st); err != nil {
			return 0, "", err
		}
	}
	dir := policy.IdentityCgroupDir(as)
	if err := makeIdentityCgroups(st, dir); err != nil {
		return 0, "", err
	}
	return uid, dir, nil
}

// identityUID returns identity as's uid in st, assigning the next free one when it has none
// (fresh is then true).
func (m *Manager) identityUID(st *State, as string) (uid int, fresh bool, err error) {
	if uid, ok := st.IdentityUIDs[as]; ok {
		return uid, false, nil
	}
	unlock, err := m.Store.Lock()
	if err != nil {
		return 0, false, err
	}
	defer unlock()
	cur, err := m.Store.Load(st.Name) // another exec may have assigned it meanwhile
	if err != nil {
		return 0, false, err
	}
	if uid, ok := cur.IdentityUIDs[as]; ok {
		return uid, false, nil
	}
	if len(cur.IdentityUIDs) >= maxIdentities {
		return 0, false, fmt.Errorf("--as %s: sandbox %s has run %d identities, the most it can", as, st.Name, maxIdentities)
	}
	if cur.IdentityUIDs == nil {
		cur.IdentityUIDs = map[string]int{}
	}
	uid = IdentityUIDBase + len(cur.IdentityUIDs)
	cur.IdentityUIDs[as] = uid
	if err := m.Store.Save(cur); err != nil {
		return 0, false, err
	}
	st.IdentityUIDs = cur.IdentityUIDs
	// Under the store lock: two identities' first execs at once each write every uid.
	if err := writeIdentityUsers(cur); err != nil {
		return 0, false, fmt.Errorf("--as %s: name its uid in the sandbox's /etc/passwd: %w", as, err)
	}
	return uid, true, nil
}

// shareDirs makes /tmp and the working directory (when it is the sandbox's own tmpfs, not a
// --mount) mode 1777, as their mount options say: runc 1.1 leaves a tmpfs it mounts in the
// user namespace 0755, owned by the sandbox's root, where no identity (each its own uid)
// could write. The sticky bit keeps one identity from removing another's files. It runs as
// the sandbox's root, their owner, which needs no capability for it.
func shareDirs(st *State) error {
	c := st.Container
	dirs := []string{"/tmp"}
	if !slices.ContainsFunc(c.Mounts, func(m Mount) bool { return m.Dest == c.Workdir }) {
		dirs = append(dirs, c.Workdir)
	}
	data, err := execProcess(c, append([]string{"chmod", "1777"}, dirs...), []string{"PATH=" + defaultPath}, 0, 0, false)
	if err != nil {
		return err
	}
	f, err := processFile(data)
	if err != nil {
		return err
	}
	defer f.Close()
	args := runtimeArgs(c, "exec", "--process", "/proc/self/fd/3", c.ID)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.ExtraFiles = []*os.File{f}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := runPlaced(cmd, placementOf(st)); err != nil {
		return fmt.Errorf("make %s writable for identities: %w: %s", strings.Join(dirs, " and "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// makeIdentityCgroups makes dir below each of the container's cgroups: the ones its runtime
// put it in (from the runtime's state), or, when airlock places the container itself, the
// v2 cgroup and the v1 limit cgroups.
func makeIdentityCgroups(st *State, dir string) error {
	parents := []string{st.Cgroup}
	if st.Container.SelfCgroups {
		parents = append(parents, placementOf(st).v1...)
	} else {
		paths, err := runtimeCgroupPaths(st.Container)
		if err != nil {
			return err
		}
		parents = paths
	}
	for _, p := range parents {
		sub := filepath.Join(p, dir)
		if err := os.Mkdir(sub, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create identity cgroup %s: %w", sub, err)
		}
		// A v1 cpuset cgroup starts with no CPUs and no memory nodes: no task can join it.
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			v, err := os.ReadFile(filepath.Join(p, f))
			if err != nil {
				continue // not a cpuset hierarchy
			}
			if err := os.WriteFile(filepath.Join(sub, f), v, 0o644); err != nil {
				return fmt.Errorf("identity cgroup %s: set %s: %w", sub, f, err)
			}
		}
	}
	return nil
}

// runtimeCgroupPaths reads the cgroups runc put the container in (cgroup_paths of its
// state.json, the v2 one under the key ""), which `runc exec --cgroup DIR` enters DIR of.
func runtimeCgroupPaths(c *ContainerState) ([]string, error) {
	path := filepath.Join(c.Root, c.ID, "state.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the runtime's state (identities need runc, or crun on a hybrid host): %w", err)
	}
	var s struct {
		CgroupPaths map[string]string `json:"cgroup_paths"`
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("runtime state %s: %w", path, err)
	}
	if len(s.CgroupPaths) == 0 {
		return nil, fmt.Errorf("runtime state %s names no cgroups", path)
	}
	seen := map[string]bool{}
	var out []string
	for _, p := range s.CgroupPaths {
		if !seen[p] && strings.HasPrefix(p, cgroupV1Root+"/") {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out, nil
}
