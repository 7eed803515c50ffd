package sandbox

import (
	"context"
	"fmt"
	"os"
	"time"
)

// hereSupervisor is a supervisor running as a goroutine of this process.
type hereSupervisor struct {
	stop context.CancelFunc
	done <-chan error
}

// superviseHere supervises st's sidecar (already running as pid sidecar) from a goroutine of
// this process, not from a process of its own. exec --ephemeral does this: its process lives
// exactly as long as the sandbox, waiting for the one command, so a supervisor process would
// only be one more start-up of the airlock binary on the path of every tool call. st records
// this process as the supervisor (for status, reap and the host namespace's lookup) and that
// it is in-process (so that another process's delete does not signal it). stopHere ends it.
func (m *Manager) superviseHere(st *State, sidecar int) error {
	logOut, err := os.OpenFile(st.LogFile(), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("supervise sidecar: open log: %w", err)
	}
	st.SupervisorPid, st.SupervisorInProcess = os.Getpid(), true
	st.SupervisorTick, _ = m.ops().ProcStart(st.SupervisorPid)
	watched := *st // Supervise reads its own copy while Create goes on writing st
	m.goSuperviseHere(st.Name, logOut, func(ctx context.Context) error {
		return m.ops().Supervise(ctx, &watched, sidecar, m.wanted(st.Name), logOut)
	})
	return nil
}

// goSuperviseHere runs supervise (until its context ends) in a goroutine of this process as
// the supervisor of sandbox name, for stopHere to stop; logOut is closed when it returns.
func (m *Manager) goSuperviseHere(name string, logOut *os.File, supervise func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		defer logOut.Close()
		done <- supervise(ctx)
	}()
	m.hereMu.Lock()
	defer m.hereMu.Unlock()
	if m.here == nil {
		m.here = map[string]*hereSupervisor{}
	}
	m.here[name] = &hereSupervisor{stop: cancel, done: done}
}

// wanted says whether sandbox name still wants a sidecar: its state is there and it is not
// being deleted. A supervisor asks before every restart.
func (m *Manager) wanted(name string) func() bool {
	return func() bool {
		cur, err := m.Store.Load(name)
		return err == nil && cur.Phase != PhaseDeleting
	}
}

// stopHere stops the in-process supervisor of sandbox name, which stops its sidecar
// gracefully (StopGrace, then SIGKILL), and waits for it. A sandbox this process does not
// supervise is left alone.
func (m *Manager) stopHere(name string) error {
	m.hereMu.Lock()
	h := m.here[name]
	delete(m.here, name)
	m.hereMu.Unlock()
	if h == nil {
		return nil
	}
	h.stop()
	select {
	case err := <-h.done:
		if err != nil {
			return fmt.Errorf("stop supervisor: %w", err)
		}
		return nil
	case <-time.After(StopGrace + 5*time.Second):
		return fmt.Errorf("stop supervisor: still running %s after it was asked to stop", StopGrace+5*time.Second)
	}
}
