package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ExecOptions say how to run a command inside a sandbox.
type ExecOptions struct {
	// NoEnv leaves out the env file's proxy, CA and model API variables (and removes any the
	// caller had): the command then reaches out only through the DNS filter and the kernel's
	// redirect to the transparent proxy.
	NoEnv bool
	// UID and GID are the command's user and group inside the sandbox; -1 means root (0),
	// whom the sandbox's user namespace maps to an unprivileged host uid.
	UID, GID int
	// Env is the caller's environment. The command does not inherit it (see execEnv): only
	// its LANG and TERM, and the variables Pass names, are read from it.
	Env []string
	// Pass lists what --env gives the command: "KEY=VALUE", or "KEY" for the caller's value
	// of KEY (nothing when the caller has none). They override the baseline and the env file.
	Pass []string
}

// Command prepares argv to run inside sandbox name's container through its OCI runtime
// (`runtime exec`): in the container's namespaces and cgroups, with no capabilities,
// no_new_privs and the container's seccomp profile. The caller sets Stdin, Stdout and Stderr
// and calls StartCommand and Wait; the runtime's exit status is the command's (128+N for a
// death by signal N), and it passes on the signals it gets.
func (m *Manager) Command(name string, argv []string, o ExecOptions) (*exec.Cmd, *State, error) {
	st, proc, err := m.prepareExec(name, argv, o)
	if err != nil {
		return nil, nil, err
	}
	args := runtimeArgs(st.Container, "exec", "--process", "/proc/self/fd/3", st.Container.ID)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.ExtraFiles = []*os.File{proc}
	cmd.Env = []string{"PATH=" + defaultPath}
	return cmd, st, nil
}

// OnceCommand prepares argv to run as sandbox name's container (created with
// CreateOptions.Once): the bundle's process becomes argv under a small init that passes
// signals on and reaps, and the runtime's `run` starts it in the foreground and deletes the
// container when it ends. Use it as Command's result.
func (m *Manager) OnceCommand(name string, argv []string, o ExecOptions) (*exec.Cmd, *State, error) {
	st, err := m.Store.Load(name)
	if err != nil {
		return nil, nil, err
	}
	if st.Phase != PhaseReady || st.Container == nil || !st.Container.Once {
		return nil, nil, fmt.Errorf("sandbox %s was not created to run one command", name)
	}
	if len(argv) == 0 || o.UID >= IDRangeSize || o.GID >= IDRangeSize {
		return nil, nil, fmt.Errorf("no command, or --user %d:%d outside 0-%d", o.UID, o.GID, IDRangeSize-1)
	}
	if st.Container.SelfCgroups {
		if _, err := createV1Cgroups(st.Container.CgroupsPath, st.Limits); err != nil {
			return nil, nil, err
		}
	}
	_, tty := isTerminal(os.Stdin)
	if err := checkExecUser(st.Container, o.UID, o.GID); err != nil {
		return nil, nil, err
	}
	if err := setBundleProcess(st.Container, onceArgv(argv), execEnv(st, o), o.UID, o.GID, tty); err != nil {
		return nil, nil, err
	}
	if err := shareWithRuntime(st.Container); err != nil {
		return nil, nil, err
	}
	args := runtimeArgs(st.Container, "run", "--bundle", st.Container.Bundle, st.Container.ID)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = []string{"PATH=" + defaultPath}
	return cmd, st, nil
}

// onceArgv runs argv as the child of a shell that is the container's first process: it passes
// INT, TERM and HUP on, reaps, and exits with argv's status (128+N for a death by signal N).
// (The first process of a PID namespace ignores signals it has no handler for; argv must not
// be it.) Its stdin is passed through fd 3: a shell gives an asynchronous command /dev/null
// unless it redirects stdin itself.
func onceArgv(argv []string) []string {
	const script = `trap 'kill -INT $c 2>/dev/null' INT; trap 'kill -TERM $c 2>/dev/null' TERM; trap 'kill -HUP $c 2>/dev/null' HUP
exec 3<&0
"$@" <&3 3<&- &
c=$!
while :; do wait $c; s=$?; kill -0 $c 2>/dev/null || exit $s; done`
	return append([]string{"/bin/sh", "-c", script, "sh"}, argv...)
}

