//go:build linux

package meter

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/test/privtest"
	"github.com/airlock-dev/airlock/test/testnet"
	"golang.org/x/sys/unix"
)

// TestMain runs the helper processes the privileged tests put in a cgroup: a busy loop and
// a memory hog, chosen by METER_HELPER.
func TestMain(m *testing.M) {
	switch os.Getenv("METER_HELPER") {
	case "busy":
		//lint:ignore SA5002 the busy loop is the point: it burns CPU in the cgroup
		for {
		}
	case "hog":
		// Wait to be told the process is in its cgroups, then touch 64 MiB and say so.
		bufio.NewReader(os.Stdin).ReadString('\n')
		b := make([]byte, 64<<20)
		for i := range b {
			b[i] = byte(i)
		}
		fmt.Println("ready")
		io.Copy(io.Discard, os.Stdin)
		fmt.Fprint(io.Discard, b[len(b)-1])
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// sandboxCgroup is a real cgroup standing in for a sandbox's: a v2 directory and, on a
// hybrid host, the same path in the v1 memory hierarchy.
type sandboxCgroup struct {
	cg  Cgroup
	dir *os.File
}

func newSandboxCgroup(t *testing.T) *sandboxCgroup {
	privtest.Require(t)
	v2 := testnet.NewCgroup(t).Path
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	root, err := testnet.Cgroup2Root()
	if err != nil {
		t.Fatal(err)
	}
	rel := strings.TrimPrefix(v2, root+"/")
	for _, m := range parseCgroupMounts(mi) {
		if !m.v2 && strings.Contains(strings.Join(m.controllers, ","), "memory") {
			dir := filepath.Join(m.dir, rel)
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { removeV1(t, dir) })
		}
	}
	d, err := os.Open(v2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return &sandboxCgroup{cg: FindCgroup(v2, mi), dir: d}
}

// removeV1 kills what is left in a v1 cgroup and removes it, polling the kernel's reaping.
func removeV1(t *testing.T, dir string) {
	for deadline := time.Now().Add(10 * time.Second); ; {
		b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				unix.Kill(pid, unix.SIGKILL)
			}
		}
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("remove %s: %v", dir, err)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// start runs a helper in the cgroup (clone3 into the v2 one, then into the v1 memory one
// before it allocates anything worth counting).
func (s *sandboxCgroup) start(t *testing.T, helper string) (*exec.Cmd, io.WriteCloser, *bufio.Reader) {
	t.Helper()
	return startIn(t, s.dir, s.cg, helper)
}

// startIn runs a helper in cg, whose v2 directory dir is open.
func startIn(t *testing.T, dir *os.File, cg Cgroup, helper string) (*exec.Cmd, io.WriteCloser, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "METER_HELPER="+helper)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd()), Pdeathsig: syscall.SIGKILL}
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if cg.V1Memory != "" {
		if err := os.WriteFile(filepath.Join(cg.V1Memory, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return cmd, stdin, bufio.NewReader(stdout)
}

// cpuUsec reads the cgroup's own CPU counter.
func (s *sandboxCgroup) cpuUsec(t *testing.T) uint64 {
	t.Helper()
	st, err := s.cg.Read()
	if err != nil {
		t.Fatal(err)
	}
	return st.CPUUserUsec + st.CPUSystemUsec
}

// TestMeterMatchesCgroup: after a busy loop and a 64 MiB hog, the meter's CPU-seconds and
// memory peak match the cgroup's own counters (read again after the last sample, with
// nothing running), and GiB-hours lie between zero and peak times the time metered.
func TestMeterMatchesCgroup(t *testing.T) {
	s := newSandboxCgroup(t)
	if s.cg.V1Memory == "" {
		if _, err := os.Stat(filepath.Join(s.cg.V2, "memory.current")); err != nil {
			t.Fatalf("no memory accounting for %s: neither v2 memory files nor a v1 memory hierarchy", s.cg.V2)
		}
	}
	m := newMeter(t, s, newPolSource(t, ""), nil)
	busy, _, _ := s.start(t, "busy")
	hog, hogIn, hogOut := s.start(t, "hog")
	hogIn.Write([]byte("go\n"))
	if line, err := hogOut.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("hog: %q, %v", line, err)
	}
	var r Record
	for r.CPUSeconds() < 0.3 { // poll the meter until the loop has burnt 0.3 s
		r = sample(t, m, KindSample)
	}
	busy.Process.Kill()
	busy.Wait()
	hogIn.Close()
	hog.Wait()
	r = sample(t, m, KindFinal)
	st, err := s.cg.Read()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.CPUUserUsec+r.CPUSystemUsec, st.CPUUserUsec+st.CPUSystemUsec; got != want {
		t.Errorf("CPU: meter %d µs, cgroup %d µs; want equal once nothing runs", got, want)
	}
	if r.MemoryPeakBytes < 64<<20 || r.MemoryPeakBytes != st.MemoryPeakBytes {
		t.Errorf("memory peak: meter %d, cgroup %d; want equal and at least 64 MiB", r.MemoryPeakBytes, st.MemoryPeakBytes)
	}
	life := r.Time.Sub(r.Since).Hours()
	if r.MemoryGiBHours <= 0 || r.MemoryGiBHours > float64(r.MemoryPeakBytes)/gib*life {
		t.Errorf("GiB-hours %v, want in (0, peak × %v h]", r.MemoryGiBHours, life)
	}
}

// TestCPUCapFreezesAndReloadThaws: a cpuSeconds cap freezes a busy loop (its CPU stops
// growing in the cgroup's own counter); a reload that raises the cap thaws it; a second
// meter on the same ledger (a sidecar restart) carries the totals on.
func TestCPUCapFreezesAndReloadThaws(t *testing.T) {
	s := newSandboxCgroup(t)
	pols := newPolSource(t, "  usage:\n    caps: {cpuSeconds: 0.3}\n")
	evs := &events{}
	m := newMeter(t, s, pols, evs)
	s.start(t, "busy")
	for r := sample(t, m, KindSample); r.Kind != KindFreeze; r = sample(t, m, KindSample) {
		if r.Frozen != "" {
			t.Fatalf("frozen without a freeze record: %+v", r)
		}
	}
	waitFrozen(t, s.cg, true)
	if err := m.Admit(); err == nil || !strings.Contains(err.Error(), "cpuSeconds") {
		t.Errorf("Admit while frozen: %v, want the cap's message", err)
	}
	before := s.cpuUsec(t)
	time.Sleep(300 * time.Millisecond) // a window to measure in, not a synchronisation
	if after := s.cpuUsec(t); after-before > 5000 {
		t.Errorf("frozen loop used %d µs in 300 ms, want (almost) none", after-before)
	}
	if r := sample(t, m, KindSample); r.Kind != KindSample || r.Frozen == "" {
		t.Errorf("sample while frozen: %+v, want a plain sample that stays frozen", r)
	}
	// A restart: a new meter on the ledger restores the totals and the freeze.
	m.ledger.Close()
	m2 := newMeter(t, s, pols, evs)
	if r := m2.Current(); r.CPUSeconds() < 0.3 || r.Frozen == "" {
		t.Fatalf("restored: %+v, want the totals and the freeze", r)
	}
	pols.set(t, "  usage:\n    caps: {cpuSeconds: 1000}\n")
	if r := sample(t, m2, KindSample); r.Kind != KindThaw || r.Frozen != "" {
		t.Fatalf("after the reload: %+v, want a thaw", r)
	}
	waitFrozen(t, s.cg, false)
	for start := s.cpuUsec(t); s.cpuUsec(t) < start+50000; {
		// polls the cgroup until the thawed loop has used 50 ms more
	}
	got := evs.all()
	if len(got) != 2 || got[0].Kind != audit.KindUsage || got[0].Reason != string(policy.ReasonUsageCap) || got[0].Decision != audit.DecisionDeny ||
		got[1].Reason != string(policy.ReasonUsageThawed) || got[1].Decision != audit.DecisionAllow {
		t.Errorf("audit events: %+v, want a usage_cap deny and a usage_thawed allow", got)
	}
}

// TestOperatorThaw: the operator's thaw request thaws past the cap until the next reload,
// which freezes again while the cap is still reached.
func TestOperatorThaw(t *testing.T) {
	s := newSandboxCgroup(t)
	pols := newPolSource(t, "  usage:\n    caps: {cpuSeconds: 0.1}\n")
	m := newMeter(t, s, pols, nil)
	s.start(t, "busy")
	for r := sample(t, m, KindSample); r.Kind != KindFreeze; r = sample(t, m, KindSample) {
	}
	if err := os.WriteFile(m.cfg.ThawRequest, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := sample(t, m, KindSample); r.Kind != KindThaw || !r.Waived {
		t.Fatalf("after the thaw request: %+v, want a waived thaw", r)
	}
	if r := sample(t, m, KindSample); r.Frozen != "" || m.Admit() != nil {
		t.Fatalf("waived: %+v, want it left running", r)
	}
	pols.set(t, "  usage:\n    caps: {cpuSeconds: 0.05}\n")
	if r := sample(t, m, KindSample); r.Kind != KindFreeze || r.Waived {
		t.Fatalf("after a reload: %+v, want frozen again", r)
	}
	waitFrozen(t, s.cg, true)
}

func newMeter(t *testing.T, s *sandboxCgroup, pols *polSource, sink audit.Sink) *Meter {
	t.Helper()
	dir := filepath.Join(os.TempDir(), "meter-"+filepath.Base(s.cg.V2))
	os.MkdirAll(dir, 0o700)
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg := Config{Key: Key{Sandbox: "s"}, Cgroup: &s.cg, Policy: pols, Ledger: filepath.Join(dir, LedgerFile),
		ThawRequest: filepath.Join(dir, ThawFile)}
	if sink != nil {
		cfg.Audit = sink
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.ledger.Close(); s.cg.Freeze(false) })
	return m
}

func sample(t *testing.T, m *Meter, kind string) Record {
	t.Helper()
	r, err := m.Sample(kind)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// waitFrozen polls the cgroup until its processes are (or are no longer) frozen.
func waitFrozen(t *testing.T, cg Cgroup, want bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		got, err := cg.Frozen()
		if err != nil {
			t.Fatal(err)
		}
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("cgroup frozen %v after 10 s, want %v", got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestUSDCapWaitsForModelCalls: compute spend that reaches the usd cap while a model call
// holds a reservation freezes only once the call has settled; new calls are refused meanwhile.
func TestUSDCapWaitsForModelCalls(t *testing.T) {
	s := newSandboxCgroup(t)
	pols := newPolSource(t, "  usage:\n    prices: {cpuSecond: 1}\n    caps: {usd: 0.2}\n")
	var spend atomic.Pointer[ModelSpend]
	spend.Store(&ModelSpend{UsedNano: 0.05e9, HeldNano: 0.1e9})
	m := newMeter(t, s, pols, nil)
	m.cfg.Model = func() (ModelSpend, bool) { return *spend.Load(), true }
	s.start(t, "busy")
	for r := sample(t, m, KindSample); r.TotalUSD() < 0.2; r = sample(t, m, KindSample) {
		if r.Frozen != "" {
			t.Fatalf("frozen while a model call is in flight: %+v", r)
		}
	}
	if _, pending := m.Status(); !strings.Contains(pending, "model calls in flight") {
		t.Errorf("pending %q, want the freeze said to wait for the model calls", pending)
	}
	if err := m.Admit(); err == nil {
		t.Error("a new model call was admitted over the usd cap")
	}
	if frozen, err := s.cg.Frozen(); err != nil || frozen {
		t.Fatalf("frozen %v (%v) while the call holds its reservation", frozen, err)
	}
	spend.Store(&ModelSpend{UsedNano: 0.08e9}) // the call settled
	if r := sample(t, m, KindSample); r.Kind != KindFreeze || !strings.Contains(r.Frozen, "usd") {
		t.Fatalf("after the call settled: %+v, want frozen by the usd cap", r)
	}
	waitFrozen(t, s.cg, true)
}
