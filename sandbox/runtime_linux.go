package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// runtimeArgs are the runtime's global flags (its private state directory) and args.
func runtimeArgs(c *ContainerState, args ...string) []string {
	out := append([]string{c.Runtime, "--root", c.Root}, c.Global...)
	return append(out, args...)
}

// placement is where a runtime process starts: in the sandbox's network namespace and, when
// airlock places the container itself (ContainerState.SelfCgroups), in its v2 cgroup and v1
// limit cgroups, which the container's processes then inherit.
type placement struct {
	netns       string
	cgroup2     string
	v1          []string
	hideUnified bool
	runAs       uint32 // the host uid the runtime runs as (0: root)
}

// placementOf is where st's runtime processes start.
func placementOf(st *State) placement {
	p := placement{netns: filepath.Join(NetnsDir, st.Netns), runAs: runAs(st.Container)}
	if st.Container.SelfCgroups {
		p.cgroup2, p.hideUnified = st.Cgroup, true
		for _, h := range v1LimitDirs {
			if base := filepath.Join(cgroupV1Root, h); isCgroupV1(base) {
				p.v1 = append(p.v1, filepath.Join(base, st.Container.CgroupsPath))
			}
		}
	}
	return p
}

// placementIn is placementOf(st) in the identity cgroup sub below the sandbox's ("": the
// sandbox's own). Only where airlock places the container itself does the placement name
// cgroups; runc enters sub itself (exec --cgroup).
func placementIn(st *State, sub string) placement {
	p := placementOf(st)
	if sub == "" || p.cgroup2 == "" {
		return p
	}
	p.cgroup2 = filepath.Join(p.cgroup2, sub)
	for i, d := range p.v1 {
		p.v1[i] = filepath.Join(d, sub)
	}
	return p
}

// runContainer creates and starts st's container from its bundle, detached, with the runtime
// started where placementOf says (making the v1 cgroups first when airlock places it); the
// runtime's output goes to logFile, whose last lines an error quotes.
func runContainer(st *State, logFile string) error {
	c := st.Container
	logf, start, err := prepareRuntime(st, logFile)
	if err != nil {
		return err
	}
	defer logf.Close()
	argv := runtimeArgs(c, "run", "--detach", "--bundle", c.Bundle, c.ID)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err = runPlaced(cmd, placementOf(st)); err != nil {
		return fmt.Errorf("%s run %s: %w: %s", filepath.Base(c.Runtime), c.ID, err, logTail(logFile, start))
	}
	return nil
}

// prepareRuntime makes the runtime's root (and the v1 cgroups when airlock places the
// container) and opens logFile for appending, returning its size before.
func prepareRuntime(st *State, logFile string) (*os.File, int64, error) {
	c := st.Container
	if err := os.MkdirAll(c.Root, 0o700); err != nil {
		return nil, 0, fmt.Errorf("create runtime root %s: %w", c.Root, err)
	}
	if err := shareWithRuntime(c); err != nil {
		return nil, 0, err
	}
	if c.SelfCgroups {
		if _, err := createV1Cgroups(c.CgroupsPath, st.Limits); err != nil {
			return nil, 0, err
		}
	}
	logf, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, 0, fmt.Errorf("open log: %w", err)
	}
	start, _ := logf.Seek(0, 2)
	return logf, start, nil
}

// runtimeDir and runtimeEnv are where and with what environment the runtime runs: the root
// directory and only PATH.
const runtimeDir = "/"

func runtimeEnv() []string { return []string{"PATH=" + defaultPath} }

// runPlaced runs cmd (in / with the runtime's minimal environment) where p says and waits.
func runPlaced(cmd *exec.Cmd, p placement) error {
	cmd.Dir, cmd.Env = runtimeDir, runtimeEnv()
	err := startPlaced(cmd, p)
	if err == nil {
		err = cmd.Wait()
	}
	return err
}

