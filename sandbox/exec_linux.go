package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// enterEnv carries the enter spec from `sandbox exec` to the `sandbox enter` helper it starts.
const enterEnv = "AIRLOCK_SANDBOX_ENTER"

// ExecOptions say how to run a command inside a sandbox.
type ExecOptions struct {
	// NoEnv leaves out the env file's proxy, CA and model API variables (and removes any the
	// caller had): the command then reaches out only through the DNS filter and the kernel's
	// redirect to the transparent proxy.
	NoEnv bool
	// UID and GID switch the command's user and group; -1 keeps the caller's.
	UID, GID int
	// Env is the caller's environment. The command does not inherit it (see execEnv): only
	// its HOME, LANG and TERM, and the variables Pass names, are read from it.
	Env []string
	// Pass lists what --env gives the command: "KEY=VALUE", or "KEY" for the caller's value
	// of KEY (nothing when the caller has none). They override the baseline and the env file.
	Pass []string
}

// enterSpec is what the helper needs to finish entering: it runs inside the sandbox's network
// namespace and cgroup already, in a mount namespace of its own.
type enterSpec struct {
	Sandbox    string   `json:"sandbox"`
	ResolvConf string   `json:"resolv_conf"`
	PublicDir  string   `json:"public_dir"`
	StateRoot  string   `json:"state_root"`
	UID        int      `json:"uid"`
	GID        int      `json:"gid"`
	Argv       []string `json:"argv"`
}

// Command prepares argv to run inside sandbox name: in its network namespace, started directly
// in its cgroup (no moment outside it), with /etc/resolv.conf pointing at its DNS filter, the
// airlock state directory hidden except for the sandbox's public files, the cgroup and bpf
// filesystems read-only, and every capability dropped (no_new_privs). The caller sets Stdin,
// Stdout and Stderr and calls Start (which must be StartCommand) and Wait.
func (m *Manager) Command(name string, argv []string, o ExecOptions) (*exec.Cmd, *State, error) {
	spec, env, st, err := m.prepareExec(name, argv, o)
	if err != nil {
		return nil, nil, err
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(m.Binary, "sandbox", "enter")
	cmd.Env = append(env, enterEnv+"="+string(data))
	return cmd, st, nil
}

// ExecInPlace replaces this process with argv inside sandbox name, confined as Command's
// commands are: on this thread it enters the sandbox's network namespace and a new mount
// namespace, moves the process into the sandbox's cgroup, fixes up the mounts, drops every
// privilege and execs. It saves the helper process Command starts (one Go start-up, about a
// third of `sandbox exec`), for callers with nothing left to do once the command runs. It
// returns only on failure, and then the process may already be in the sandbox's namespaces:
// the caller should only report and exit.
func (m *Manager) ExecInPlace(name string, argv []string, o ExecOptions) error {
	spec, env, st, err := m.prepareExec(name, argv, o)
	if err != nil {
		return err
	}
	nsPath := filepath.Join(NetnsDir, st.Netns)
	nsfd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open network namespace %s: %w", nsPath, err)
	}
	procs, err := os.OpenFile(filepath.Join(st.Cgroup, "cgroup.procs"), os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("open cgroup %s: %w", st.Cgroup, err)
	}
	// This thread becomes the command; it is never handed back to the Go scheduler.
	runtime.LockOSThread()
	if err := unix.Setns(nsfd, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("enter network namespace %s: %w", st.Netns, err)
	}
	unix.Close(nsfd)
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("new mount namespace: %w", err)
	}
	if err := unix.Mount("none", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if _, err := procs.WriteString(strconv.Itoa(os.Getpid())); err != nil {
		return fmt.Errorf("enter cgroup %s: %w", st.Cgroup, err)
	}
	procs.Close()
	return enter(m.Kernel, spec, env)
}

// prepareExec checks the sandbox and builds the enter spec and the command's environment.
func (m *Manager) prepareExec(name string, argv []string, o ExecOptions) (enterSpec, []string, *State, error) {
	if len(argv) == 0 {
		return enterSpec{}, nil, nil, errors.New("no command to run")
	}
	st, err := m.Store.Load(name)
	if err != nil {
		return enterSpec{}, nil, nil, err
	}
	if st.Phase != PhaseReady {
		return enterSpec{}, nil, nil, fmt.Errorf("sandbox %s is %s, not ready (reap or delete it)", name, st.Phase)
	}
	spec := enterSpec{
		Sandbox: st.Name, ResolvConf: st.ResolvConf(), PublicDir: st.PublicDir(), StateRoot: m.Store.StateRoot,
		UID: o.UID, GID: o.GID, Argv: argv,
	}
	env := slices.DeleteFunc(execEnv(st, o), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return k == enterEnv
	})
	return spec, env, st, nil
}

// mergeEnv sets every KEY=VALUE of add in env, replacing an earlier value.
func mergeEnv(env, add []string) []string {
	keys := map[string]bool{}
	for _, kv := range add {
		k, _, _ := strings.Cut(kv, "=")
		keys[k] = true
	}
	out := slices.DeleteFunc(env, func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return keys[k]
	})
	return append(out, add...)
}

