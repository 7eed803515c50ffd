package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// These tests run Create, its undos, Delete and Reap against fakeHost: no root, no netlink, no
// cgroupfs; only the store lives on disk, in a temporary directory.

var testCAPEM = []byte("-----BEGIN CERTIFICATE-----\nFAKE\n-----END CERTIFICATE-----\n")

func newTestManager(t *testing.T) (*Manager, *fakeHost, *bytes.Buffer) {
	t.Helper()
	store, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h := newFakeHost(t)
	progress := &bytes.Buffer{}
	m := &Manager{Store: store, Binary: "/fake/airlock", Progress: progress, Kernel: h, host: h,
		LoadCA: func(string, bool) ([]byte, error) { return testCAPEM, nil }}
	return m, h, progress
}

func testOptions(t *testing.T, name string) CreateOptions {
	roots := filepath.Join(t.TempDir(), "roots.pem")
	if err := os.WriteFile(roots, []byte("TEST ROOTS\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return CreateOptions{Name: name, Profile: "offline", Subnet: "198.19.0.0/24", CgroupParent: fakeCgroupRoot + "/airlock",
		Env: []string{"SSL_CERT_FILE=" + roots}, ReadyTimeout: 10 * time.Second, Runtime: "/bin/true"}
}

// wantClean fails unless nothing of any sandbox is left: no live resource, no state file, no
// sandbox directory.
func wantClean(t *testing.T, m *Manager, h *fakeHost, name string) {
	t.Helper()
	if live := h.liveSet(); len(live) > 0 {
		t.Errorf("left behind on the host: %v", live)
	}
	if states, err := m.Store.List(); err != nil || len(states) > 0 {
		t.Errorf("state files left: %v, %v", states, err)
	}
	if _, err := os.Stat(m.Store.SandboxDir(name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sandbox directory %s left (stat: %v)", m.Store.SandboxDir(name), err)
	}
}

var progressLine = regexp.MustCompile(`^  \[(\d)/7\] (\S+) +(.+) \((\d[^)]*)\)$`)

func TestCreateRunsTheStepTableAndDeleteUndoesIt(t *testing.T) {
	m, h, progress := newTestManager(t)
	st, err := m.Create(context.Background(), testOptions(t, "one"))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	var names []string
	for _, line := range strings.Split(strings.TrimRight(progress.String(), "\n"), "\n") {
		if g := progressLine.FindStringSubmatch(line); g != nil {
			if g[1] != fmt.Sprint(len(names)+1) {
				t.Errorf("progress line %q: want step number %d", line, len(names)+1)
			}
			names = append(names, g[2])
		} else if !strings.HasPrefix(line, "sandbox one ready in ") {
			t.Errorf("unexpected progress line %q", line)
		}
	}
	if want := []string{"netns", "veth", "cgroup", "files", "sidecar", "kernel", "container"}; !slices.Equal(names, want) {
		t.Errorf("progress steps %v, want %v:\n%s", names, want, progress)
	}
	want := []string{"cgroup " + st.Cgroup, "etc-netns " + st.Netns, "netns " + st.Netns, "pins one",
		fmt.Sprintf("process %d", m.sidecarPid(st)), fmt.Sprintf("process %d", st.SupervisorPid), "veth " + st.HostVeth,
		"bundle " + st.Container.Bundle, "container one", "idclaim " + st.Container.IDClaim}
	slices.Sort(want)
	if got := h.liveSet(); !slices.Equal(got, want) {
		t.Errorf("live after create %v, want %v", got, want)
	}
	saved, err := m.Store.Load("one")
	if err != nil || saved.Phase != PhaseReady || !saved.Kernel || saved.CreatorPid != 0 {
		t.Errorf("saved state %+v, %v: want ready with kernel enforcement", saved, err)
	}
	bundle, err := os.ReadFile(st.CABundle())
	if err != nil || !bytes.HasPrefix(bundle, []byte("TEST ROOTS\n")) || !bytes.HasSuffix(bundle, testCAPEM) {
		t.Errorf("CA bundle %q, %v: want the SSL_CERT_FILE roots, then the sidecar CA", bundle, err)
	}
	if err := m.Delete(context.Background(), "one"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	wantClean(t, m, h, "one")
}

// build prepares a creation of name the way Create does (under the lock, state saved) and runs
// the first n steps; it returns with the lock released, as a crashed create leaves it.
func build(t *testing.T, m *Manager, o CreateOptions, n int) *creation {
	t.Helper()
	c, err := m.plan(o)
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := m.Store.Lock()
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	if err := m.reserve(c); err != nil {
		t.Fatal(err)
	}
	if err := m.makeDir(c); err != nil {
		t.Fatal(err)
	}
	for _, s := range m.createSteps()[:n] {
		if _, err := s.do(context.Background(), c); err != nil {
			t.Fatalf("step %s: %v", s.name, err)
		}
	}
	return c
}

func TestEachStepUndo(t *testing.T) {
	for i, s := range (&Manager{}).createSteps() {
		t.Run(s.name, func(t *testing.T) {
			m, h, _ := newTestManager(t)
			c := build(t, m, testOptions(t, "u"), i)
			before := h.liveSet()
			step := m.createSteps()[i]
			if _, err := step.do(context.Background(), c); err != nil {
				t.Fatalf("do: %v", err)
			}
			made := h.liveSet()
			if step.undo == nil {
				// The kernel step only checks what the sidecar pinned; the pins go with the
				// cgroup's undo, once nothing runs in it.
				if !slices.Equal(made, before) {
					t.Errorf("the kernel step changed the host: %v -> %v", before, made)
				}
				return
			}
			if slices.Equal(made, before) && step.name != "files" {
				t.Errorf("step %s built nothing on the host: %v", step.name, made)
			}
			for round := 0; round < 2; round++ { // an undo runs twice without harm
				if _, err := step.undo(context.Background(), c.st); err != nil {
					t.Fatalf("undo (round %d): %v", round, err)
				}
			}
			wantAfter := before
			switch step.name {
			case "cgroup":
				wantAfter = slices.DeleteFunc(slices.Clone(before), func(r string) bool { return r == "pins u" })
			case "sidecar":
				// The programs the sidecar pinned outlive it (the sandbox stays closed while
				// no sidecar runs); the cgroup's undo removes them.
				wantAfter = append(slices.Clone(before), "pins u")
				slices.Sort(wantAfter)
			case "veth":
				// The pair goes with the namespace, the netns step's undo (undoVeth).
				wantAfter = made
			}
			if got := h.liveSet(); !slices.Equal(got, wantAfter) {
				t.Errorf("after undo %v, want %v (before the step)", got, wantAfter)
			}
			if step.name == "veth" {
				if _, err := m.undoNetns(context.Background(), c.st); err != nil {
					t.Fatal(err)
				}
				if got := h.liveSet(); len(got) != 0 {
					t.Errorf("after the netns undo %v, want nothing: the veth goes with its namespace", got)
				}
			}
			if step.name == "files" {
				if _, err := os.Stat(c.st.PublicDir()); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("public directory left after the files undo: %v", err)
				}
			}
		})
	}
}

func TestCgroupUndoUnpinsOnlyAfterTheCgroupIsGone(t *testing.T) {
	m, h, _ := newTestManager(t)
	c := build(t, m, testOptions(t, "p"), 5) // the sidecar has pinned its programs
	h.failBefore["RemoveCgroup"] = errors.New("cgroup still has processes")
	if _, err := m.undoCgroup(context.Background(), c.st); err == nil {
		t.Fatal("undoCgroup with a cgroup that cannot be removed: no error")
	}
	if !h.isLive("pins p") {
		t.Error("the kernel pins were removed while the cgroup may still hold processes")
	}
	calls := h.callLog()
	i := slices.Index(calls, "RemoveCgroup")
	if j := slices.Index(calls, "RemovePins"); j >= 0 && j < i {
		t.Errorf("RemovePins ran before RemoveCgroup: %v", calls)
	}
}

func TestCreateFailureAtEveryStepLeavesNothing(t *testing.T) {
	boom := errors.New("injected failure")
	for _, tc := range []struct {
		name, step, wantErr string
		inject              func(m *Manager, h *fakeHost, o *CreateOptions)
	}{
		{"netns", "netns", "injected", func(m *Manager, h *fakeHost, o *CreateOptions) { h.failBefore["CreateNetns"] = boom }},
		{"veth half-built", "veth", "injected", func(m *Manager, h *fakeHost, o *CreateOptions) { h.failAfter["WireLink"] = boom }},
		{"cgroup half-built", "cgroup", "injected", func(m *Manager, h *fakeHost, o *CreateOptions) { h.failAfter["CreateCgroup"] = boom }},
		{"files: CA", "files", "load the sidecar CA", func(m *Manager, h *fakeHost, o *CreateOptions) {
			m.LoadCA = func(string, bool) ([]byte, error) { return nil, boom }
		}},
		{"files: roots", "files", "SSL_CERT_FILE", func(m *Manager, h *fakeHost, o *CreateOptions) {
			o.Env = []string{"SSL_CERT_FILE=/nonexistent/roots.pem"}
		}},
		{"files: netns resolv.conf", "files", "injected", func(m *Manager, h *fakeHost, o *CreateOptions) {
			h.failAfter["WriteNetnsResolvConf"] = boom
		}},
		{"sidecar start", "sidecar", "injected", func(m *Manager, h *fakeHost, o *CreateOptions) { h.failBefore["start run"] = boom }},
		{"supervisor start", "sidecar", "injected", func(m *Manager, h *fakeHost, o *CreateOptions) { h.failBefore["start sandbox"] = boom }},
		{"sidecar exits before ready", "sidecar", "the fake sidecar refuses to start", func(m *Manager, h *fakeHost, o *CreateOptions) {
			h.exitEarly = true
		}},
		{"kernel in production", "kernel", "production sandboxes need kernel enforcement", func(m *Manager, h *fakeHost, o *CreateOptions) {
			h.attach = false
			o.Environment = EnvProduction
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, h, progress := newTestManager(t)
			o := testOptions(t, "f")
			tc.inject(m, h, &o)
			st, err := m.Create(context.Background(), o)
			if err == nil || st != nil {
				t.Fatalf("Create = %v, %v; want a failure", st, err)
			}
			if !strings.Contains(err.Error(), "step "+tc.step+": ") || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %q: want it to name step %s and say %q", err, tc.step, tc.wantErr)
			}
			wantClean(t, m, h, "f")
			if strings.Contains(progress.String(), "] "+tc.step+" ") {
				t.Errorf("a progress line for the failed step %s:\n%s", tc.step, progress)
			}
		})
	}
}

func TestCreateWarnsWithoutKernelOutsideProduction(t *testing.T) {
	m, h, progress := newTestManager(t)
	h.attach = false
	st, err := m.Create(context.Background(), testOptions(t, "w"))
	var warn *Warning
	if !errors.As(err, &warn) || st == nil || st.Kernel {
		t.Fatalf("Create = %+v, %v; want the sandbox and a *Warning", st, err)
	}
	if !strings.Contains(progress.String(), "] kernel   NOT attached: WARN sandbox w runs WITHOUT kernel enforcement") {
		t.Errorf("no NOT attached progress line:\n%s", progress)
	}
}

func TestFailedUndoKeepsStateForReap(t *testing.T) {
	m, h, _ := newTestManager(t)
	h.failBefore["start run"] = errors.New("injected failure")
	h.failBefore["DeleteNetns"] = errors.New("netns busy")
	_, err := m.Create(context.Background(), testOptions(t, "r"))
	if err == nil || !strings.Contains(err.Error(), "sandbox reap") || !strings.Contains(err.Error(), "netns busy") {
		t.Fatalf("Create = %v; want the step's error and the undo's, pointing at reap", err)
	}
	st, err := m.Store.Load("r")
	if err != nil || st.Phase != PhaseCreating {
		t.Fatalf("state after a failed undo: %+v, %v; want it kept in phase creating", st, err)
	}
	if !h.isLive("netns "+st.Netns) || !h.isLive("veth "+st.HostVeth) {
		t.Errorf("the netns whose removal failed, or the veth that goes with it, is not live: %v", h.liveSet())
	}
	delete(h.failBefore, "DeleteNetns")
	res, err := m.Reap(context.Background(), time.Hour)
	if err != nil || len(res) != 1 || res[0].Err != nil || !strings.Contains(res[0].Reason, "half-created") {
		t.Fatalf("Reap = %+v, %v", res, err)
	}
	wantClean(t, m, h, "r")
}

func TestCreateNameCollision(t *testing.T) {
	m, h, _ := newTestManager(t)
	if _, err := m.Create(context.Background(), testOptions(t, "dup")); err != nil {
		t.Fatal(err)
	}
	before := h.liveSet()
	_, err := m.Create(context.Background(), testOptions(t, "dup"))
	if err == nil || !strings.Contains(err.Error(), "sandbox dup already exists") {
		t.Fatalf("second Create = %v, want already exists", err)
	}
	if got := h.liveSet(); !slices.Equal(got, before) {
		t.Errorf("a refused create changed the host: %v -> %v", before, got)
	}
	if st, err := m.Store.Load("dup"); err != nil || st.Phase != PhaseReady {
		t.Errorf("the first sandbox after a refused second: %+v, %v", st, err)
	}

	// Leftovers that no state file of this store names are refused, and left alone.
	for _, tc := range []struct{ name, leftover, want string }{
		{"netns", "netns airlock-left", "network namespace airlock-left already exists"},
		{"cgroup", "cgroup " + fakeCgroupRoot + "/airlock/left", "cgroup " + fakeCgroupRoot + "/airlock/left already exists"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, h, _ := newTestManager(t)
			h.live[tc.leftover] = true
			_, err := m.Create(context.Background(), testOptions(t, "left"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Create over a leftover = %v, want %q", err, tc.want)
			}
			if got := h.liveSet(); !slices.Equal(got, []string{tc.leftover}) {
				t.Errorf("host after the refused create: %v, want only the leftover", got)
			}
			if states, _ := m.Store.List(); len(states) != 0 {
				t.Errorf("a refused create left state: %v", states)
			}
		})
	}
}

func TestCrashAfterEachStepThenReap(t *testing.T) {
	for n := 0; n <= 6; n++ {
		t.Run(fmt.Sprintf("after %d steps", n), func(t *testing.T) {
			m, h, _ := newTestManager(t)
			build(t, m, testOptions(t, "crash"), n)
			res, err := m.Reap(context.Background(), time.Hour)
			if err != nil || len(res) != 1 || res[0].Name != "crash" || res[0].Err != nil || !strings.Contains(res[0].Reason, "half-created") {
				t.Fatalf("Reap = %+v, %v; want the half-created sandbox removed", res, err)
			}
			wantClean(t, m, h, "crash")
		})
	}
}

func TestDeleteHalfBuilt(t *testing.T) {
	for n := 0; n <= 6; n++ {
		t.Run(fmt.Sprintf("after %d steps", n), func(t *testing.T) {
			m, h, _ := newTestManager(t)
			build(t, m, testOptions(t, "half"), n)
			if err := m.Delete(context.Background(), "half"); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			wantClean(t, m, h, "half")
			if err := m.Delete(context.Background(), "half"); !errors.Is(err, ErrNotFound) {
				t.Errorf("second Delete = %v, want ErrNotFound", err)
			}
		})
	}
}

func TestReapOrphansAndStrayCgroups(t *testing.T) {
	m, h, _ := newTestManager(t)
	st, err := m.Create(context.Background(), testOptions(t, "orphan"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(context.Background(), testOptions(t, "kept")); err != nil {
		t.Fatal(err)
	}
	stray := fakeCgroupRoot + "/airlock/stray"
	h.live["cgroup "+stray] = true
	if err := h.StopProcess(st.SupervisorPid, 0, 0); err != nil { // the supervisor dies
		t.Fatal(err)
	}
	res, err := m.Reap(context.Background(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range res {
		if r.Err != nil {
			t.Errorf("reap %s: %v", r.Name, r.Err)
		}
		got[r.Name] = r.Reason
	}
	if len(got) != 2 || !strings.Contains(got["orphan"], "orphaned") || !strings.Contains(got["stray"], "without a state file") {
		t.Errorf("Reap = %v; want the orphan and the stray cgroup, not kept", got)
	}
	for _, r := range h.liveSet() {
		if strings.Contains(r, "orphan") || strings.Contains(r, "stray") {
			t.Errorf("left after reap: %s", r)
		}
	}
	if _, err := m.Store.Load("kept"); err != nil {
		t.Errorf("the healthy sandbox was reaped: %v", err)
	}
}

// The supervisor loads the sandbox's state file as it starts and supervises the sidecar it
// names: the file must hold the admin address and the sidecar's arguments by then.
func TestSupervisorStartsAfterTheStateNamesTheSidecar(t *testing.T) {
	m, h, _ := newTestManager(t)
	checked := false
	h.onStart = func(args []string) {
		if args[0] != "sandbox" {
			return
		}
		checked = true
		st, err := m.Store.Load("sup")
		if err != nil || st.AdminAddr == "" || len(st.SidecarArgs) == 0 {
			t.Errorf("state when the supervisor starts: %+v, %v; want the admin address and sidecar arguments", st, err)
		}
	}
	if _, err := m.Create(context.Background(), testOptions(t, "sup")); err != nil {
		t.Fatal(err)
	}
	if !checked {
		t.Fatal("no supervisor was started")
	}
}

// A --network none sandbox holds no link: no /30 of the pool (the next sandbox takes the first),
// no veth in its state, no proxy or resolver in its files; delete removes it all.
func TestNetworkNoneHoldsNoLink(t *testing.T) {
	m, h, _ := newTestManager(t)
	o := testOptions(t, "quiet")
	o.Network = NetworkNone
	none, err := m.Create(context.Background(), o)
	if err != nil {
		t.Fatalf("Create --network none: %v", err)
	}
	if none.HostVeth != "" || none.HostAddr != "" || none.SandboxAddr != "" || none.Index != -1 {
		t.Errorf("--network none state holds a link: veth %q, addresses %q %q, index %d", none.HostVeth, none.HostAddr, none.SandboxAddr, none.Index)
	}
	if env, err := os.ReadFile(none.EnvFile()); err != nil || strings.Contains(string(env), "PROXY") || !strings.Contains(string(env), "AIRLOCK_SANDBOX=quiet") {
		t.Errorf("--network none env file %q, %v: want the sandbox's name and no proxy", env, err)
	}
	if rc, err := os.ReadFile(none.ResolvConf()); err != nil || strings.Contains(string(rc), "nameserver") {
		t.Errorf("--network none resolv.conf %q, %v: want no nameserver", rc, err)
	}
	next, err := m.Create(context.Background(), testOptions(t, "loud"))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if next.Index != 0 {
		t.Errorf("the next sandbox took /30 number %d, want 0 (the --network none one holds none)", next.Index)
	}
	for _, name := range []string{"quiet", "loud"} {
		if err := m.Delete(context.Background(), name); err != nil {
			t.Fatalf("Delete %s: %v", name, err)
		}
	}
	wantClean(t, m, h, "quiet")
}

// TestOnceProcessCreatesBesideTheSidecar: a container made with its one command is created by
// the runtime before the files and the sidecar's start (they overlap), the rest of its /etc
// written while it runs, waited for after the kernel step, and started only by StartOnce; a
// failure after the create undoes it.
func TestOnceProcessCreatesBesideTheSidecar(t *testing.T) {
	m, h, progress := newTestManager(t)
	o := testOptions(t, "once")
	o.Once, o.OnceProcess = true, &OnceProcess{Argv: []string{"true"}}
	st, err := m.Create(context.Background(), o)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	var names []string
	for _, line := range strings.Split(progress.String(), "\n") {
		if g := regexp.MustCompile(`^  \[\d/8\] (\S+) `).FindStringSubmatch(line); g != nil {
			names = append(names, g[1])
		}
	}
	if want := []string{"netns", "cgroup", "container", "veth", "files", "sidecar", "kernel", "created"}; !slices.Equal(names, want) {
		t.Errorf("progress steps %v, want %v:\n%s", names, want, progress)
	}
	select {
	case <-h.supervised:
	case <-time.After(10 * time.Second):
		t.Fatal("the sidecar was not supervised within 10s of Create")
	}
	calls := h.callLog()
	create, sidecar := slices.Index(calls, "CreateContainer"), slices.Index(calls, "start run")
	if create < 0 || sidecar < 0 || create > sidecar || slices.Contains(calls, "StartContainer") || slices.Contains(calls, "RunContainer") {
		t.Errorf("calls %v: want CreateContainer before the sidecar starts, and no start yet", calls)
	}
	if etc := slices.Index(calls, "WriteBundleEtc"); etc < create || etc > sidecar {
		t.Errorf("calls %v: want the rest of the bundle's /etc written after CreateContainer, before the sidecar starts", calls)
	}
	if sup := slices.Index(calls, "Supervise"); sup < sidecar || st.SupervisorPid != os.Getpid() || !st.SupervisorInProcess || slices.Contains(calls, "start sandbox") {
		t.Errorf("calls %v, supervisor pid %d (in process %v): want the sidecar supervised by this process after it started, and that recorded", calls, st.SupervisorPid, st.SupervisorInProcess)
	}
	if !st.Container.Waiting {
		t.Errorf("state %+v: want the container waiting", st.Container)
	}
	if pid, err := m.StartOnce("once"); err != nil || pid != 4242 {
		t.Errorf("StartOnce = %d, %v", pid, err)
	}
	if err := m.Delete(context.Background(), "once"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	wantClean(t, m, h, "once")
	if len(m.here) != 0 {
		t.Errorf("in-process supervisors left after Delete: %v", m.here)
	}
	if slices.Contains(h.stopped, os.Getpid()) {
		t.Errorf("Delete signalled its own process (the in-process supervisor's pid): stopped %v", h.stopped)
	}

	// Another process's delete (another Manager) stops the sidecar itself and leaves the
	// process supervising it alone: that one waits for its command, which the delete ends.
	st, err = m.Create(context.Background(), o)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	sidecarPid, _ := readPid(st.sidecarPidFile())
	other := &Manager{Store: m.Store, Binary: m.Binary, Progress: io.Discard, Kernel: h, host: h, LoadCA: m.LoadCA}
	h.mu.Lock()
	h.stopped = nil
	h.mu.Unlock()
	if err := other.Delete(context.Background(), "once"); err != nil {
		t.Fatalf("Delete from another manager: %v", err)
	}
	h.mu.Lock()
	stopped := slices.Clone(h.stopped)
	h.mu.Unlock()
	if slices.Contains(stopped, os.Getpid()) || !slices.Contains(stopped, sidecarPid) {
		t.Errorf("another process's Delete stopped %v: want the sidecar %d, never the supervising process %d", stopped, sidecarPid, os.Getpid())
	}
	if err := m.stopHere("once"); err != nil {
		t.Errorf("stopping the in-process supervisor after another's delete: %v", err)
	}
	wantClean(t, m, h, "once")

	m, h, _ = newTestManager(t)
	h.failBefore["start run"] = errors.New("injected failure")
	if _, err := m.Create(context.Background(), o); err == nil || !strings.Contains(err.Error(), "step sidecar: ") {
		t.Fatalf("Create with a failing sidecar = %v", err)
	}
	if calls := h.callLog(); !slices.Contains(calls, "DeleteContainer") {
		t.Errorf("calls %v: the created container was not deleted", calls)
	}
	wantClean(t, m, h, "once")
	if _, err := m.StartOnce("once"); err == nil {
		t.Error("StartOnce of a sandbox that is gone succeeded")
	}
}

// An ephemeral sandbox's state file is renamed into place but not fsynced, so a crash of the
// host may leave it empty: List says so and how to fix it, and Reap removes it (and the
// sandbox's directory) without touching a healthy sandbox.
func TestReapRemovesStateFileACrashLeftEmpty(t *testing.T) {
	m, _, _ := newTestManager(t)
	if _, err := m.Create(context.Background(), testOptions(t, "kept")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(m.Store.SandboxDir("torn"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m.Store.path("torn"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Store.List(); err == nil || !strings.Contains(err.Error(), "sandbox reap") {
		t.Errorf("List with an empty state file: %v; want an error naming `sandbox reap`", err)
	}
	res, err := m.Reap(context.Background(), time.Hour)
	if err != nil {
		t.Fatalf("Reap: %v", err)
	}
	if len(res) != 1 || res[0].Name != "torn" || res[0].Err != nil || !strings.Contains(res[0].Reason, "empty state file") {
		t.Errorf("Reap = %+v; want the empty state file alone", res)
	}
	if _, err := os.Stat(m.Store.SandboxDir("torn")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the torn sandbox's directory is still there (stat: %v)", err)
	}
	if states, err := m.Store.List(); err != nil || len(states) != 1 || states[0].Name != "kept" {
		t.Errorf("after reap: %v, %v; want the healthy sandbox alone", states, err)
	}
}

// Only a sandbox made for one command (exec --ephemeral) gets its CA written without fsync.
func TestEphemeralCAIsNotDurable(t *testing.T) {
	m, _, _ := newTestManager(t)
	durable := map[string]bool{}
	m.LoadCA = func(dir string, d bool) ([]byte, error) {
		durable[filepath.Base(filepath.Dir(dir))] = d
		return testCAPEM, nil
	}
	if _, err := m.Create(context.Background(), testOptions(t, "long")); err != nil {
		t.Fatal(err)
	}
	o := testOptions(t, "once")
	o.Once = true
	if _, err := m.Create(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if !durable["long"] || durable["once"] {
		t.Errorf("LoadCA durable = %v; want true for a sandbox that outlives its command, false for exec --ephemeral's", durable)
	}
}

// A /30 whose host address is on one of the host's interfaces (another state directory's
// sandbox, which this store does not list) is skipped: two sidecars never share an address.
func TestCreateSkipsSubnetsTheHostUses(t *testing.T) {
	m, h, _ := newTestManager(t)
	h.hostAddrs = []netip.Addr{netip.MustParseAddr("198.19.0.1"), netip.MustParseAddr("198.19.0.6")}
	st, err := m.Create(context.Background(), testOptions(t, "o"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Index != 2 || st.HostAddr != "198.19.0.9" {
		t.Errorf("sandbox got /30 %d (host %s); want 2 (198.19.0.9): 0 and 1 hold host addresses", st.Index, st.HostAddr)
	}
}
