package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
)

// Restart back-off of the supervisor: it starts at minBackoff, doubles up to maxBackoff, and
// returns to minBackoff after a sidecar ran healthyRun without dying.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
	healthyRun = 30 * time.Second
	// StopGrace is how long a sidecar gets to stop after SIGTERM (it revokes its Vault leases)
	// before it is killed.
	StopGrace = 30 * time.Second
)

// ErrSidecarNeverReady is returned by Supervise when the first sidecar exits before it ever
// answered /readyz: a configuration error that restarting cannot fix.
var ErrSidecarNeverReady = errors.New("the sidecar exited before it was ready")

// Supervise runs the sandbox's sidecar (`airlock run ...` from the state file) and restarts it
// whenever it dies, until ctx ends; then it stops the sidecar with SIGTERM, waiting StopGrace
// before SIGKILL. The sidecar's output and the supervisor's own JSON log lines go to logOut.
// While it runs, the sidecar's pid is in the sandbox's sidecar.pid file.
//
// When adopt is non-zero, the first sidecar is that already running process (Create starts
// the first sidecar itself, so that the supervisor's start-up is not on the critical path): it
// is watched through a pidfd and replaced by a child of the supervisor when it dies.
//
// The sidecars the supervisor starts get SIGTERM if the supervisor dies (Pdeathsig); the
// kernel programs stay pinned and attached either way, so the sandbox stays closed while no
// sidecar runs.
//
// wanted is asked before every restart; when it says the sandbox is gone or being deleted
// (its state file removed, say, by a reap after a crashed create), the supervisor exits.
func Supervise(ctx context.Context, st *State, adopt int, wanted func() bool, logOut *os.File) error {
	logger := logrus.New()
	logger.SetOutput(logOut)
	logger.SetFormatter(&logrus.JSONFormatter{TimestampFormat: time.RFC3339Nano})
	s := &supervisor{st: st, logOut: logOut, wanted: wanted, backoff: minBackoff,
		log: logger.WithFields(logrus.Fields{"sandbox": st.Name, "component": "supervisor"})}

	// Pdeathsig belongs to the thread that forked the child: keep this goroutine on one thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for restarts := 0; ; restarts++ {
		var run *sidecarRun
		var err error
		if restarts == 0 && adopt > 0 {
			run, err = s.adopt(adopt)
		} else {
			run, err = s.spawn(restarts)
		}
		if err != nil {
			return err
		}
		exitErr, stopped := s.watch(ctx, run)
		if stopped {
			return nil
		}
		if again, err := s.decide(exitErr, run); !again {
			return err
		}
		if !s.pause(ctx) {
			return nil
		}
	}
}

// supervisor is one Supervise loop; its stages are adopt or spawn (a sidecar runs), watch
// (until it exits or the supervisor is told to stop), decide (restart or not) and pause (the
// back-off).
type supervisor struct {
	st        *State
	logOut    *os.File
	log       *logrus.Entry
	wanted    func() bool
	backoff   time.Duration
	everReady bool
}

// sidecarRun is one running sidecar: done gets its exit, stop ends it.
type sidecarRun struct {
	pid   int
	began time.Time
	done  chan error
	stop  func()
}

// adopt watches the already running first sidecar through a pidfd.
func (s *supervisor) adopt(pid int) (*sidecarRun, error) {
	fd, err := pidfd(pid)
	if err != nil {
		return nil, fmt.Errorf("adopt sidecar %d: %w", pid, err)
	}
	run := &sidecarRun{pid: pid, began: time.Now(), done: make(chan error, 1)}
	tick, _ := procStart(pid)
	go func() {
		defer closeFd(fd)
		for !waitPidfd(fd, time.Minute) && alive(pid, tick) {
		}
		run.done <- errors.New("sidecar exited")
	}()
	run.stop = func() {
		if err := stopProcess(pid, tick, StopGrace); err != nil {
			s.log.WithError(err).Warn("stop adopted sidecar")
		}
		<-run.done
	}
	s.log.WithField("pid", pid).Info("supervising sidecar")
	return run, nil
}

