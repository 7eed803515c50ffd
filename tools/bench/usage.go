package main

// The usage section of `make bench` (issue 35): what measuring a sandbox costs. The usage
// meter's sample (cgroup cpu.stat and memory files, the kernel's per-CPU counters, one
// synced ledger line) is timed in CPU, at idle and while a process in the cgroup receives
// data as fast as loopback carries it; the sidecar's CPU share follows from the interval.
// The data path's cost (the eBPF programs, the ingress counter among them) shows as the
// receive throughput of that process in the enforced cgroup against a plain one.
// It needs root, cgroup v2 and bpffs; without them it reports why and is skipped.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/ebpf"
	"github.com/airlock-dev/airlock/meter"
	"github.com/airlock-dev/airlock/policy"
)

const (
	usageRecvRole = "usage-recv-child"
	usageRecvMiB  = 512
	usageSamples  = 200
	usageRounds   = 3
)

// usageReport holds the usage section's figures.
type usageReport struct {
	skipped                  string
	idleSampleUs, busySample float64 // CPU µs per sample
	plainMBs, enforcedMBs    float64 // receive throughput, MB/s
	err                      error
}

// runUsageRecvChild connects to os.Args[2], reads os.Args[3] bytes and prints the ns taken.
func runUsageRecvChild() int {
	n, _ := strconv.ParseInt(os.Args[3], 10, 64)
	start := time.Now()
	c, err := net.Dial("tcp", os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	if _, err := io.CopyN(io.Discard, c, n); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(time.Since(start).Nanoseconds())
	return 0
}

// staticPolicy is a policy store that never reloads.
type staticPolicy struct{ p *policy.Policy }

func (s staticPolicy) Current() *policy.Policy { return s.p }

func runUsageBench(ctx context.Context, e *env, root string) usageReport {
	if os.Geteuid() != 0 {
		return usageReport{skipped: "not root"}
	}
	if err := ebpf.Probe(); err != nil {
		return usageReport{skipped: err.Error()}
	}
	cgRoot, err := ebpf.Cgroup2Root()
	if err != nil {
		return usageReport{skipped: err.Error()}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return usageReport{err: err}
	}
	defer ln.Close()
	go serveZeros(ln)
	addr := ln.Addr().(*net.TCPAddr).AddrPort()
	pair, err := newCgroupPair(cgRoot, "usage", addr)
	if err != nil {
		return usageReport{err: err}
	}
	defer pair.Close()
	plain, enforced, enf := pair.plain, pair.enforced, pair.enf
	m, err := benchMeter(root, enforced, enf)
	if err != nil {
		return usageReport{err: err}
	}
	var rep usageReport
	if rep.idleSampleUs, err = sampleCost(m); err != nil {
		return usageReport{err: err}
	}
	var plainMBs, enfMBs, busy []float64
	for round := range usageRounds {
		e.progress("usage: round %d/%d: %d MiB received in a plain cgroup, then in the enforced one while sampling", round+1, usageRounds, usageRecvMiB)
		mbs, err := recvChild(ctx, plain, addr)
		if err != nil {
			return usageReport{err: err}
		}
		plainMBs = append(plainMBs, mbs)
		costs := make(chan float64, 1)
		done := make(chan struct{})
		go func() { costs <- sampleUntil(m, done) }()
		mbs, err = recvChild(ctx, enforced, addr)
		close(done)
		busy = append(busy, <-costs)
		if err != nil {
			return usageReport{err: err}
		}
		enfMBs = append(enfMBs, mbs)
	}
	rep.plainMBs, rep.enforcedMBs, rep.busySample = median(plainMBs), median(enfMBs), median(busy)
	return rep
}

// benchMeter is a usage meter on the enforced cgroup, as the sidecar builds it.
func benchMeter(root, cgroup string, enf *ebpf.Enforcer) (*meter.Meter, error) {
	pol, err := policy.Parse("bench.yaml", []byte("apiVersion: airlock/v1\nkind: EgressPolicy\nmetadata: {name: bench}\nspec:\n  usage:\n    prices: {cpuSecond: 0.00001}\n"))
	if err != nil {
		return nil, err
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	cg := meter.FindCgroup(cgroup, mi)
	m, err := meter.New(meter.Config{Key: meter.Key{Sandbox: "bench"}, Cgroup: &cg, Policy: staticPolicy{pol},
		Ledger: filepath.Join(root, meter.LedgerFile), Net: func() (meter.Net, error) {
			c, err := enf.Counters()
			return meter.Net{TxBytes: c.Bytes, RxBytes: c.RxBytes, Connections: c.Connections}, err
		}})
	if err != nil {
		return nil, err
	}
	return m, m.Open()
}

// sampleCost is the median CPU time (user plus system, this process) of one sample.
func sampleCost(m *meter.Meter) (float64, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var costs []float64
	for range usageSamples {
		before := cpuTime()
		if _, err := m.Sample(meter.KindSample); err != nil {
			return 0, err
		}
		costs = append(costs, float64(cpuTime()-before)/1e3)
	}
	return median(costs), nil
}

// sampleUntil samples every 10 ms until done and returns the median CPU µs per sample.
func sampleUntil(m *meter.Meter, done <-chan struct{}) float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var costs []float64
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-done:
			return median(costs)
		case <-t.C:
		}
		before := cpuTime()
		if _, err := m.Sample(meter.KindSample); err == nil {
			costs = append(costs, float64(cpuTime()-before)/1e3)
		}
	}
}