// StartCommand starts cmd (from Command) from a thread inside the sandbox's network namespace,
// cloned straight into its cgroup and into a new mount namespace.
func StartCommand(cmd *exec.Cmd, st *State) error {
	nsPath := filepath.Join(NetnsDir, st.Netns)
	nsfd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open network namespace %s: %w", nsPath, err)
	}
	defer unix.Close(nsfd)
	cg, err := os.Open(st.Cgroup)
	if err != nil {
		return fmt.Errorf("open cgroup %s: %w", st.Cgroup, err)
	}
	defer cg.Close()
	attr := cmd.SysProcAttr
	if attr == nil {
		attr = &syscall.SysProcAttr{}
	}
	attr.UseCgroupFD, attr.CgroupFD = true, int(cg.Fd())
	attr.Unshareflags |= syscall.CLONE_NEWNS // Go also makes / recursively private in the child
	cmd.SysProcAttr = attr

	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open current network namespace: %w", err)
			return
		}
		defer unix.Close(orig)
		if err := unix.Setns(nsfd, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter network namespace %s: %w", st.Netns, err)
			return
		}
		serr := cmd.Start()
		if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
			// Leave the thread locked: it dies with this goroutine instead of being reused.
			errc <- errors.Join(serr, fmt.Errorf("leave network namespace %s: %w", st.Netns, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- serr
	}()
	return <-errc
}

// Enter is the `sandbox enter` helper: started by StartCommand inside the sandbox's network
// namespace, cgroup and a private mount namespace, it fixes up the mounts, drops privileges and
// execs the command. k lists the cgroup and bpf mounts it makes read-only. It returns only on
// failure.
func Enter(k Kernel) error {
	var spec enterSpec
	if err := json.Unmarshal([]byte(os.Getenv(enterEnv)), &spec); err != nil || len(spec.Argv) == 0 {
		return errors.New("sandbox enter is started by `airlock sandbox exec`, not by hand")
	}
	os.Unsetenv(enterEnv)
	// Capabilities, the bounding set and no_new_privs are per thread: do everything, exec
	// included, on this one.
	runtime.LockOSThread()
	return enter(k, spec, os.Environ())
}

// enter finishes entering on this (locked) thread, already in the sandbox's network namespace,
// cgroup and a mount namespace of its own: resolv.conf, the hidden state directory, read-only
// cgroup and bpf filesystems (as k lists them: a mount table it cannot read is a failure, not
// an empty one), privileges dropped; then it execs the command with env.
func enter(k Kernel, spec enterSpec, env []string) error {
	if err := unix.Mount(spec.ResolvConf, "/etc/resolv.conf", "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("point /etc/resolv.conf at the DNS filter: %w", err)
	}
	if err := hideState(spec.StateRoot, spec.PublicDir); err != nil {
		return err
	}
	if k == nil {
		return errors.New("sandbox manager: Kernel is not set")
	}
	points, err := k.MountPoints("cgroup2", "bpf")
	if err != nil {
		return fmt.Errorf("list the cgroup and bpf mounts: %w", err)
	}
	for _, p := range points {
		if err := readOnly(p); err != nil {
			return err
		}
	}
	if err := dropPrivileges(spec.UID, spec.GID); err != nil {
		return err
	}
	path, err := lookPath(spec.Argv[0], env)
	if err != nil {
		return &ExecError{Code: 127, Err: err}
	}
	err = syscall.Exec(path, spec.Argv, env)
	return &ExecError{Code: 126, Err: fmt.Errorf("exec %s: %w", path, err)}
}

// lookPath finds file in the PATH of env (the command's, which may differ from this process's):
// exec.LookPath against that PATH. This process execs right after, so setting it is harmless.
func lookPath(file string, env []string) (string, error) {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			os.Setenv("PATH", v)
		}
	}
	return exec.LookPath(file)
}

// ExecError is a failure to start the command itself, with the shell's exit code for it.
type ExecError struct {
	Code int
	Err  error
}

func (e *ExecError) Error() string { return e.Err.Error() }
func (e *ExecError) Unwrap() error { return e.Err }

// hideState covers the airlock state directory (CA key, ledger, credentials' placeholder key,
// other sandboxes) with an empty read-only tmpfs, except for this sandbox's public directory,
// which is bind-mounted back read-only at the same path.
func hideState(root, public string) error {
	fd, err := unix.Open(public, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", public, err)
	}
	defer unix.Close(fd)
	if err := unix.Mount("airlock-hidden", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return fmt.Errorf("hide %s: %w", root, err)
	}
	if err := os.MkdirAll(public, 0o755); err != nil {
		return fmt.Errorf("hide %s: %w", root, err)
	}
	if err := unix.Mount(fmt.Sprintf("/proc/self/fd/%d", fd), public, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("expose %s: %w", public, err)
	}
	if err := unix.Mount("", public, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("make %s read-only: %w", public, err)
	}
	if err := unix.Mount("", root, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return fmt.Errorf("make %s read-only: %w", root, err)
	}
	return nil
}

// readOnly re-mounts p read-only in this mount namespace (a read-only bind of itself).
func readOnly(p string) error {
	if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", p, err)
	}
	if err := unix.Mount("", p, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("make %s read-only: %w", p, err)
	}
	return nil
}

// dropPrivileges switches to uid/gid (when >= 0), sets no_new_privs and drops every capability
// from the bounding, ambient, inheritable, permitted and effective sets of this thread, so
// that even uid 0 cannot leave the namespace, the cgroup or the mounts it was given.
func dropPrivileges(uid, gid int) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	for c := 0; ; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			if errors.Is(err, unix.EINVAL) {
				break // past the last capability
			}
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	if gid >= 0 {
		if err := syscall.Setgroups(nil); err != nil {
			return fmt.Errorf("drop supplementary groups: %w", err)
		}
		if err := syscall.Setgid(gid); err != nil {
			return fmt.Errorf("setgid %d: %w", gid, err)
		}
	}
	if uid >= 0 {
		if err := syscall.Setuid(uid); err != nil {
			return fmt.Errorf("setuid %d: %w", uid, err)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("drop capabilities: %w", err)
	}
	return nil
}
