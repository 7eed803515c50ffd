package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeHost is a recording hostOps and Kernel: it keeps the set of live resources (namespaces,
// veths, cgroups, /etc/netns files, processes, kernel pins) that the real operations would
// leave on the machine, and fails the operations a test names. Its sidecar is a real HTTP
// server on the admin address that answers /readyz, so Create's readiness wait runs for real.
// Nothing here needs root or touches the machine outside the test's temporary directory.
type fakeHost struct {
	t *testing.T
	// attach says whether the fake sidecar pins kernel programs; exitEarly makes it exit before
	// it is ready, with a one-line reason in its log.
	attach, exitEarly bool
	// onStart, when set, runs before each fake process starts (without mu held).
	onStart func(args []string)
	// probeErr is what the kernel probe returns.
	probeErr error

	// mu guards every field below.
	mu         sync.Mutex
	live       map[string]bool
	calls      []string
	failBefore map[string]error // the operation fails without doing anything
	failAfter  map[string]error // the operation does its work, then fails (a half-done step)
	nextPid    int
	servers    map[int]*http.Server
	exited     map[int]chan struct{}
	stopped    []int             // the pids StopProcess was asked to stop
	vethNetns  map[string]string // the namespace of each veth's peer, by host end
	released   map[string]string // the veths ReleaseHostVeth left to a namespace, by namespace
	hostAddrs  []netip.Addr      // the addresses of the host's interfaces (AddrsIn)

	// supervised gets the name of each sandbox Supervise starts on (it runs in a goroutine).
	supervised chan string
}

var (
	_ hostOps = (*fakeHost)(nil)
	_ Kernel  = (*fakeHost)(nil)
)

const fakeCgroupRoot = "/fake/cgroup"

func newFakeHost(t *testing.T) *fakeHost {
	h := &fakeHost{t: t, attach: true, live: map[string]bool{}, failBefore: map[string]error{}, failAfter: map[string]error{},
		nextPid: 100000, servers: map[int]*http.Server{}, exited: map[int]chan struct{}{}, supervised: make(chan string, 16),
		vethNetns: map[string]string{}, released: map[string]string{}}
	t.Cleanup(func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, s := range h.servers {
			s.Close()
		}
	})
	return h
}

// op records name and runs work unless a failure is injected before it; a failure injected
// after it is returned once the work is done.
// callLog is a copy of the operations so far.
func (h *fakeHost) callLog() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.calls)
}

func (h *fakeHost) op(name string, work func() error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, name)
	if err, ok := h.failBefore[name]; ok {
		return err
	}
	if work != nil {
		if err := work(); err != nil {
			return err
		}
	}
	return h.failAfter[name]
}

// create marks res live, failing if it already is (as mkdir, netns add and link add do).
func (h *fakeHost) create(res string) error {
	if h.live[res] {
		return fmt.Errorf("%s: %w", res, os.ErrExist)
	}
	h.live[res] = true
	return nil
}

func (h *fakeHost) remove(res string) error { delete(h.live, res); return nil }

// liveSet is a sorted copy of the live resources.
func (h *fakeHost) liveSet() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for r := range h.live {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}

func (h *fakeHost) isLive(res string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.live[res]
}

func (h *fakeHost) CurrentNetns() (uint64, error) { return 4026531840, nil }
func (h *fakeHost) NetnsExists(name string) bool  { return h.isLive("netns " + name) }

// AddrsIn is the host's addresses inside subnet: those of hostAddrs.
func (h *fakeHost) AddrsIn(subnet netip.Prefix) ([]netip.Addr, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var in []netip.Addr
	for _, a := range h.hostAddrs {
		if subnet.Contains(a) {
			in = append(in, a)
		}
	}
	return in, nil
}

func (h *fakeHost) CreateNetns(name string) error {
	return h.op("CreateNetns", func() error { return h.create("netns " + name) })
}

func (h *fakeHost) DeleteNetns(name string) error {
	return h.op("DeleteNetns", func() error {
		if v, ok := h.released[name]; ok { // the kernel unregisters the pair with the namespace
			delete(h.released, name)
			h.remove("veth " + v)
		}
		return h.remove("netns " + name)
	})
}

