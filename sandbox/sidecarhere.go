package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/sirupsen/logrus"
)

// HereSidecar is a sidecar running as goroutines of this process (Manager.RunSidecar).
type HereSidecar interface {
	// Ready is closed once every component of the sidecar has started.
	Ready() <-chan struct{}
	// Done receives, once, why the sidecar stopped: nil after Stop, else the error it
	// failed to start with or stopped on (a listener that failed).
	Done() <-chan error
	// Stop stops the sidecar gracefully (its Vault leases revoked, its audit log sealed
	// and shipped) and waits for it.
	Stop()
	// AdminAddr is the address its admin listener is bound to, once ready.
	AdminAddr() string
}

// beginSidecarHere starts the in-process sidecar of c (Manager.RunSidecar) without waiting
// for it: Create calls it once the runtime's create of the container is under way, so that
// the two overlap; startSidecarHere waits for it. The sidecar
// binds its admin listener to a port the kernel picks: no window between choosing a free port
// and binding it for another process to take it.
func (m *Manager) beginSidecarHere(c *creation) {
	st := c.st
	st.AdminAddr = "127.0.0.1:0"
	st.SidecarArgs = sidecarArgs(st, c.o)
	logOut, err := os.OpenFile(st.LogFile(), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		c.hereErr = fmt.Errorf("start sidecar: open log: %w", err)
		return
	}
	c.hereLog = logOut
	if c.here, err = m.RunSidecar(st.SidecarArgs, logOut); err != nil {
		c.hereErr = fmt.Errorf("start sidecar: %w", err)
	}
}

// dropSidecarHere stops an in-process sidecar begun for c that startSidecarHere has not
// taken over (a step between them failed).
func (c *creation) dropSidecarHere() {
	if c.here != nil {
		c.here.Stop()
		c.here = nil
	}
	if c.hereLog != nil {
		c.hereLog.Close()
		c.hereLog = nil
	}
}

// startSidecarHere waits until c's in-process sidecar (begun by beginSidecarHere, or now) is
// ready, fails, or timeout passes. It is supervised here too: a sidecar that stops on its own
// while the sandbox is wanted is started again after the supervisor's back-off (a panic,
// though, ends this process, and with it the sandbox's one command; the kernel programs stay
// attached, so the sandbox stays closed until reap). st records this process as both
// supervisor and sidecar; stopHere stops them.
func (m *Manager) startSidecarHere(c *creation, timeout time.Duration) error {
	if c.here == nil && c.hereErr == nil {
		m.beginSidecarHere(c)
	}
	st, first, logOut := c.st, c.here, c.hereLog
	if c.hereErr != nil {
		c.dropSidecarHere()
		return c.hereErr
	}
	c.here, c.hereLog = nil, nil // taken over: stopped below on failure, else by stopHere
	if err := awaitSidecarHere(first, timeout); err != nil {
		logOut.Close()
		return err
	}
	// Its restarts reuse the port it got.
	st.AdminAddr = first.AdminAddr()
	st.SidecarArgs = sidecarArgs(st, c.o)
	pid := os.Getpid()
	tick, _ := m.ops().ProcStart(pid)
	st.SupervisorPid, st.SupervisorTick, st.SupervisorInProcess, st.SidecarInProcess = pid, tick, true, true
	if err := writePidFile(st.sidecarPidFile(), pid, tick); err != nil {
		first.Stop()
		logOut.Close()
		return err
	}
	logger := logrus.New()
	logger.SetOutput(logOut)
	logger.SetFormatter(&logrus.JSONFormatter{TimestampFormat: time.RFC3339Nano})
	watched := *st // the loop reads its own copy while Create goes on writing st
	s := &supervisor{st: &watched, logOut: logOut, backoff: minBackoff, everReady: true, wanted: m.wanted(st.Name),
		log: logger.WithFields(logrus.Fields{"sandbox": st.Name, "component": "supervisor"})}
	m.goSuperviseHere(st.Name, logOut, func(ctx context.Context) error {
		return m.superviseSidecarHere(ctx, s, first, timeout)
	})
	return nil
}

// awaitSidecarHere waits until sc is ready; when it stops first or timeout passes, it is
// stopped and the error says why.
func awaitSidecarHere(sc HereSidecar, timeout time.Duration) error {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-sc.Ready():
		return nil
	case err := <-sc.Done():
		if err == nil {
			err = errors.New("it stopped")
		}
		return fmt.Errorf("the sidecar did not start: %w", err)
	case <-timer.C:
		sc.Stop()
		return fmt.Errorf("the sidecar did not start: not ready after %s", timeout)
	}
}

// runSidecarHere starts one more in-process sidecar of st (a restart) and waits until it is
// ready.
func (m *Manager) runSidecarHere(st *State, logOut *os.File, timeout time.Duration) (HereSidecar, error) {
	sc, err := m.RunSidecar(st.SidecarArgs, logOut)
	if err != nil {
		return nil, fmt.Errorf("start sidecar: %w", err)
	}
	if err := awaitSidecarHere(sc, timeout); err != nil {
		return nil, err
	}
	return sc, nil
}

// superviseSidecarHere watches the in-process sidecar run until ctx ends (then stops it) and starts
// a new one when it stops on its own while the sandbox is wanted, as Supervise does for a
// sidecar process.
func (m *Manager) superviseSidecarHere(ctx context.Context, s *supervisor, run HereSidecar, timeout time.Duration) error {
	for {
		began := time.Now()
		select {
		case <-ctx.Done():
			run.Stop()
			_ = os.Remove(s.st.sidecarPidFile())
			return nil
		case exitErr := <-run.Done():
			if again, err := s.decide(exitErr, &sidecarRun{began: began}); !again {
				return err
			}
		}
		for run = nil; run == nil; {
			if !s.pause(ctx) {
				_ = os.Remove(s.st.sidecarPidFile())
				return nil
			}
			next, err := m.runSidecarHere(s.st, s.logOut, timeout)
			if err != nil {
				s.log.WithError(err).Warn("sidecar restart failed; trying again")
				continue
			}
			s.log.Info("sidecar started again in this process")
			run = next
		}
	}
}