// createContainer makes op (run by onceArgv's shell) the process of st's bundle and has the
// runtime create the container in the background (`create`, which returns once the
// container's process waits to be started), placed as runContainer's, with op's stdio passed
// through to the process and the runtime's own log in logFile. It makes this
// process a child subreaper, so that the container's first process, orphaned when the runtime
// exits, becomes its child: startContainer's caller waits for it (waitContainer).
func createContainer(st *State, op *OnceProcess, logFile string) <-chan error {
	done := make(chan error, 1)
	c := st.Container
	if err := checkExecUser(c, op.Exec.UID, op.Exec.GID); err != nil {
		done <- err
		return done
	}
	if err := setBundleProcess(c, onceArgv(op.Argv), execEnv(st, op.Exec), op.Exec.UID, op.Exec.GID, false); err != nil {
		done <- err
		return done
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		done <- fmt.Errorf("become a child subreaper: %w", err)
		return done
	}
	logf, start, err := prepareRuntime(st, logFile)
	if err != nil {
		done <- err
		return done
	}
	logArgs := []string{"--log", logFile}
	if c.Rootless { // it could not open the log: its errors go to the command's stderr
		logArgs = nil
	}
	argv := append(runtimeArgs(c, logArgs...), "create", "--bundle", c.Bundle, "--pid-file", containerPidFile(c), c.ID)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = op.Stdio[0], op.Stdio[1], op.Stdio[2]
	// Started here, waited for in the background: the runtime's create is what the sandbox
	// waits for longest, so it starts before the caller goes on to the sidecar's start-up
	// (a goroutine's thread would first have to be scheduled beside it).
	cmd.Dir, cmd.Env = runtimeDir, runtimeEnv()
	if err := startPlaced(cmd, placementOf(st)); err != nil {
		logf.Close()
		done <- fmt.Errorf("%s create %s: %w", filepath.Base(c.Runtime), c.ID, err)
		return done
	}
	go func() {
		defer logf.Close()
		if err := cmd.Wait(); err != nil {
			done <- fmt.Errorf("%s create %s: %w: %s", filepath.Base(c.Runtime), c.ID, err, logTail(logFile, start))
			return
		}
		done <- nil
	}()
	return done
}

// containerPidFile is where `create` writes the pid of the container's first process.
func containerPidFile(c *ContainerState) string { return filepath.Join(c.Bundle, "pid") }

