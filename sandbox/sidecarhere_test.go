package sandbox

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeHereSidecar is an in-process sidecar for the tests: a real admin listener on the
// address its arguments give (":0" picks a port) and the fake host's pins.
type fakeHereSidecar struct {
	ln    net.Listener
	srv   *http.Server
	ready chan struct{}
	done  chan error
	once  sync.Once
}

func (f *fakeHereSidecar) Ready() <-chan struct{} { return f.ready }
func (f *fakeHereSidecar) Done() <-chan error     { return f.done }
func (f *fakeHereSidecar) AdminAddr() string      { return f.ln.Addr().String() }
func (f *fakeHereSidecar) Stop()                  { f.end(nil) }

// end stops it once, with why.
func (f *fakeHereSidecar) end(err error) {
	f.once.Do(func() {
		_ = f.srv.Close()
		f.done <- err
	})
}

// hereRecorder is the Manager's RunSidecar for the tests: it records every start.
type hereRecorder struct {
	h       *fakeHost
	mu      sync.Mutex
	args    [][]string
	running []*fakeHereSidecar
	logs    []string
	started chan struct{} // gets one value per start after the first
}

func (r *hereRecorder) run(args []string, log io.Writer) (HereSidecar, error) {
	ln, err := net.Listen("tcp", flagValue(args, "--admin-addr"))
	if err != nil {
		return nil, err
	}
	f := &fakeHereSidecar{ln: ln, ready: make(chan struct{}), done: make(chan error, 1),
		srv: &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), ReadHeaderTimeout: time.Second}}
	go func() { _ = f.srv.Serve(ln) }()
	r.h.mu.Lock()
	r.h.live["pins "+flagValue(args, "--sandbox")] = true
	r.h.mu.Unlock()
	r.mu.Lock()
	r.args = append(r.args, slices.Clone(args))
	r.running = append(r.running, f)
	_, isFile := log.(*os.File)
	r.logs = append(r.logs, map[bool]string{true: "file", false: "other"}[isFile])
	again := len(r.args) > 1
	r.mu.Unlock()
	close(f.ready)
	if again {
		r.started <- struct{}{}
	}
	return f, nil
}

func (r *hereRecorder) starts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.args)
}

