package sidecar

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/credentials"
	"github.com/airlock-dev/airlock/policy"
)

// racePolicy is version v of the policy: its name, mode, CIDR rule and secret all say v, so
// every component's state tells which version it holds.
func racePolicy(v int) string {
	mode := "enforce"
	if v%2 == 1 {
		mode = "report"
	}
	return fmt.Sprintf(`apiVersion: airlock/v1
kind: EgressPolicy
metadata:
  name: v%d
spec:
  mode: %s
  egress:
    - name: range
      cidrs: ["%s/32"]
      ports: [443]
      inject:
        - header: Authorization
          value: 'Bearer {{ secret "s%d" }}'
  secrets:
    s%d:
      env: AIRLOCK_TEST_RELOAD_RACE_UNSET
`, v, mode, versionAddr(v), v, v)
}

// versionAddr is the address version v's rule names: 198.18.v/256.v%256.
func versionAddr(v int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 18, byte(v / 256), byte(v % 256)})
}

// fakeEnforcer is a kernel enforcer that records what it was told: the policy versions its
// CIDR rules came from, in order, and the mode.
type fakeEnforcer struct {
	// gate, when set, holds SetCIDRs of gate.version until gate.release is closed, after
	// closing gate.entered.
	gate *gate

	// mu guards versions and report.
	mu       sync.Mutex
	versions []int
	report   bool
}

func (f *fakeEnforcer) attach(spec KernelSpec) (Enforcer, error) {
	if err := f.SetCIDRs(spec.CIDRs); err != nil {
		return nil, err
	}
	return f, f.SetReport(spec.Report)
}

func (f *fakeEnforcer) SetCIDRs(rules []policy.CIDRRule) error {
	runtime.Gosched() // the eBPF enforcer makes syscalls here
	if len(rules) != 1 {
		return fmt.Errorf("got %d CIDR rules, want 1", len(rules))
	}
	b := rules[0].Prefix.Addr().As4()
	v := int(b[2])*256 + int(b[3])
	if g := f.gate; g != nil && v == g.version {
		close(g.entered)
		<-g.release
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.versions = append(f.versions, v)
	return nil
}

// gate holds the kernel update of one policy version.
type gate struct {
	version          int
	entered, release chan struct{}
}

func (f *fakeEnforcer) SetReport(report bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.report = report
	return nil
}

func (f *fakeEnforcer) saw(v int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Contains(f.versions, v)
}

func (f *fakeEnforcer) state() ([]int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.versions), f.report
}

func (f *fakeEnforcer) Allow(netip.Addr, []uint16, time.Time) error { return nil }
func (f *fakeEnforcer) Revoke(netip.Addr, []uint16) error           { return nil }
func (f *fakeEnforcer) OriginalDst(net.Conn) (netip.AddrPort, error) {
	return netip.AddrPort{}, ErrKernelUnavailable
}
func (f *fakeEnforcer) Counters() (KernelCounters, error) { return KernelCounters{}, nil }
func (f *fakeEnforcer) Close() error                      { return nil }

// Reloads from SIGHUP and from changes of a ConfigMap-mounted policy file race: many
// goroutines publish versions of the file the way the kubelet does (symlink swap) while
// others send SIGHUP. The kernel must never be handed an older version after a newer one,
// and once the dust settles the store, the DNS filter, the placeholders file and the kernel
// all hold the last version written.
func TestReloadRace(t *testing.T) {
	cm := &configMap{dir: t.TempDir()}
	if err := cm.swap(racePolicy(0)); err != nil {
		t.Fatal(err)
	}
	fake := &fakeEnforcer{}
	hup := make(chan os.Signal)
	var stderr syncBuffer
	cfg := testConfig(t, cm.file(), &stderr)
	cfg.Cgroup, cfg.AttachKernel, cfg.ReloadSignal = "/fake-cgroup", fake.attach, hup
	s := startSidecar(t, cfg)

	last := raceWritesAndSignals(t, cm, hup)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	// Settle: one more signal, then wait until every reload asked for has been applied. A
	// file watch event still in its debounce reloads the same last version.
	select {
	case hup <- syscall.SIGHUP:
	case <-ctx.Done():
		t.Fatal("the reloader does not take signals")
	}
	s.reload.sync(ctx)

	versions, report := fake.state()
	if !slices.IsSorted(versions) {
		t.Errorf("the kernel got an older policy after a newer one: versions applied %v", versions)
	}
	want := fmt.Sprintf("v%d", last)
	if got := s.store.Current().Name(); got != want {
		t.Errorf("store: got %s, want %s", got, want)
	}
	if _, p := s.dns.appliedPolicy(); p == nil || p.Name() != want {
		t.Errorf("DNS filter: got %v, want %s", p.Name(), want)
	}
	if got := versions[len(versions)-1]; got != last || report != (last%2 == 1) {
		t.Errorf("kernel: got version %d report %t, want %d report %t", got, report, last, last%2 == 1)
	}
	if got := placeholders(t, cfg.StateDir); !slices.Equal(got, []string{fmt.Sprintf("s%d", last)}) {
		t.Errorf("placeholders.json: got %v, want s%d only", got, last)
	}
	t.Logf("%d versions written, %d applied to the kernel", last, len(versions))
}