func (h *fakeHost) WireLink(netns, hostVeth string, l link, raw []netip.Prefix) error {
	return h.op("WireLink", func() error {
		if !h.live["netns "+netns] {
			return fmt.Errorf("network namespace %s: %w", netns, os.ErrNotExist)
		}
		h.vethNetns[hostVeth] = netns
		return h.create("veth " + hostVeth)
	})
}

func (h *fakeHost) DeleteHostVeth(hostVeth string, hostNetns uint64, supervisorPid int) error {
	return h.op("DeleteHostVeth", func() error { return h.remove("veth " + hostVeth) })
}

// ReleaseHostVeth leaves the veth live until the namespace WireLink put its peer in goes (the
// fake keeps no addresses to take off).
func (h *fakeHost) ReleaseHostVeth(hostVeth string, hostNetns uint64, supervisorPid int) error {
	return h.op("ReleaseHostVeth", func() error {
		if ns, ok := h.vethNetns[hostVeth]; ok && h.live["veth "+hostVeth] {
			h.released[ns] = hostVeth
		}
		return nil
	})
}

func (h *fakeHost) WriteNetnsResolvConf(netns string, data []byte) error {
	return h.op("WriteNetnsResolvConf", func() error { h.live["etc-netns "+netns] = true; return nil })
}

func (h *fakeHost) RemoveNetnsEtc(netns string) error {
	return h.op("RemoveNetnsEtc", func() error { return h.remove("etc-netns " + netns) })
}

func (h *fakeHost) CheckCgroup2Dir(path string) error {
	if !strings.HasPrefix(path, fakeCgroupRoot) {
		return fmt.Errorf("cgroup parent %s is not on a cgroup v2 filesystem", path)
	}
	return nil
}

func (h *fakeHost) CgroupExists(path string) bool { return h.isLive("cgroup " + path) }

func (h *fakeHost) CreateCgroup(path string, lim Limits) error {
	return h.op("CreateCgroup", func() error { return h.create("cgroup " + path) })
}

func (h *fakeHost) RemoveCgroup(ctx context.Context, path string) error {
	return h.op("RemoveCgroup", func() error { return h.remove("cgroup " + path) })
}

func (h *fakeHost) ChildCgroups(parent string) ([]string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for r := range h.live {
		if p, ok := strings.CutPrefix(r, "cgroup "); ok && filepath.Dir(p) == parent {
			out = append(out, filepath.Base(p))
		}
	}
	return out, nil
}

// StartDetached starts a fake process: "run" is the sidecar (a /readyz server on its admin
// address, pins when attach is set), anything else (the supervisor) is only recorded.
func (h *fakeHost) StartDetached(bin string, args, env []string, logFile string) (int, <-chan struct{}, error) {
	if h.onStart != nil {
		h.onStart(args)
	}
	var pid int
	done := make(chan struct{})
	err := h.op("start "+args[0], func() error {
		logf, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		defer logf.Close()
		h.nextPid++
		pid = h.nextPid
		if args[0] == "run" && h.exitEarly {
			fmt.Fprintln(logf, "airlock: the fake sidecar refuses to start")
			close(done)
			return nil
		}
		h.live[fmt.Sprintf("process %d", pid)] = true
		h.exited[pid] = done
		if args[0] == "run" {
			return h.serve(pid, args)
		}
		return nil
	})
	return pid, done, err
}

// serve starts the fake sidecar's admin listener and pins. The caller holds mu.
func (h *fakeHost) serve(pid int, args []string) error {
	addr, name := flagValue(args, "--admin-addr"), flagValue(args, "--sandbox")
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	h.servers[pid] = srv
	if h.attach {
		h.live["pins "+name] = true
	}
	return nil
}

func flagValue(args []string, name string) string {
	if i := slices.Index(args, name); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	return ""
}

func (h *fakeHost) ProcStart(pid int) (uint64, error) {
	if !h.isLive(fmt.Sprintf("process %d", pid)) {
		return 0, fmt.Errorf("process %d has exited", pid)
	}
	return uint64(pid) * 10, nil
}