// StartCommand starts cmd (from Command) inside the sandbox's network namespace and closes
// the process description it passes.
func StartCommand(cmd *exec.Cmd, st *State) error {
	err := startPlaced(cmd, placementOf(st))
	for _, f := range cmd.ExtraFiles {
		f.Close()
	}
	return err
}

// ExecInPlace replaces this process with the runtime's `exec` of argv in sandbox name, as
// Command does: for callers with nothing left to do once the command runs (the exit status
// and signals are then the command's own). It returns only on failure, and then this thread
// may be in the sandbox's network namespace: the caller should only report and exit.
func (m *Manager) ExecInPlace(name string, argv []string, o ExecOptions) error {
	st, proc, err := m.prepareExec(name, argv, o)
	if err != nil {
		return err
	}
	args := runtimeArgs(st.Container, "exec", "--process", fmt.Sprintf("/proc/self/fd/%d", proc.Fd()), st.Container.ID)
	// The memory file must survive the exec; Fd() made it blocking, and nothing else is set.
	if _, err := unix.FcntlInt(proc.Fd(), unix.F_SETFD, 0); err != nil {
		return fmt.Errorf("pass the process file: %w", err)
	}
	p := placementOf(st)
	// This thread execs the runtime where p says; it is never handed back to the Go scheduler.
	runtime.LockOSThread()
	if p.cgroup2 != "" {
		if err := os.WriteFile(filepath.Join(p.cgroup2, "cgroup.procs"), []byte(fmt.Sprint(os.Getpid())), 0o644); err != nil {
			return fmt.Errorf("enter cgroup %s: %w", p.cgroup2, err)
		}
	}
	if _, err := enterPlacement(p); err != nil {
		return err
	}
	if err := becomeUID(p.runAs); err != nil {
		return err
	}
	err = syscall.Exec(args[0], args, []string{"PATH=" + defaultPath})
	return fmt.Errorf("exec %s: %w", args[0], err)
}

// prepareExec checks the sandbox and writes the runtime's process description of argv.
func (m *Manager) prepareExec(name string, argv []string, o ExecOptions) (*State, *os.File, error) {
	if len(argv) == 0 {
		return nil, nil, errors.New("no command to run")
	}
	st, err := m.Store.Load(name)
	if err != nil {
		return nil, nil, err
	}
	if st.Phase != PhaseReady {
		return nil, nil, fmt.Errorf("sandbox %s is %s, not ready (reap or delete it)", name, st.Phase)
	}
	if st.Container == nil {
		return nil, nil, fmt.Errorf("sandbox %s has no container (made by an older airlock): delete and create it again", name)
	}
	if st.Container.Once {
		return nil, nil, fmt.Errorf("sandbox %s runs one command (exec --ephemeral), not more", name)
	}
	if o.UID >= IDRangeSize || o.GID >= IDRangeSize {
		return nil, nil, fmt.Errorf("--user %d:%d: the sandbox maps uids and gids 0-%d", o.UID, o.GID, IDRangeSize-1)
	}
	if err := checkExecUser(st.Container, o.UID, o.GID); err != nil {
		return nil, nil, err
	}
	_, tty := isTerminal(os.Stdin)
	data, err := execProcess(st.Container, argv, execEnv(st, o), o.UID, o.GID, tty)
	if err != nil {
		return nil, nil, err
	}
	f, err := processFile(data)
	if err != nil {
		return nil, nil, err
	}
	return st, f, nil
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) (*unix.Termios, bool) {
	t, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return t, err == nil
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

// ExecError is a failure to start the command itself, with the shell's exit code for it.
type ExecError struct {
	Code int
	Err  error
}

func (e *ExecError) Error() string { return e.Err.Error() }
func (e *ExecError) Unwrap() error { return e.Err }