// spawn starts a sidecar as the supervisor's child; it gets SIGTERM if the supervisor dies.
func (s *supervisor) spawn(restarts int) (*sidecarRun, error) {
	cmd := exec.Command(s.st.Binary, s.st.SidecarArgs...)
	cmd.Env = withoutNotify(os.Environ())
	cmd.Stdout, cmd.Stderr = s.logOut, s.logOut
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start sidecar: %w", err)
	}
	run := &sidecarRun{pid: cmd.Process.Pid, began: time.Now(), done: make(chan error, 1)}
	start, _ := procStart(run.pid)
	_ = writePidFile(s.st.sidecarPidFile(), run.pid, start)
	go func() { run.done <- cmd.Wait() }()
	run.stop = func() { stopSidecar(cmd, run.done, s.log) }
	s.log.WithFields(logrus.Fields{"pid": run.pid, "restarts": restarts}).Info("sidecar started")
	return run, nil
}

// watch waits for the sidecar to exit, noting whether it was ever ready; when ctx ends first,
// it stops the sidecar and reports stopped.
func (s *supervisor) watch(ctx context.Context, run *sidecarRun) (exitErr error, stopped bool) {
	ready := make(chan struct{})
	readyCtx, stopReady := context.WithCancel(ctx)
	defer stopReady()
	go func() {
		if waitReady(readyCtx, s.st.AdminAddr, 0) == nil {
			close(ready)
		}
	}()
	select {
	case <-ctx.Done():
		stopReady()
		run.stop()
		_ = os.Remove(s.st.sidecarPidFile())
		return nil, true
	case exitErr = <-run.done:
	}
	stopReady()
	select {
	case <-ready:
		s.everReady = true
	default:
	}
	_ = os.Remove(s.st.sidecarPidFile())
	return exitErr, false
}

// decide says whether to restart the sidecar that exited with exitErr: never when no sidecar
// was ever ready (ErrSidecarNeverReady: a configuration error restarting cannot fix), nor when
// the sandbox is gone or being deleted.
func (s *supervisor) decide(exitErr error, run *sidecarRun) (again bool, err error) {
	if !s.everReady {
		s.log.WithError(exitErr).Error("sidecar exited before it was ready; not restarting")
		return false, ErrSidecarNeverReady
	}
	if s.wanted != nil && !s.wanted() {
		s.log.WithError(exitErr).Info("sidecar exited and the sandbox is gone or being deleted; supervisor exits")
		return false, nil
	}
	if time.Since(run.began) > healthyRun {
		s.backoff = minBackoff
	}
	s.log.WithError(exitErr).WithField("restart_in", s.backoff.String()).Warn("sidecar exited; restarting")
	return true, nil
}

// pause waits the back-off (false when ctx ends first) and doubles it up to maxBackoff.
func (s *supervisor) pause(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(s.backoff):
	}
	s.backoff = min(2*s.backoff, maxBackoff)
	return true
}

// writePidFile records pid and its start time (clock ticks).
func writePidFile(path string, pid int, start uint64) error {
	return writeFileReplace(path, []byte(strconv.Itoa(pid)+" "+strconv.FormatUint(start, 10)+"\n"), 0o644)
}

// stopSidecar sends SIGTERM and waits StopGrace, then SIGKILL.
func stopSidecar(cmd *exec.Cmd, done <-chan error, log *logrus.Entry) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		log.WithError(err).Info("sidecar stopped")
	case <-time.After(StopGrace):
		_ = cmd.Process.Kill()
		<-done
		log.Warn("sidecar did not stop within the grace period; killed")
	}
}

// waitReady polls http://addr/readyz until it answers 200, ctx ends or (when timeout > 0) the
// timeout passes. Polling is the sidecar's readiness contract; every 2 ms costs one local
// request.
func waitReady(ctx context.Context, addr string, timeout time.Duration) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return waitReadyEvery(ctx, addr, 2*time.Millisecond)
}

// waitReadyEvery asks the sidecar's /readyz at addr every interval until it answers 200 or
// ctx ends.
func waitReadyEvery(ctx context.Context, addr string, every time.Duration) error {
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	url := "http://" + addr + "/readyz"
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sidecar admin %s: not ready: %w", addr, ctx.Err())
		case <-tick.C:
		}
	}
}
