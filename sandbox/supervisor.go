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
	log := logger.WithFields(logrus.Fields{"sandbox": st.Name, "component": "supervisor"})

	// Pdeathsig belongs to the thread that forked the child: keep this goroutine on one thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	backoff := minBackoff
	everReady := false
	for restarts := 0; ; restarts++ {
		var (
			stop func()
			done = make(chan error, 1)
			pid  int
		)
		if restarts == 0 && adopt > 0 {
			fd, err := pidfd(adopt)
			if err != nil {
				return fmt.Errorf("adopt sidecar %d: %w", adopt, err)
			}
			pid = adopt
			tick, _ := procStart(pid)
			go func() {
				defer closeFd(fd)
				for !waitPidfd(fd, time.Minute) && alive(pid, tick) {
				}
				done <- errors.New("sidecar exited")
			}()
			stop = func() {
				if err := stopProcess(pid, tick, StopGrace); err != nil {
					log.WithError(err).Warn("stop adopted sidecar")
				}
				<-done
			}
			log.WithField("pid", pid).Info("supervising sidecar")
		} else {
			cmd := exec.Command(st.Binary, st.SidecarArgs...)
			cmd.Stdout, cmd.Stderr = logOut, logOut
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
			if err := cmd.Start(); err != nil {
				return fmt.Errorf("start sidecar: %w", err)
			}
			pid = cmd.Process.Pid
			start, _ := procStart(pid)
			_ = writePidFile(st.sidecarPidFile(), pid, start)
			go func() { done <- cmd.Wait() }()
			stop = func() { stopSidecar(cmd, done, log) }
			log.WithFields(logrus.Fields{"pid": pid, "restarts": restarts}).Info("sidecar started")
		}
		began := time.Now()
		ready := make(chan struct{})
		readyCtx, stopReady := context.WithCancel(ctx)
		go func() {
			if waitReady(readyCtx, st.AdminAddr, 0) == nil {
				close(ready)
			}
		}()

		var err error
		select {
		case <-ctx.Done():
			stopReady()
			stop()
			_ = os.Remove(st.sidecarPidFile())
			return nil
		case err = <-done:
		}
		stopReady()
		select {
		case <-ready:
			everReady = true
		default:
		}
		_ = os.Remove(st.sidecarPidFile())
		if !everReady {
			log.WithError(err).Error("sidecar exited before it was ready; not restarting")
			return ErrSidecarNeverReady
		}
		if wanted != nil && !wanted() {
			log.WithError(err).Info("sidecar exited and the sandbox is gone or being deleted; supervisor exits")
			return nil
		}
		if time.Since(began) > healthyRun {
			backoff = minBackoff
		}
		log.WithError(err).WithField("restart_in", backoff.String()).Warn("sidecar exited; restarting")
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
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
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	url := "http://" + addr + "/readyz"
	tick := time.NewTicker(2 * time.Millisecond)
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