// startContainer has the runtime start the process of the container createContainer made
// and returns its pid.
func startContainer(st *State) (int, error) {
	c := st.Container
	data, err := os.ReadFile(containerPidFile(c))
	if err != nil {
		return 0, fmt.Errorf("container %s: %w", c.ID, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("container %s: pid file holds %q", c.ID, data)
	}
	if filepath.Base(c.Runtime) == "runc" {
		if ok, err := startByFifo(filepath.Join(c.Root, c.ID, "exec.fifo"), pid); ok || err != nil {
			return pid, err
		}
	}
	argv := runtimeArgs(c, "start", c.ID)
	cmd := exec.Command(argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := runPlaced(cmd, placement{hideUnified: c.SelfCgroups, runAs: runAs(c)}); err != nil {
		return 0, fmt.Errorf("%s start %s: %w: %s", filepath.Base(c.Runtime), c.ID, err, bytes.TrimSpace(out.Bytes()))
	}
	return pid, nil
}

// startByFifo starts a created runc container the way `runc start` does (runc 1.0 to 1.2),
// without paying for a runtime process on the path to the command: the container's process
// waits until it has written a byte into runc's exec FIFO; reading it lets the process go on
// to exec the command, and the FIFO is removed (runc then sees the container running). It
// returns false when fifo is not there (a runc that works otherwise: call its `start`). Other
// runtimes use the FIFO the other way round (crun's start writes), so only runc gets this. A process
// that dies before it writes is an error, never a hang: its pidfd is watched beside the FIFO.
func startByFifo(fifo string, pid int) (bool, error) {
	var st unix.Stat_t
	if err := unix.Lstat(fifo, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return false, nil
	}
	pfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return true, fmt.Errorf("container process %d: %w", pid, err)
	}
	defer unix.Close(pfd)
	// Non-blocking: opening a FIFO to read returns at once; the writer's open then returns.
	ffd, err := unix.Open(fifo, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return true, fmt.Errorf("open %s: %w", fifo, err)
	}
	defer unix.Close(ffd)
	var got int
	buf := make([]byte, 16)
	for {
		fds := []unix.PollFd{{Fd: int32(ffd), Events: unix.POLLIN}, {Fd: int32(pfd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil && !errors.Is(err, unix.EINTR) {
			return true, fmt.Errorf("wait for the container's process %d: %w", pid, err)
		}
		if fds[0].Revents&(unix.POLLIN|unix.POLLHUP) != 0 {
			n, err := unix.Read(ffd, buf)
			switch {
			case n > 0:
				got += n
				continue
			case err == nil && n == 0 && got > 0: // the writer closed it (it went on to exec): started
				return true, os.Remove(fifo)
			case err == nil && n == 0:
				return true, fmt.Errorf("the container's process %d closed %s without starting", pid, fifo)
			case err != nil && !errors.Is(err, unix.EAGAIN):
				return true, fmt.Errorf("read %s: %w", fifo, err)
			}
		}
		if fds[1].Revents != 0 && fds[0].Revents&unix.POLLIN == 0 {
			if got > 0 {
				return true, os.Remove(fifo)
			}
			return true, fmt.Errorf("the container's process %d died before it started", pid)
		}
	}
}

// WaitContainer waits for the first process of a container started by StartOnce (a child
// of this process, its subreaper) and returns its exit code, 128+N for a death by signal N.
func WaitContainer(pid int) (int, error) {
	for {
		var ws unix.WaitStatus
		_, err := unix.Wait4(pid, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("wait for the container's process %d: %w", pid, err)
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ws.ExitStatus(), nil
	}
}

// startPlaced starts cmd from a thread that enterPlacement moved where p says, cloned straight
// into p's v2 cgroup, so that cmd runs there from its first instruction. The thread is never
// handed back: it ends with its goroutine.
func startPlaced(cmd *exec.Cmd, p placement) error {
	if p.runAs != 0 {
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: p.runAs, Gid: p.runAs, Groups: []uint32{}}
	}
	if p.cgroup2 != "" {
		cg, err := os.Open(p.cgroup2)
		if err != nil {
			return fmt.Errorf("open cgroup %s: %w", p.cgroup2, err)
		}
		defer cg.Close()
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(cg.Fd())
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread ends with this goroutine
		back, err := enterPlacement(p)
		if err != nil {
			errc <- err
			return
		}
		err = cmd.Start()
		errc <- errors.Join(err, back())
	}()
	return <-errc
}

// enterPlacement moves the calling (locked) thread into p's network namespace and v1
// cgroups. When airlock places the container itself, it also gives the thread a mount
// namespace in which the cgroup v2 hierarchy is covered by an empty tmpfs: crun 1.8 refuses
// any hybrid host whose v2 hierarchy has a controller, even with its cgroup manager disabled;
// there it sees a v1-only host, and with the manager disabled touches no cgroup at all.
//
// back moves the thread out of the v1 cgroups again (its namespaces stay: the thread is never
// handed back to the scheduler).
func enterPlacement(p placement) (back func() error, err error) {
	if p.netns != "" {
		nsfd, err := unix.Open(p.netns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("open network namespace %s: %w", p.netns, err)
		}
		defer unix.Close(nsfd)
		if err := unix.Setns(nsfd, unix.CLONE_NEWNET); err != nil {
			return nil, fmt.Errorf("enter network namespace %s: %w", p.netns, err)
		}
	}
	if p.hideUnified {
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			return nil, fmt.Errorf("new mount namespace: %w", err)
		}
		if err := unix.Mount("none", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
			return nil, fmt.Errorf("make mounts private: %w", err)
		}
		unified := filepath.Join(cgroupV1Root, "unified")
		if err := unix.Mount("airlock-hidden", unified, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k"); err != nil {
			return nil, fmt.Errorf("cover %s: %w", unified, err)
		}
	}
	return moveThreadV1(p.v1)
}

// logTail is what was appended to logFile from offset on, trimmed to its last 500 bytes.
func logTail(logFile string, offset int64) string {
	data, err := os.ReadFile(logFile)
	if err != nil || int64(len(data)) < offset {
		return "(no output)"
	}
	out := strings.TrimSpace(string(data[offset:]))
	if len(out) > 500 {
		out = "..." + out[len(out)-500:]
	}
	if out == "" {
		return "(no output)"
	}
	return out
}

// deleteContainer kills and deletes st's container (a missing one is not an error), kills
// whatever still runs in the sandbox's v2 cgroup (a create that crashed before the runtime
// recorded its container leaves processes only the cgroup knows), then removes the cgroup v1
// directories of the container on a hybrid host. The v2 cgroup itself, with the kernel
// programs, is the cgroup step's to remove.
//
// A container made with its one command (ContainerState.Waiting) by runc or crun is deleted
// without a runtime process: once its cgroup is empty nothing of it runs, and what such a
// runtime's delete of a stopped container leaves to remove is its cgroups (removed here and by
// the cgroup step) and its state directory under the private root.
func deleteContainer(st *State) error {
	c := st.Container
	state := filepath.Join(c.Root, c.ID)
	if c.Waiting && slices.Contains([]string{"runc", "crun"}, filepath.Base(c.Runtime)) {
		err := killCgroup(st.Cgroup)
		if err == nil {
			err = os.RemoveAll(state)
		}
		if c.CgroupsPath != "" {
			err = errors.Join(err, removeV1Cgroups(c.CgroupsPath))
		}
		return err
	}
	var errs []error
	if _, err := os.Stat(state); err == nil {
		argv := runtimeArgs(c, "delete", "--force", c.ID)
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = []string{"PATH=" + defaultPath}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := startPlaced(cmd, placement{hideUnified: c.SelfCgroups, runAs: runAs(c)})
		if err == nil {
			err = cmd.Wait()
		}
		if err != nil && !containerGone(out.Bytes()) {
			errs = append(errs, fmt.Errorf("%s delete %s: %w: %s", filepath.Base(c.Runtime), c.ID, err, bytes.TrimSpace(out.Bytes())))
		}
	}
	errs = append(errs, killCgroup(st.Cgroup))
	if c.CgroupsPath != "" {
		errs = append(errs, removeV1Cgroups(c.CgroupsPath))
	}
	return errors.Join(errs...)
}

// killCgroup kills every process of a v2 cgroup and waits until it is empty; a missing
// cgroup is not an error.
func killCgroup(path string) error {
	if path == "" || checkCgroup2Dir(path) != nil {
		return nil
	}
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	if err := os.WriteFile(filepath.Join(path, "cgroup.kill"), []byte("1"), 0o644); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("kill cgroup %s: %w", path, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return waitUnpopulated(ctx, path)
}

func containerGone(out []byte) bool {
	s := strings.ToLower(string(out))
	return strings.Contains(s, "does not exist") || strings.Contains(s, "no such file")
}

// removeV1Cgroups removes rel from every cgroup v1 hierarchy mounted under /sys/fs/cgroup
// (deepest first); missing directories are not errors. The v2 cgroup is the cgroup step's.
func removeV1Cgroups(rel string) error {
	hier, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		return nil
	}
	var errs []error
	for _, h := range hier {
		base := filepath.Join("/sys/fs/cgroup", h.Name())
		var st unix.Statfs_t
		if unix.Statfs(base, &st) != nil || st.Type != unix.CGROUP_SUPER_MAGIC {
			continue
		}
		path := filepath.Join(base, rel)
		if !strings.HasPrefix(path, base+"/") {
			continue
		}
		if err := rmdirTree(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// execProcess is the process.json `runtime exec` runs: argv through `sh -c 'exec "$@"'` (so
// that a missing command exits 127 and an unexecutable one 126, as in a shell), as uid:gid
// (inside ids) in the working directory, with env, no capabilities and no_new_privs.
func execProcess(c *ContainerState, argv, env []string, uid, gid int, tty bool) ([]byte, error) {
	p := processSpec(c, env, uid, gid, tty)
	p.Args = append([]string{"/bin/sh", "-c", `exec "$@"`, "sh"}, argv...)
	data, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encode process: %w", err)
	}
	return data, nil
}

// processSpec is a process of c without its arguments: uid and gid (-1: the image's user, or
// root), no capabilities, no new privileges, in the working directory.
func processSpec(c *ContainerState, env []string, uid, gid int, tty bool) specs.Process {
	if uid < 0 && c.User != nil {
		uid, gid = c.User.UID, c.User.GID
	}
	if uid < 0 {
		uid = 0
	}
	if gid < 0 {
		gid = uid
	}
	return specs.Process{
		Terminal:        tty,
		User:            specs.User{UID: uint32(uid), GID: uint32(gid)},
		Env:             env,
		Cwd:             c.Workdir,
		NoNewPrivileges: true,
		Capabilities:    &specs.LinuxCapabilities{},
	}
}

// setBundleProcess makes argv (run as is) the process of c's bundle, as execProcess describes:
// in the config.json writeBundle kept (a container made with its one command), or the one on
// disk.
func setBundleProcess(c *ContainerState, argv, env []string, uid, gid int, tty bool) error {
	path := filepath.Join(c.Bundle, "config.json")
	spec := c.spec
	if spec == nil {
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("read bundle: %w", err)
		}
		spec = new(specs.Spec)
		if err := json.Unmarshal(data, spec); err != nil {
			return fmt.Errorf("bundle %s: %w", path, err)
		}
	}
	p := processSpec(c, env, uid, gid, tty)
	p.Args = argv
	spec.Process = &p
	data, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("encode config.json: %w", err)
	}
	return writeFileReplace(path, data, 0o600)
}

// processFile puts data in an anonymous memory file the runtime reads by /proc path. The file
// is inherited across exec (no close-on-exec); the runtime closes it before the command runs.
func processFile(data []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate("airlock-process", 0)
	if err != nil {
		return nil, fmt.Errorf("memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "airlock-process")
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, fmt.Errorf("write process: %w", err)
	}
	return f, nil
}