// raceWritesAndSignals publishes versions 1..n of the policy from several goroutines while
// others send SIGHUP until the writers are done, and returns the last version written.
func raceWritesAndSignals(t *testing.T, cm *configMap, hup chan<- os.Signal) int {
	const writers, signalers, perWriter = 4, 4, 8
	var (
		mu   sync.Mutex // guards cm and last
		last int
		wg   sync.WaitGroup
	)
	done := make(chan struct{})
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perWriter {
				mu.Lock()
				last++
				err := cm.swap(racePolicy(last))
				mu.Unlock()
				if err != nil {
					t.Error(err)
					return
				}
				// Pauses around the watcher's debounce let some file changes reload while
				// SIGHUP reloads are under way. They shape the load; nothing waits on them.
				time.Sleep(time.Duration(rand.IntN(150)) * time.Millisecond)
			}
		}()
	}
	var sg sync.WaitGroup
	for range signalers {
		sg.Add(1)
		go func() {
			defer sg.Done()
			for {
				select {
				case hup <- syscall.SIGHUP:
				case <-done:
					return
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	sg.Wait()
	return last
}

// placeholders returns the secret names in the state directory's placeholders.json.
func placeholders(t *testing.T, stateDir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(stateDir, credentials.PlaceholdersFile))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("placeholders.json: %v", err)
	}
	var names []string
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// A reload that is slow to reach the kernel (SIGHUP, version 1) must not land after a later
// one (a file change to version 2 while it is under way): the later reload waits, and the
// kernel ends with version 2. The old wiring, where the signal handler and the file watcher
// each reloaded and applied on their own goroutine, ended with version 1 in the kernel and
// version 2 in the store.
func TestReloadNeverAppliesOlderPolicy(t *testing.T) {
	cm := &configMap{dir: t.TempDir()}
	if err := cm.swap(racePolicy(0)); err != nil {
		t.Fatal(err)
	}
	g := &gate{version: 1, entered: make(chan struct{}), release: make(chan struct{})}
	fake := &fakeEnforcer{gate: g}
	hup := make(chan os.Signal, 1)
	var stderr syncBuffer
	cfg := testConfig(t, cm.file(), &stderr)
	cfg.Cgroup, cfg.AttachKernel, cfg.ReloadSignal = "/fake-cgroup", fake.attach, hup
	s := startSidecar(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	if err := cm.swap(racePolicy(1)); err != nil {
		t.Fatal(err)
	}
	hup <- syscall.SIGHUP
	select {
	case <-g.entered: // version 1 is on its way into the kernel, held there
	case <-ctx.Done():
		t.Fatal("version 1 never reached the kernel")
	}
	if err := cm.swap(racePolicy(2)); err != nil {
		t.Fatal(err)
	}
	// Wait until the change to version 2 has been seen: applied to the kernel (the old
	// wiring) or queued behind the reload in progress (one reload goroutine). This polls a
	// condition under a failure deadline; it does not time the test.
	for !fake.saw(2) && len(s.reload.trigger) == 0 {
		if ctx.Err() != nil {
			t.Fatal("the change to version 2 was never seen")
		}
		time.Sleep(time.Millisecond)
	}
	close(g.release)
	s.reload.sync(ctx)

	versions, report := fake.state()
	if !slices.IsSorted(versions) {
		t.Errorf("the kernel got an older policy after a newer one: versions applied %v", versions)
	}
	if got := versions[len(versions)-1]; got != 2 || report {
		t.Errorf("kernel: got version %d report %t, want version 2 enforce (store holds %s)", got, report, s.store.Current().Name())
	}
	if _, p := s.dns.appliedPolicy(); p.Name() != "v2" {
		t.Errorf("DNS filter: got %s, want v2", p.Name())
	}
}

// A ConfigMap update alone (the kubelet's ..data symlink swap, no signal) reloads the
// policy everywhere.
func TestReloadOnConfigMapSwap(t *testing.T) {
	cm := &configMap{dir: t.TempDir()}
	if err := cm.swap(racePolicy(0)); err != nil {
		t.Fatal(err)
	}
	fake := &fakeEnforcer{}
	var stderr syncBuffer
	cfg := testConfig(t, cm.file(), &stderr)
	cfg.Cgroup, cfg.AttachKernel = "/fake-cgroup", fake.attach
	s := startSidecar(t, cfg)
	if err := cm.swap(racePolicy(3)); err != nil {
		t.Fatal(err)
	}
	// Poll under a failure deadline: the watcher debounces the swap's events.
	deadline := time.Now().Add(waitTimeout)
	for !fake.saw(3) {
		if time.Now().After(deadline) {
			t.Fatalf("the ConfigMap swap was not reloaded; log:\n%s", stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.reload.sync(context.Background())
	if _, p := s.dns.appliedPolicy(); p.Name() != "v3" || s.store.Current().Name() != "v3" {
		t.Errorf("DNS filter %s, store %s: want v3", p.Name(), s.store.Current().Name())
	}
	if _, report := fake.state(); !report {
		t.Errorf("kernel mode: enforce, want report (v3)")
	}
}