// TestSidecarInProcess: with RunSidecar set, a sandbox made for one command runs its sidecar
// in this process: no sidecar or supervisor process is started, the admin address is the one
// the sidecar bound (":0", no port picked beforehand), the state names this process as both,
// a sidecar that stops on its own is started again, Delete stops it gracefully and never
// signals this process, and another process's Delete leaves this process alone.
func TestSidecarInProcess(t *testing.T) {
	m, h, _ := newTestManager(t)
	rec := &hereRecorder{h: h, started: make(chan struct{}, 8)}
	m.RunSidecar = rec.run
	o := testOptions(t, "here")
	o.Once, o.OnceProcess = true, &OnceProcess{Argv: []string{"true"}}
	st, err := m.Create(context.Background(), o)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	calls := h.callLog()
	if slices.Contains(calls, "start run") || slices.Contains(calls, "Supervise") || slices.Contains(calls, "start sandbox") {
		t.Errorf("calls %v: want no sidecar or supervisor process, no Supervise", calls)
	}
	if rec.starts() != 1 || rec.logs[0] != "file" || flagValue(rec.args[0], "--admin-addr") != "127.0.0.1:0" {
		t.Fatalf("RunSidecar calls %v (logs %v): want one, to the log file, admin on :0", rec.args, rec.logs)
	}
	pid := os.Getpid()
	if !st.SidecarInProcess || !st.SupervisorInProcess || st.SupervisorPid != pid || m.sidecarPid(st) != 0 && m.sidecarPid(st) != pid {
		t.Errorf("state: sidecar in process %v, supervisor in process %v pid %d: want both this process (%d)", st.SidecarInProcess, st.SupervisorInProcess, st.SupervisorPid, pid)
	}
	if got, _ := readPid(st.sidecarPidFile()); got != pid {
		t.Errorf("sidecar.pid = %d, want this process %d", got, pid)
	}
	if st.AdminAddr != rec.running[0].AdminAddr() || strings.HasSuffix(st.AdminAddr, ":0") || flagValue(st.SidecarArgs, "--admin-addr") != st.AdminAddr {
		t.Errorf("admin %q, args %v: want the bound address %s, kept for restarts", st.AdminAddr, st.SidecarArgs, rec.running[0].AdminAddr())
	}
	if err := waitReady(context.Background(), st.AdminAddr, 5*time.Second); err != nil {
		t.Errorf("admin listener: %v", err)
	}

	// A sidecar that stops on its own is replaced, on the same admin port.
	rec.running[0].end(errors.New("listener failed"))
	select {
	case <-rec.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the in-process sidecar was not started again within 10s")
	}
	if got := flagValue(rec.args[1], "--admin-addr"); got != st.AdminAddr {
		t.Errorf("restart's admin %q, want %q", got, st.AdminAddr)
	}

	if err := m.Delete(context.Background(), "here"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	wantClean(t, m, h, "here")
	if slices.Contains(h.stopped, pid) {
		t.Errorf("Delete signalled its own process: stopped %v", h.stopped)
	}
	if err := rec.running[1].srv.Serve(rec.running[1].ln); !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("the restarted sidecar still serves after Delete (Serve: %v)", err)
	}
	if len(m.here) != 0 {
		t.Errorf("in-process supervisors left after Delete: %v", m.here)
	}

	// Another process's delete (another Manager) must not signal this process; this process's
	// own delete afterwards finds the sandbox gone and still stops its sidecar.
	if _, err = m.Create(context.Background(), o); err != nil {
		t.Fatalf("Create: %v", err)
	}
	other := &Manager{Store: m.Store, Binary: m.Binary, Progress: io.Discard, Kernel: h, host: h, LoadCA: m.LoadCA}
	h.mu.Lock()
	h.stopped = nil
	h.mu.Unlock()
	if err := other.Delete(context.Background(), "here"); err != nil {
		t.Fatalf("Delete from another manager: %v", err)
	}
	h.mu.Lock()
	stopped := slices.Clone(h.stopped)
	h.mu.Unlock()
	if slices.Contains(stopped, pid) {
		t.Errorf("another process's Delete stopped %v: never this process %d", stopped, pid)
	}
	if err := m.Delete(context.Background(), "here"); !errors.Is(err, ErrNotFound) {
		t.Errorf("own Delete after another's = %v, want ErrNotFound", err)
	}
	if len(m.here) != 0 {
		t.Errorf("in-process supervisor left after the sandbox was deleted by another: %v", m.here)
	}
	last := rec.running[len(rec.running)-1]
	if err := last.srv.Serve(last.ln); !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("the last in-process sidecar still serves after both deletes (Serve: %v)", err)
	}
	wantClean(t, m, h, "here")
}

// TestSidecarInProcessFailures: an in-process sidecar that fails before it is ready fails the
// sidecar step with its reason; one begun before a container step that fails is stopped;
// both leave nothing behind.
func TestSidecarInProcessFailures(t *testing.T) {
	o := testOptions(t, "herefail")
	o.Once, o.OnceProcess = true, &OnceProcess{Argv: []string{"true"}}

	m, h, _ := newTestManager(t)
	m.RunSidecar = func(args []string, log io.Writer) (HereSidecar, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		f := &fakeHereSidecar{ln: ln, ready: make(chan struct{}), done: make(chan error, 1), srv: &http.Server{ReadHeaderTimeout: time.Second}}
		f.end(errors.New("policy.yaml:3:1: spec: unknown field"))
		return f, nil
	}
	_, err := m.Create(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "step sidecar: the sidecar did not start: policy.yaml:3:1") {
		t.Errorf("Create with a sidecar that fails = %v, want the sidecar step's failure with its reason", err)
	}
	wantClean(t, m, h, "herefail")

	m, h, _ = newTestManager(t)
	rec := &hereRecorder{h: h, started: make(chan struct{}, 8)}
	m.RunSidecar = rec.run
	h.failBefore["WriteBundle"] = errors.New("injected")
	if _, err := m.Create(context.Background(), o); err == nil || !strings.Contains(err.Error(), "step container") {
		t.Errorf("Create with a failing bundle = %v, want the container step's failure", err)
	}
	if rec.starts() != 1 {
		t.Fatalf("RunSidecar calls: %d, want the sidecar begun before the container step", rec.starts())
	}
	if err := rec.running[0].srv.Serve(rec.running[0].ln); !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("the sidecar begun before the failed container step still serves (Serve: %v)", err)
	}
	wantClean(t, m, h, "herefail")
}