func (h *fakeHost) Alive(pid int, start uint64) bool {
	return h.isLive(fmt.Sprintf("process %d", pid)) && (start == 0 || start == uint64(pid)*10)
}

// Supervise records the in-process supervisor and, when ctx ends, stops the adopted sidecar
// as the real one does.
func (h *fakeHost) Supervise(ctx context.Context, st *State, adopt int, wanted func() bool, logOut *os.File) error {
	if err := h.op("Supervise", func() error { return nil }); err != nil {
		return err
	}
	h.supervised <- st.Name
	<-ctx.Done()
	return h.StopProcess(adopt, 0, StopGrace)
}

func (h *fakeHost) StopProcess(pid int, start uint64, grace time.Duration) error {
	return h.op("StopProcess", func() error {
		h.stopped = append(h.stopped, pid)
		if pid <= 0 {
			return nil
		}
		if s := h.servers[pid]; s != nil {
			s.Close()
			delete(h.servers, pid)
		}
		if d := h.exited[pid]; d != nil {
			close(d)
			delete(h.exited, pid)
		}
		return h.remove(fmt.Sprintf("process %d", pid))
	})
}

func (h *fakeHost) Cgroup2Root() (string, error) { return fakeCgroupRoot, nil }
func (h *fakeHost) PinDir(name string) string    { return "/fake/bpf/airlock/" + name }
func (h *fakeHost) Pinned(name string) bool      { return h.isLive("pins " + name) }

func (h *fakeHost) RemovePins(name string) error {
	return h.op("RemovePins", func() error { return h.remove("pins " + name) })
}

func (h *fakeHost) Probe() error                                  { return h.probeErr }
func (h *fakeHost) ProbePacketGuard() error                       { return errors.New("fake: no BPF LSM") }
func (h *fakeHost) BPFLSMActive() (bool, error)                   { return false, nil }
func (h *fakeHost) MountPoints(types ...string) ([]string, error) { return nil, nil }

func (h *fakeHost) ClaimIDRange(base uint32, owner string) (uint32, string, error) {
	var start uint32
	var claim string
	err := h.op("ClaimIDRange", func() error {
		for start = base; h.live["idclaim /fake/idmap/"+fmt.Sprint(start)]; start += IDRangeSize {
		}
		claim = fmt.Sprintf("/fake/idmap/%d", start)
		return h.create("idclaim " + claim)
	})
	return start, claim, err
}

func (h *fakeHost) ReleaseIDRange(claim string) error {
	if claim == "" {
		return nil
	}
	return h.op("ReleaseIDRange", func() error { return h.remove("idclaim " + claim) })
}

func (h *fakeHost) WriteBundleEtc(st *State) error {
	return h.op("WriteBundleEtc", func() error { return nil })
}

func (h *fakeHost) WriteBundle(st *State) error {
	return h.op("WriteBundle", func() error { h.live["bundle "+st.Container.Bundle] = true; return nil })
}

func (h *fakeHost) RunContainer(st *State, logFile string) error {
	return h.op("RunContainer", func() error { return h.create("container " + st.Container.ID) })
}

func (h *fakeHost) CreateContainer(st *State, _ *OnceProcess, _ string) <-chan error {
	done := make(chan error, 1)
	done <- h.op("CreateContainer", func() error { return h.create("container " + st.Container.ID) })
	return done
}

func (h *fakeHost) StartContainer(st *State) (int, error) {
	return 4242, h.op("StartContainer", func() error { return nil })
}

func (h *fakeHost) DeleteContainer(st *State) error {
	c := st.Container
	return h.op("DeleteContainer", func() error {
		delete(h.live, "bundle "+c.Bundle)
		return h.remove("container " + c.ID)
	})
}

func (h *fakeHost) StrayIDClaims(storeDir string) []string { return nil }

func (h *fakeHost) HybridCgroups() bool { return false }

func (h *fakeHost) LoopbackUp(netns string) error { return h.op("LoopbackUp", nil) }

func (h *fakeHost) AttachDenyAll(name, cgroup string) error {
	return h.op("AttachDenyAll", func() error { h.live["pins "+name] = true; return nil })
}
