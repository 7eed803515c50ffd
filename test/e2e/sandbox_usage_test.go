//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/test/testnet"
)

// The usage meter end to end (issue 35): real runc sandboxes, a busy loop, a memory hog,
// downloads through the sidecar from a test host, model calls to the fake provider; the
// figures `airlock usage` shows against the cgroup's and the kernel's own counters, across a
// sidecar restart and `sandbox delete`; a cpuSeconds cap that freezes and a reload that
// thaws; an egressBytes cap that stops a download.

const sbBulkAddr = "198.18.0.45"

// usageBill is one element of `airlock usage --json`'s "sandboxes".
type usageBill struct {
	Sandbox         string  `json:"sandbox"`
	Identity        string  `json:"identity"`
	State           string  `json:"state"`
	Kind            string  `json:"kind"`
	Time            string  `json:"time"`
	CPUUserUsec     uint64  `json:"cpu_user_usec"`
	CPUSystemUsec   uint64  `json:"cpu_system_usec"`
	MemoryPeakBytes uint64  `json:"memory_peak_bytes"`
	MemoryGiBHours  float64 `json:"memory_gib_hours"`
	TxBytes         uint64  `json:"tx_bytes"`
	RxBytes         uint64  `json:"rx_bytes"`
	Connections     uint64  `json:"connections"`
	ComputeUSD      float64 `json:"compute_usd"`
	ModelUSD        float64 `json:"model_usd"`
	TotalUSD        float64 `json:"total_usd"`
	Frozen          string  `json:"frozen"`
}

// bulkServer serves /bytes?n=N (N bytes at once) and /slow?n=N (N bytes in 64 KiB pieces,
// 5 ms apart: a download a cap can catch halfway); it counts the bytes it wrote.
type bulkServer struct{ written atomic.Int64 }

