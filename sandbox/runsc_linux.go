package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// gVisor's runsc (--runtime runsc) runs the container on its own kernel in user space, the
// Sentry, and serves it files through its Gofer. airlock runs it so that it keeps what a
// runc sandbox has:
//
//   - the network: --network=host, the Sentry's sockets are the kernel's, in the sandbox's
//     network namespace (runsc is started in it) and in its cgroup (cloned into it, with
//     --ignore-cgroups), so the eBPF programs, the DNS filter and the transparent redirect
//     meet them. gVisor's own network stack would bypass the cgroup programs: it sends
//     through a packet socket.
//   - the uid: runsc runs as the sandbox's host uid (its range's first, IDBase), not as root,
//     with --rootless: it makes a user namespace in which that uid is root, and the Gofer
//     writes as it. (Run as root, this snapshot either gives the Gofer the host's root, so a
//     file the sandbox makes setuid on an rw --mount is a setuid-root file on the host, or,
//     with the spec's user namespace, fails: "error setting up chroot: error converting
//     mounts: operation not permitted", its sandbox process starting in the namespace as an
//     unmapped uid without capabilities.) Only that one uid is mapped: --user is 0.
//   - the limits: airlock places the processes in the v1 limit cgroups (SelfCgroups).

// isRunsc reports whether rt is gVisor's runsc.
func isRunsc(rt string) bool { return filepath.Base(rt) == "runsc" }

// runscMinPids is the smallest --pids runsc gets: its sandbox, Gofer and Sentry are some 65
// host tasks before the first process inside, and each process inside adds about 15 more (the
// ptrace platform's stubs and tracers), all counted by the pids controller.
const runscMinPids = 256

// planRunsc sets how c runs when its runtime is runsc: rootless, with the host network of the
// sandbox's namespace, airlock placing it in its cgroups, its state in the bundle (which the
// sandbox's uid can reach, unlike the state directory). pids is --pids (0: the default).
func planRunsc(c *ContainerState, pids int) error {
	if !isRunsc(c.Runtime) {
		return nil
	}
	if pids != 0 && pids < runscMinPids {
		return fmt.Errorf("--pids %d: --runtime runsc needs at least %d (its own host tasks count: some 65 at start, about 15 per process inside)", pids, runscMinPids)
	}
	c.Rootless, c.SelfCgroups = true, true
	c.Root = filepath.Join(c.Bundle, "runsc")
	c.Global = []string{"--rootless", "--network=host", "--ignore-cgroups"}
	return checkMountsReachable(c)
}

// runscSpec adapts spec to runsc's rootless mode: its user namespace maps the one uid and gid
// runsc runs as (root in the namespace runsc makes) to the container's root.
func runscSpec(c *ContainerState, spec *specs.Spec) {
	if !c.Rootless {
		return
	}
	one := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 0, Size: 1}}
	spec.Linux.UIDMappings, spec.Linux.GIDMappings = one, one
}

// runAs is the host uid c's runtime runs as: the sandbox's own for a rootless runtime, else
// 0 (root).
func runAs(c *ContainerState) uint32 {
	if c.Rootless {
		return c.IDBase
	}
	return 0
}

// shareWithRuntime gives a rootless runtime what it must open as the sandbox's uid: its state
// directory and the bundle's config.json (written by root, 0600).
func shareWithRuntime(c *ContainerState) error {
	if !c.Rootless {
		return nil
	}
	id := int(c.IDBase)
	if err := os.MkdirAll(c.Root, 0o700); err != nil {
		return fmt.Errorf("create runtime root %s: %w", c.Root, err)
	}
	for _, p := range []string{c.Root, filepath.Join(c.Bundle, "config.json")} {
		if err := os.Lchown(p, id, id); err != nil {
			return fmt.Errorf("give %s to the sandbox's uid: %w", p, err)
		}
	}
	return nil
}

// becomeUID makes this process uid (and its gid, no supplementary groups) before it execs a
// rootless runtime; 0 does nothing.
func becomeUID(uid uint32) error {
	if uid == 0 {
		return nil
	}
	err := errors.Join(unix.Setgroups(nil), unix.Setresgid(int(uid), int(uid), int(uid)), unix.Setresuid(int(uid), int(uid), int(uid)))
	if err != nil {
		return fmt.Errorf("become uid %d: %w", uid, err)
	}
	return nil
}

// checkExecUser refuses ids other than root's for a rootless runtime, which maps only one.
func checkExecUser(c *ContainerState, uid, gid int) error {
	if c.Rootless && (uid > 0 || gid > 0) {
		return fmt.Errorf("--user %d:%d: --runtime %s maps only the sandbox's root (uid 0)", uid, gid, filepath.Base(c.Runtime))
	}
	return nil
}

// CreatesOnce reports whether runtime can create a container with its one command, to be
// started later (CreateOptions.OnceProcess): runsc's rootless mode has no `create`, only
// `run` (OnceCommand).
func CreatesOnce(runtime string) bool { return !isRunsc(runtime) }

// checkMountsReachable refuses a --mount whose source a rootless runtime, running as an
// unprivileged uid of no group of the host's, could not open: every directory on the way must
// be searchable by others, and the source readable by them. (runc and crun open the sources
// as root; runsc's sandbox would otherwise fail to start with "cannot read client sync file".)
func checkMountsReachable(c *ContainerState) error {
	if !c.Rootless {
		return nil
	}
	for _, m := range c.Mounts {
		if err := reachableByOthers(m.Source); err != nil {
			return fmt.Errorf("--mount %s:%s: --runtime %s runs as the sandbox's unprivileged uid, which cannot reach it: %w (chmod o+x the directories, o+r the source)",
				m.Source, m.Dest, filepath.Base(c.Runtime), err)
		}
	}
	return nil
}

// reachableByOthers checks path's directories are searchable, and path readable (and
// searchable, a directory), by a uid that owns none of them.
func reachableByOthers(path string) error {
	dir := filepath.Dir(path)
	for {
		var st unix.Stat_t
		if err := unix.Stat(dir, &st); err != nil {
			return err
		}
		if st.Mode&0o001 == 0 {
			return fmt.Errorf("%s is mode %04o, owner %d", dir, st.Mode&0o7777, st.Uid)
		}
		if dir == "/" {
			break
		}
		dir = filepath.Dir(dir)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return err
	}
	want := uint32(0o004)
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		want |= 0o001
	}
	if st.Mode&want != want {
		return fmt.Errorf("%s is mode %04o, owner %d", path, st.Mode&0o7777, st.Uid)
	}
	return nil
}