// cpuTime is this thread's CPU time in ns: the caller is locked to its thread, on which the
// sample runs (the bench's other threads are not counted).
func cpuTime() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return ts.Nano()
}

// serveZeros sends zeros on every accepted connection until the peer closes it.
func serveZeros(ln net.Listener) {
	buf := make([]byte, 256<<10)
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			for {
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		}()
	}
}

// recvChild runs the receive child in cgroup dir and returns its MB/s.
func recvChild(ctx context.Context, dir string, addr netip.AddrPort) (float64, error) {
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	f, err := os.Open(dir)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	n := int64(usageRecvMiB) << 20
	cmd := exec.CommandContext(ctx, self, usageRecvRole, addr.String(), strconv.FormatInt(n, 10))
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(f.Fd()), Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("receive child in %s: %w", dir, err)
	}
	ns, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	if err != nil || ns <= 0 {
		return 0, fmt.Errorf("receive child: %q", out)
	}
	return float64(n) / 1e6 / (ns / 1e9), nil
}

func printUsageReport(w io.Writer, r usageReport) {
	fmt.Fprintln(w, "\nusage meter (cost of measuring a sandbox)")
	switch {
	case r.skipped != "":
		fmt.Fprintf(w, "  skipped: %s\n", r.skipped)
		return
	case r.err != nil:
		fmt.Fprintf(w, "  INVALID: %v\n", r.err)
		return
	}
	share := func(us float64, every time.Duration) float64 { return us / float64(every.Microseconds()) * 100 }
	fmt.Fprintf(w, "  one sample (cgroup files, kernel counters, a synced ledger line): %.0f µs CPU idle, %.0f µs under load\n", r.idleSampleUs, r.busySample)
	fmt.Fprintf(w, "  sidecar CPU for metering: %.4f%% of a core at the default interval (%s), %.2f%% at the shortest (%s); 0 without\n",
		share(r.busySample, policy.DefaultUsageInterval), policy.DefaultUsageInterval, share(r.busySample, policy.MinUsageInterval), policy.MinUsageInterval)
	ratio := 0.0
	if r.plainMBs > 0 {
		ratio = r.enforcedMBs / r.plainMBs
	}
	fmt.Fprintf(w, "  receiving %d MiB over loopback: %.0f MB/s in a plain cgroup, %.0f MB/s with the programs (ingress counter included) while sampling every 10 ms: %.2fx\n",
		usageRecvMiB, r.plainMBs, r.enforcedMBs, ratio)
}