func startBulk(t *testing.T, e *sbEnv) *bulkServer {
	t.Helper()
	b := &bulkServer{}
	addr := netip.MustParseAddr(sbBulkAddr)
	e.w.AddUpstreamAddr(t, addr)
	e.w.DNS.Set("bulk.test", testnet.DefaultTTL, addr)
	ln, err := e.w.Upstream.Listen("tcp", netip.AddrPortFrom(addr, 8080).String())
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Length", strconv.Itoa(n))
		for n > 0 {
			k, err := w.Write(chunk[:min(n, len(chunk))])
			b.written.Add(int64(k))
			if err != nil {
				return
			}
			n -= k
			if r.URL.Path == "/slow" {
				w.(http.Flusher).Flush()
				time.Sleep(5 * time.Millisecond) // pacing the download, not synchronising
			}
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return b
}

// usagePolicy is sbPolicy with bulk.test allowed and spec.usage added.
func usagePolicy(usage string) string {
	p := strings.Replace(sbPolicy, "  egress:\n", "  egress:\n    - name: bulk\n      hosts: [\"bulk.test\"]\n      ports: [8080]\n", 1)
	return p + "  usage:\n" + usage
}

// bill runs `airlock usage --json` and returns the sandbox's bill (its own row, not an
// identity's).
func (e *sbEnv) bill(t *testing.T, name string) (usageBill, bool) {
	t.Helper()
	return e.identityBill(t, name, "")
}

// identityBill runs `airlock usage --json` (with --identity when identity is set) and
// returns the row of the sandbox's identity ("": the sandbox's own).
func (e *sbEnv) identityBill(t *testing.T, name, identity string) (usageBill, bool) {
	t.Helper()
	args := []string{"usage", "--json", "--state-dir", e.stateDir}
	if identity != "" {
		args = append(args, "--identity", identity)
	}
	r := e.run(t, nil, nil, args...)
	if r.Code != 0 {
		t.Fatalf("airlock usage --json: %s", r)
	}
	var out struct {
		Sandboxes []usageBill `json:"sandboxes"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil {
		t.Fatalf("airlock usage --json: %v: %s", err, r.Stdout)
	}
	for _, b := range out.Sandboxes {
		if b.Sandbox == name && b.Identity == identity {
			return b, true
		}
	}
	return usageBill{}, false
}

// waitBill polls `airlock usage` until ok says the sandbox's bill is as wanted.
func (e *sbEnv) waitBill(t *testing.T, name, what string, ok func(usageBill) bool) usageBill {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, found := e.bill(t, name)
		if found && ok(b) {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s: %s: not within 30 s; last bill %+v", name, what, b)
		}
		time.Sleep(50 * time.Millisecond) // polling the ledger the sidecar writes
	}
}

// cgroupCPU reads user plus system µs of the sandbox's cgroup (cpu.stat).
func cgroupCPU(t *testing.T, cgroup string) uint64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cgroup, "cpu.stat"))
	if err != nil {
		t.Fatal(err)
	}
	var sum uint64
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && (k == "user_usec" || k == "system_usec") {
			n, _ := strconv.ParseUint(v, 10, 64)
			sum += n
		}
	}
	return sum
}

// cgroupMemPeak reads the sandbox's memory peak from the hierarchy that counts it.
func cgroupMemPeak(t *testing.T, cgroup string) uint64 {
	t.Helper()
	root, err := testnet.Cgroup2Root()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(cgroup, "memory.peak"),
		filepath.Join("/sys/fs/cgroup/memory", strings.TrimPrefix(cgroup, root), "memory.max_usage_in_bytes")} {
		if b, err := os.ReadFile(p); err == nil {
			n, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
			return n
		}
	}
	t.Fatalf("no memory peak file for %s", cgroup)
	return 0
}

// metric sums the samples of one metric family on the sidecar's /metrics, fetched with curl
// in the sidecars' network namespace (the admin listener is on its loopback).
func metric(t *testing.T, e *sbEnv, admin, name string) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := e.w.Sidecar.CommandHostMounts(ctx, "curl", "-sf", "http://"+admin+"/metrics").Output()
	if err != nil {
		t.Fatalf("scrape %s: %v", admin, err)
	}
	var sum float64
	for _, line := range strings.Split(string(out), "\n") {
		if line == name || strings.HasPrefix(line, name+" ") || strings.HasPrefix(line, name+"{") {
			f := strings.Fields(line)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			sum += v
		}
	}
	return sum
}

func TestSandboxUsage(t *testing.T) {
	e := newSandboxEnv(t)
	bulk := startBulk(t, e)
	pol := e.w.WriteFile(t, "usage-policy.yaml", []byte(usagePolicy("    interval: 200ms\n    prices: {cpuSecond: 0.01, gibHour: 0.1, gibTransferred: 0.5}\n")))
	name := e.name("usage")
	info := e.create(t, name, "--policy", pol)

	// A busy loop of about one CPU-second, a 96 MiB hog, 3 downloads of 8 MB, two model calls.
	r := e.exec(t, nil, name, nil, nil, e.python, "-c", "import time\nend = time.process_time() + 1.0\nwhile time.process_time() < end: pass")
	if r.Code != 0 {
		t.Fatalf("busy loop: %s", r)
	}
	r = e.exec(t, nil, name, nil, nil, e.python, "-c", "b = bytearray(96 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1")
	if r.Code != 0 {
		t.Fatalf("memory hog: %s", r)
	}
	const dl = 8_000_000
	for i := 0; i < 3; i++ {
		r = e.sh(t, name, curlScript(fmt.Sprintf("-o /dev/null http://bulk.test:8080/bytes?n=%d", dl)))
		if _, code, _ := parseCurl(t, r); code != 200 {
			t.Fatalf("download: %s", r)
		}
	}
	for i := 0; i < 2; i++ {
		r = e.sh(t, name, curlScript(`-X POST "$OPENAI_BASE_URL/chat/completions" -H 'Content-Type: application/json' `+
			`-d '{"model":"gpt-e2e","messages":[{"role":"user","content":"hi"}]}'`))
		if _, code, _ := parseCurl(t, r); code != 200 {
			t.Fatalf("model call: %s", r)
		}
	}
	// Nothing runs now: once a sample is taken after this moment, the bill equals the
	// cgroup's counters, and the kernel's (the sidecar's metrics read the same map).
	cpu, peak := cgroupCPU(t, info.Cgroup), cgroupMemPeak(t, info.Cgroup)
	rx := metric(t, e, info.AdminAddr, "airlock_kernel_ingress_bytes_total")
	tx := metric(t, e, info.AdminAddr, "airlock_kernel_egress_bytes_total")
	b := e.waitBill(t, name, "a sample with the run's figures", func(b usageBill) bool {
		return b.CPUUserUsec+b.CPUSystemUsec >= cpu && b.RxBytes >= uint64(rx) && b.ModelUSD > 0
	})
	checkBill(t, b, cpu, peak, rx, tx, 3*dl)
	if got := metric(t, e, info.AdminAddr, "airlock_usage_cost_usd_total"); got <= 0 {
		t.Errorf("airlock_usage_cost_usd_total %v, want > 0", got)
	}
	r = e.run(t, nil, nil, "usage", "--state-dir", e.stateDir)
	if r.Code != 0 || !strings.Contains(r.Stdout, name) || !strings.Contains(r.Stdout, "GiB-HOURS") {
		t.Errorf("airlock usage: %s", r)
	}

	// A sidecar restart (killed: the supervisor starts a new one): the totals carry on.
	if err := syscall.Kill(info.SidecarPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e.waitBill(t, name, "a sample from the restarted sidecar", func(nb usageBill) bool {
		i, ok := e.info(t, name)
		return ok && i.Health == "ok" && i.SidecarPid != info.SidecarPid && nb.Time > b.Time
	})
	after, _ := e.bill(t, name)
	if after.CPUUserUsec+after.CPUSystemUsec < b.CPUUserUsec+b.CPUSystemUsec || after.RxBytes < b.RxBytes ||
		after.MemoryPeakBytes < b.MemoryPeakBytes || after.ModelUSD < b.ModelUSD {
		t.Errorf("after a sidecar restart: %+v, want at least %+v", after, b)
	}

	// sandbox delete: the bill stays in the state directory's archive.
	if r := e.run(t, nil, nil, "sandbox", "delete", "--state-dir", e.stateDir, name); r.Code != 0 {
		t.Fatalf("delete: %s", r)
	}
	gone, ok := e.bill(t, name)
	if !ok || gone.State != "deleted" || gone.CPUUserUsec+gone.CPUSystemUsec < cpu || gone.RxBytes < uint64(rx) || gone.ModelUSD < b.ModelUSD {
		t.Errorf("after delete: %+v (found %v), want the deleted sandbox's bill", gone, ok)
	}
	_ = bulk
}

// checkBill compares the bill with the cgroup's and the kernel's counters read while nothing
// ran, within the tolerances docs/sandboxes.md states.
func checkBill(t *testing.T, b usageBill, cpu, peak uint64, rx, tx float64, downloaded uint64) {
	t.Helper()
	if got := b.CPUUserUsec + b.CPUSystemUsec; got < 900_000 || got > cpu+50_000 {
		t.Errorf("CPU: bill %d µs, cgroup %d µs; want at least the 1 s loop and within 50 ms of the cgroup", got, cpu)
	}
	if b.MemoryPeakBytes < 96<<20 || b.MemoryPeakBytes != peak {
		t.Errorf("memory peak: bill %d, cgroup %d; want equal, at least 96 MiB", b.MemoryPeakBytes, peak)
	}
	if b.MemoryGiBHours <= 0 {
		t.Errorf("GiB-hours %v, want > 0", b.MemoryGiBHours)
	}
	if b.RxBytes < downloaded || float64(b.RxBytes) > rx+64<<10 || b.RxBytes > downloaded+downloaded/10+1<<20 {
		t.Errorf("received: bill %d, kernel %v, downloaded %d; want within 64 KiB of the kernel and 10%% + 1 MiB of the bodies", b.RxBytes, rx, downloaded)
	}
	if b.TxBytes == 0 || float64(b.TxBytes) > tx+64<<10 {
		t.Errorf("sent: bill %d, kernel %v", b.TxBytes, tx)
	}
	if b.Connections < 5 {
		t.Errorf("connections %d, want at least the 5 requests'", b.Connections)
	}
	if b.ModelUSD <= 0 || b.ComputeUSD <= 0 || b.TotalUSD < b.ModelUSD+b.ComputeUSD-1e-9 {
		t.Errorf("spend: compute %v model %v total %v", b.ComputeUSD, b.ModelUSD, b.TotalUSD)
	}
}

// TestSandboxUsageCaps: a cpuSeconds cap freezes a busy loop and a reload raising it thaws;
// an egressBytes cap stops a download.
func TestSandboxUsageCaps(t *testing.T) {
	e := newSandboxEnv(t)
	bulk := startBulk(t, e)
	t.Run("cpuSeconds", func(t *testing.T) {
		pol := e.w.WriteFile(t, "cpu-cap.yaml", []byte(usagePolicy("    interval: 200ms\n    caps: {cpuSeconds: 0.5}\n")))
		name := e.name("cpucap")
		info := e.create(t, name, "--policy", pol)
		// Hostile: the sandbox can neither thaw itself (its cgroup files are read-only to it)
		// nor see the usage ledger it is billed from.
		r := e.sh(t, name, "for f in /sys/fs/cgroup/cgroup.freeze /sys/fs/cgroup/unified/cgroup.freeze "+
			"/sys/fs/cgroup/freezer/freezer.state; do (echo 0 >$f) 2>/dev/null && echo WROTE $f; done; "+
			"ls "+filepath.Join(e.stateDir, "sandboxes", name, "sidecar")+" 2>/dev/null && echo SEES-LEDGER; true")
		if r.Code != 0 || strings.Contains(r.Stdout, "WROTE") || strings.Contains(r.Stdout, "SEES-LEDGER") {
			t.Errorf("the sandbox reached its freezer or its ledger: %s", r)
		}
		if r := e.sh(t, name, "(while :; do :; done) >/dev/null 2>&1 &"); r.Code != 0 {
			t.Fatalf("start the loop: %s", r)
		}
		waitFrozen(t, e, name, "cpuSeconds")
		before := cgroupCPU(t, info.Cgroup)
		time.Sleep(300 * time.Millisecond) // a window to measure in, not a synchronisation
		if after := cgroupCPU(t, info.Cgroup); after-before > 5000 {
			t.Errorf("frozen loop used %d µs in 300 ms, want (almost) none", after-before)
		}
		r = e.run(t, nil, nil, "sandbox", "list", "--state-dir", e.stateDir)
		if !strings.Contains(r.Stdout, name+": FROZEN: spec.usage.caps.cpuSeconds") {
			t.Errorf("sandbox list does not say why %s is frozen: %s", name, r.Stdout)
		}
		if err := os.WriteFile(pol, []byte(usagePolicy("    interval: 200ms\n    caps: {cpuSeconds: 1000}\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		_ = syscall.Kill(info.SidecarPid, syscall.SIGHUP) // reload (the file watch would too)
		deadline := time.Now().Add(30 * time.Second)
		for i, _ := e.info(t, name); i.Frozen != ""; i, _ = e.info(t, name) {
			if time.Now().After(deadline) {
				t.Fatalf("still frozen 30 s after the reload: %s", i.Frozen)
			}
		}
		for start := cgroupCPU(t, info.Cgroup); cgroupCPU(t, info.Cgroup) < start+50_000; {
			// polls the cgroup until the thawed loop has used 50 ms more
		}
		n := e.auditCount(t, name, func(ev testnet.AuditEvent) bool { return ev.Kind == "usage" })
		if n != 2 {
			t.Errorf("usage audit events: %d, want a freeze and a thaw", n)
		}
	})
	t.Run("delete while frozen", func(t *testing.T) {
		pol := e.w.WriteFile(t, "cpu-cap-del.yaml", []byte(usagePolicy("    interval: 200ms\n    caps: {cpuSeconds: 0.2}\n")))
		name := e.name("frozendel")
		info := e.create(t, name, "--policy", pol)
		if r := e.sh(t, name, "(while :; do :; done) >/dev/null 2>&1 &"); r.Code != 0 {
			t.Fatalf("start the loop: %s", r)
		}
		waitFrozen(t, e, name, "cpuSeconds")
		if r := e.run(t, nil, nil, "sandbox", "delete", "--state-dir", e.stateDir, name); r.Code != 0 {
			t.Fatalf("delete a frozen sandbox: %s", r)
		}
		if left := e.leftovers(t, name, info); len(left) > 0 {
			t.Errorf("left after deleting a frozen sandbox: %v", left)
		}
		if b, ok := e.bill(t, name); !ok || b.State != "deleted" || !strings.Contains(b.Frozen, "cpuSeconds") {
			t.Errorf("archived bill %+v (found %v), want it deleted, frozen by cpuSeconds", b, ok)
		}
	})
	t.Run("egressBytes", func(t *testing.T) {
		pol := e.w.WriteFile(t, "bytes-cap.yaml", []byte(usagePolicy("    interval: 200ms\n    caps: {egressBytes: 4000000}\n")))
		name := e.name("bytecap")
		e.create(t, name, "--policy", pol)
		const total = 200 << 20
		if r := e.sh(t, name, fmt.Sprintf("(curl -s -o /dev/null http://bulk.test:8080/slow?n=%d; echo done >%s) >/dev/null 2>&1 &",
			total, e.inside("dl-"+name))); r.Code != 0 {
			t.Fatalf("start the download: %s", r)
		}
		waitFrozen(t, e, name, "egressBytes")
		// The server's writes stop once the buffers between it and the frozen curl are full.
		var last int64 = -1
		for cur := bulk.written.Load(); cur != last; cur = bulk.written.Load() {
			last = cur
			time.Sleep(500 * time.Millisecond) // a window to see the writes stop in
		}
		if last >= total/2 {
			t.Errorf("the server wrote %d of %d bytes; want the download stopped early", last, total)
		}
		if _, err := os.Stat(filepath.Join(e.out, "dl-"+name)); err == nil {
			t.Errorf("the download finished under an egressBytes cap")
		}
		// The operator thaws it: the download goes on.
		if r := e.run(t, nil, nil, "sandbox", "thaw", "--state-dir", e.stateDir, name); r.Code != 0 || !strings.Contains(r.Stdout, "thawed") {
			t.Fatalf("sandbox thaw: %s", r)
		}
		for deadline := time.Now().Add(30 * time.Second); bulk.written.Load() < last+4<<20; {
			if time.Now().After(deadline) {
				t.Fatalf("the download did not go on after the thaw: %d bytes written, %d before", bulk.written.Load(), last)
			}
			time.Sleep(50 * time.Millisecond) // polling the server's count
		}
		if n := e.auditCount(t, name, func(ev testnet.AuditEvent) bool { return ev.Kind == "usage" && ev.Reason == "usage_thawed" }); n != 1 {
			t.Errorf("usage_thawed events: %d, want 1", n)
		}
	})
}

// waitFrozen polls `sandbox list` until the sandbox is frozen by the named cap.
func waitFrozen(t *testing.T, e *sbEnv, name, cap string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		i, _ := e.info(t, name)
		if strings.Contains(i.Frozen, "spec.usage.caps."+cap) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not frozen by %s within 30 s: %+v", name, cap, i)
		}
		time.Sleep(50 * time.Millisecond) // polling another process's state (one airlock process a round), bounded
	}
}

// TestSandboxUsageIdentity: a busy loop run with exec --as busy is charged to identity busy,
// read from its own cgroup (equal to its cpu.stat once nothing runs), and counted in the
// sandbox's row too; an identity that never ran gets no row; `sandbox list` shows the
// identity's CPU; --identity keeps only its rows.
func TestSandboxUsageIdentity(t *testing.T) {
	e := newSandboxEnv(t)
	pol := e.w.WriteFile(t, "usage-identity-policy.yaml", []byte(usagePolicy("    interval: 200ms\n    prices: {cpuSecond: 0.01}\n")+
		"  identities:\n    busy: {}\n    idle: {}\n"))
	name := e.name("usageid")
	info := e.create(t, name, "--policy", pol)
	r := e.exec(t, []string{"--as", "busy"}, name, nil, nil, e.python, "-c", "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass")
	if r.Code != 0 {
		t.Fatalf("busy loop as busy: %s", r)
	}
	cpu := cgroupCPU(t, filepath.Join(info.Cgroup, "airlock-id-busy"))
	if cpu < 500_000 {
		t.Fatalf("identity busy's cgroup used %d µs, want the loop's 0.5 s at least", cpu)
	}
	var b usageBill
	deadline := time.Now().Add(30 * time.Second)
	for ok := false; !ok || b.CPUUserUsec+b.CPUSystemUsec < cpu; b, ok = e.identityBill(t, name, "busy") {
		if time.Now().After(deadline) {
			t.Fatalf("no bill for %s/busy with its cgroup's %d µs within 30 s; last %+v", name, cpu, b)
		}
		time.Sleep(50 * time.Millisecond) // polling the ledger the sidecar writes
	}
	if got := b.CPUUserUsec + b.CPUSystemUsec; got != cpu || b.ComputeUSD <= 0 || b.TxBytes != 0 || b.ModelUSD != 0 {
		t.Errorf("%s/busy: %+v; want CPU %d µs (its cgroup's), a compute spend, no network or model figures", name, b, cpu)
	}
	if sb, _ := e.bill(t, name); sb.CPUUserUsec+sb.CPUSystemUsec < cpu {
		t.Errorf("sandbox row %+v: want its CPU to count identity busy's %d µs", sb, cpu)
	}
	if idle, ok := e.identityBill(t, name, "idle"); ok && idle.CPUUserUsec+idle.CPUSystemUsec > 0 {
		t.Errorf("identity idle never ran, has %+v", idle)
	}
	r = e.run(t, nil, nil, "usage", "--state-dir", e.stateDir, "--identity", "busy")
	if r.Code != 0 || !strings.Contains(r.Stdout, name+"/busy") || strings.Contains(r.Stdout, name+"/idle") {
		t.Errorf("airlock usage --identity busy: %s", r)
	}
	r = e.run(t, nil, nil, "sandbox", "list", "--state-dir", e.stateDir)
	m := regexp.MustCompile(`busy \(uid \d+, CPU (\d+\.\d+)s`).FindStringSubmatch(r.Stdout)
	if r.Code != 0 || m == nil {
		t.Fatalf("sandbox list: no CPU for identity busy: %s", r)
	}
	if v, _ := strconv.ParseFloat(m[1], 64); v < 0.5 {
		t.Errorf("sandbox list: busy's CPU %v s, want at least 0.5", v)
	}
}
