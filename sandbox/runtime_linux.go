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
	"runtime"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// runtimeArgs are the runtime's global flags (its private state directory) and args.
func runtimeArgs(c *ContainerState, args ...string) []string {
	return append([]string{c.Runtime, "--root", c.Root}, args...)
}

// runContainer creates and starts the container from its bundle, detached, with the runtime
// started inside the network namespace netnsPath; the runtime's output goes to logFile, whose
// last lines an error quotes.
func runContainer(c *ContainerState, netnsPath, logFile string) error {
	if err := os.MkdirAll(c.Root, 0o700); err != nil {
		return fmt.Errorf("create runtime root %s: %w", c.Root, err)
	}
	logf, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("open log: %w", err)
	}
	defer logf.Close()
	start, _ := logf.Seek(0, 2)
	argv := runtimeArgs(c, "run", "--detach", "--bundle", c.Bundle, c.ID)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr, cmd.Dir = logf, logf, "/"
	cmd.Env = []string{"PATH=" + defaultPath}
	err = startInNetns(cmd, netnsPath)
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		return fmt.Errorf("%s run %s: %w: %s", filepath.Base(c.Runtime), c.ID, err, logTail(logFile, start))
	}
	return nil
}

// startInNetns starts cmd from a thread inside the network namespace netnsPath, so that cmd
// runs in it; the thread goes back to this process's namespace afterwards (or, if it cannot,
// dies with its goroutine).
func startInNetns(cmd *exec.Cmd, netnsPath string) error {
	nsfd, err := unix.Open(netnsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open network namespace %s: %w", netnsPath, err)
	}
	defer unix.Close(nsfd)
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
			errc <- fmt.Errorf("enter network namespace %s: %w", netnsPath, err)
			return
		}
		serr := cmd.Start()
		if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(serr, fmt.Errorf("leave network namespace %s: %w", netnsPath, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- serr
	}()
	return <-errc
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

// deleteContainer kills and deletes the container (a missing one is not an error), then
// removes the cgroup v1 directories the runtime made for it on a hybrid host, if it left any.
func deleteContainer(c *ContainerState) error {
	var errs []error
	if _, err := os.Stat(filepath.Join(c.Root, c.ID)); err == nil {
		argv := runtimeArgs(c, "delete", "--force", c.ID)
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = []string{"PATH=" + defaultPath}
		if out, err := cmd.CombinedOutput(); err != nil && !containerGone(out) {
			errs = append(errs, fmt.Errorf("%s delete %s: %w: %s", filepath.Base(c.Runtime), c.ID, err, bytes.TrimSpace(out)))
		}
	}
	if c.CgroupsPath != "" {
		errs = append(errs, removeV1Cgroups(c.CgroupsPath))
	}
	return errors.Join(errs...)
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
	if uid < 0 {
		uid = 0
	}
	if gid < 0 {
		gid = uid
	}
	p := specs.Process{
		Terminal:        tty,
		User:            specs.User{UID: uint32(uid), GID: uint32(gid)},
		Args:            append([]string{"/bin/sh", "-c", `exec "$@"`, "sh"}, argv...),
		Env:             env,
		Cwd:             c.Workdir,
		NoNewPrivileges: true,
		Capabilities:    &specs.LinuxCapabilities{},
	}
	data, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encode process: %w", err)
	}
	return data, nil
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
