package main

// This file is the DNS section of make bench: the airlock DNS filter against dnsmasq, both
// forwarding to the same upstream, measured with dnsperf (Debian packages dnsperf and
// dnsmasq) in one run, printed as ratios.
//
// Everything runs inside a network namespace the bench creates (ip netns add), on 127.0.0.1
// high ports there, so nothing binds a port of the machine's own namespace and no query can
// leave: the namespace has only its loopback interface. That needs root; without it the
// section is skipped with a note.
//
//   - upstream: dnsmasq answering dnsNames names under bench.test from --host-record (local
//     data, never forwarded anywhere);
//   - dnsmasq leg: dnsmasq as a pure forwarder to the upstream, its cache off
//     (--cache-size=0), so every query is forwarded as airlock forwards every query, with its
//     query log on (--log-queries to a file): as in the HTTP legs, every competitor runs with
//     its audit or access log on. The target ratio is against this leg;
//   - dnsmasq-nolog leg (reference): the same without the query log, dnsmasq's fastest
//     forwarding configuration, so the report also shows what a forwarder that records
//     nothing reaches;
//   - airlock leg: airlock run with --dns-addr, the policy naming the bench names exactly, the
//     audit log on (one line per query), no kernel enforcement (no --cgroup, so no allow map
//     is written);
//   - airlock+ebpf leg, when the kernel can enforce: the same with --cgroup on an empty cgroup
//     the bench creates, so every answer's addresses go into the real eBPF allow map first.
//
// dnsperf sends the names round robin for -duration per round with 100 queries outstanding
// (its default), with -v so every answer's latency is written out and the p99 computed from
// them. The legs take turns for -rounds rounds; qps and p99 are medians, and the ratio is the
// median of the per-round ratios (the two legs ran back to back).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlock-dev/airlock/ebpf"
)

// dnsNames is how many distinct names the dnsperf data file asks for.
const dnsNames = 100

// Ports inside the bench's namespace.
const (
	dnsUpstreamPort     = 5300
	dnsDnsmasqPort      = 5301
	dnsAirlockPort      = 5302
	dnsDnsmasqNoLogPort = 5303
	dnsAirlockEBPFPort  = 5304
	dnsProxyEBPFPort    = 5312
	dnsAdminEBPFPort    = 5313
	dnsProxyPort        = 5310
	dnsAdminPort        = 5311
)

// dnsTargetRatio is the target: the DNS filter at least as fast as dnsmasq.
const dnsTargetRatio = 1.0

// dnsMapLatencyNote says where the DNS-answer-to-map-visible latency is: the kernel section
// (kernel.go) times the enforcer's Allow alone, which returns once the kernel sees the entry;
// here the airlock+ebpf leg pays it inside every answer.
const dnsMapLatencyNote = "DNS-answer-to-map-visible latency: \"DNS answer to kernel-visible\" in the kernel enforcement section (Allow alone); airlock+ebpf above pays it in every answer"

// dnsRound is one dnsperf run against one leg.
type dnsRound struct {
	n        int
	qps      float64
	p50, p99 time.Duration
	lost     int64
	sent     int64
	problem  string
}

// dnsLeg is one DNS server measured.
type dnsLeg struct {
	name      string
	port      int
	reference bool // a yardstick, not a competitor: no log, no target
	rounds    []dnsRound
	problem   string
	start     func(ctx context.Context, dir string) (*proc, error)
}

// dnsReport is the DNS section's result.
type dnsReport struct {
	skipped string // why the section did not run; "" when it ran
	legs    []*dnsLeg
	problem string // a failure that invalidates the section
	audit   int    // airlock's DNS audit lines
	// dnsmasqLog counts the query lines of the dnsmasq leg's log.
	dnsmasqLog int
	// auditEBPF counts the airlock+ebpf leg's DNS audit lines; noEBPF says why that leg did
	// not run ("" when it did).
	auditEBPF int
	noEBPF    string
}

// ns is the bench's network namespace.
type ns struct{ name string }

// newNetns creates a namespace with its loopback up.
func newNetns(ctx context.Context) (*ns, error) {
	n := &ns{name: fmt.Sprintf("airlock-bench-dns-%d", os.Getpid())}
	if out, err := exec.CommandContext(ctx, "ip", "netns", "add", n.name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %v: %s", n.name, err, strings.TrimSpace(string(out)))
	}
	if out, err := exec.CommandContext(ctx, "ip", "-n", n.name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		n.remove()
		return nil, fmt.Errorf("ip -n %s link set lo up: %v: %s", n.name, err, strings.TrimSpace(string(out)))
	}
	return n, nil
}

func (n *ns) remove() { _ = exec.Command("ip", "netns", "del", n.name).Run() }

// command runs name inside the namespace (ip netns exec execs it: the pid is the command's).
func (n *ns) command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.name, name}, args...)...)
}

// runDNSBench runs the DNS section in dir.
func runDNSBench(ctx context.Context, e *env, root string) *dnsReport {
	rep := &dnsReport{}
	if os.Geteuid() != 0 {
		rep.skipped = "needs root (it runs in a network namespace of its own)"
		return rep
	}
	var missing []string
	for _, tool := range []string{"dnsperf", "dnsmasq", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		rep.problem = fmt.Sprintf("%s not found; install with: apt-get install -y dnsperf dnsmasq-base iproute2", strings.Join(missing, ", "))
		return rep
	}
	dir := filepath.Join(root, "dns")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		rep.problem = err.Error()
		return rep
	}
	n, err := newNetns(ctx)
	if err != nil {
		rep.problem = err.Error()
		return rep
	}
	defer n.remove()

	data := filepath.Join(dir, "queries.txt")
	if err := writeDNSData(data); err != nil {
		rep.problem = err.Error()
		return rep
	}
	up, err := startDnsmasq(ctx, n, dir, "upstream", dnsUpstreamPort, upstreamDnsmasqArgs())
	if err != nil {
		rep.problem = "start upstream dnsmasq: " + err.Error()
		return rep
	}
	defer up.stop()

	airlockAudit := filepath.Join(dir, "airlock-audit.jsonl")
	rep.legs = []*dnsLeg{
		{name: "dnsmasq", port: dnsDnsmasqPort, start: func(ctx context.Context, dir string) (*proc, error) {
			return startDnsmasq(ctx, n, dir, "dnsmasq", dnsDnsmasqPort, forwarderArgs(true))
		}},
		{name: "dnsmasq-nolog", port: dnsDnsmasqNoLogPort, reference: true, start: func(ctx context.Context, dir string) (*proc, error) {
			return startDnsmasq(ctx, n, dir, "dnsmasq-nolog", dnsDnsmasqNoLogPort, forwarderArgs(false))
		}},
		{name: "airlock", port: dnsAirlockPort, start: func(ctx context.Context, dir string) (*proc, error) {
			return startAirlockDNS(ctx, e, n, airlockDNSRun{dir: filepath.Join(dir, "airlock"), audit: airlockAudit,
				port: dnsAirlockPort, proxyPort: dnsProxyPort, adminPort: dnsAdminPort})
		}},
	}
	// With kernel enforcement available, one more airlock leg runs with --cgroup on an empty
	// cgroup of its own: every answer's addresses then go into the real eBPF allow map before
	// the answer leaves, which is what a deployment pays.
	ebpfAudit := filepath.Join(dir, "airlock-ebpf-audit.jsonl")
	if cg, cleanup, why := benchCgroup(); why == "" {
		defer cleanup()
		rep.legs = append(rep.legs, &dnsLeg{name: "airlock+ebpf", port: dnsAirlockEBPFPort, start: func(ctx context.Context, dir string) (*proc, error) {
			return startAirlockDNS(ctx, e, n, airlockDNSRun{dir: filepath.Join(dir, "airlock-ebpf"), audit: ebpfAudit,
				port: dnsAirlockEBPFPort, proxyPort: dnsProxyEBPFPort, adminPort: dnsAdminEBPFPort, cgroup: cg})
		}})
	} else {
		rep.noEBPF = why
	}
	var procs []*proc
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	for _, lg := range rep.legs {
		p, err := lg.start(ctx, dir)
		if err != nil {
			lg.problem = "start: " + err.Error()
			continue
		}
		procs = append(procs, p)
		e.progress("dns: %s ready on 127.0.0.1:%d; warming up", lg.name, lg.port)
		if _, err := dnsperf(ctx, n, dir, lg, data, time.Second, -1); err != nil {
			lg.problem = "warm-up: " + err.Error()
		}
	}
	secs := max(time.Duration(e.cfg.duration.Seconds())*time.Second, time.Second)
	for r := range e.cfg.rounds {
		for i := range rep.legs {
			lg := rep.legs[(i+r)%len(rep.legs)] // the first leg rotates each round
			if lg.problem != "" || ctx.Err() != nil {
				continue
			}
			e.progress("dns: round %d/%d: %s for %s", r+1, e.cfg.rounds, lg.name, secs)
			rd, err := dnsperf(ctx, n, dir, lg, data, secs, r)
			if err != nil {
				lg.problem = err.Error()
				continue
			}
			if rd.problem != "" {
				lg.problem = fmt.Sprintf("round %d: %s", r+1, rd.problem)
			}
			lg.rounds = append(lg.rounds, rd)
		}
	}
	for _, p := range procs {
		p.stop()
	}
	procs = nil
	rep.audit, err = countDNSAudit(airlockAudit)
	if err != nil || rep.audit == 0 {
		rep.problem = fmt.Sprintf("airlock wrote no DNS audit lines (%v): audit was not on", err)
	}
	if rep.noEBPF == "" {
		if rep.auditEBPF, err = countDNSAudit(ebpfAudit); (err != nil || rep.auditEBPF == 0) && rep.problem == "" {
			rep.problem = fmt.Sprintf("airlock+ebpf wrote no DNS audit lines (%v): audit was not on", err)
		}
	}
	rep.dnsmasqLog = countLines(filepath.Join(dir, "dnsmasq-dnsmasq.log"), " query[A] ")
	if rep.dnsmasqLog == 0 && rep.problem == "" {
		rep.problem = "dnsmasq logged no queries: its query log was not on"
	}
	return rep
}

// writeDNSData writes dnsperf's input: one "name type" per line.
func writeDNSData(path string) error {
	var b strings.Builder
	for i := range dnsNames {
		fmt.Fprintf(&b, "h%d.bench.test A\n", i)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// forwarderArgs make dnsmasq a forwarder to the upstream without a cache, logging every
// query with logQueries.
func forwarderArgs(logQueries bool) []string {
	args := []string{"--no-resolv", fmt.Sprintf("--server=127.0.0.1#%d", dnsUpstreamPort),
		"--cache-size=0", "--dns-forward-max=1000"}
	if logQueries {
		args = append(args, "--log-queries")
	}
	return args
}

// upstreamDnsmasqArgs make dnsmasq answer the bench names from local data and nothing else.
func upstreamDnsmasqArgs() []string {
	args := []string{"--no-resolv", "--local=/bench.test/", "--local-ttl=300"}
	for i := range dnsNames {
		args = append(args, fmt.Sprintf("--host-record=h%d.bench.test,198.18.%d.%d", i, i/250, i%250+1))
	}
	return args
}

// startDnsmasq starts dnsmasq in the namespace on 127.0.0.1:port with extra args.
func startDnsmasq(ctx context.Context, n *ns, dir, name string, port int, extra []string) (*proc, error) {
	args := append([]string{"--keep-in-foreground", "--no-hosts", "--conf-file=/dev/null", "--pid-file=",
		"--bind-interfaces", "--listen-address=127.0.0.1", fmt.Sprintf("--port=%d", port), "--user=root",
		"--log-facility=" + filepath.Join(dir, name+"-dnsmasq.log")}, extra...)
	p, err := startProc(name, n.command("dnsmasq", args...), filepath.Join(dir, name+".out"))
	if err != nil {
		return nil, err
	}
	if err := waitReady(ctx, p, 10*time.Second, dnsCheck(n, port)); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// dnsBenchPolicy names every bench name exactly (a wildcard would put them under the
// exfiltration brake, which is not what is measured).
func dnsBenchPolicy() string {
	var hosts []string
	for i := range dnsNames {
		hosts = append(hosts, fmt.Sprintf("%q", fmt.Sprintf("h%d.bench.test", i)))
	}
	return "apiVersion: airlock/v1\nkind: EgressPolicy\nmetadata:\n  name: bench-dns\nspec:\n  egress:\n" +
		"    - name: bench-names\n      hosts: [" + strings.Join(hosts, ", ") + "]\n      ports: [443]\n"
}

// airlockDNSRun says how to start one airlock DNS leg.
type airlockDNSRun struct {
	dir                        string // state, policy and log
	audit                      string // --audit-log
	port, proxyPort, adminPort int
	cgroup                     string // --cgroup; "" for none
}

// sandboxName is the --sandbox of the airlock leg with cgroup cg (pins are kept under it).
func dnsSandboxName(cgroup string) string {
	if cgroup == "" {
		return "bench-dns"
	}
	return fmt.Sprintf("bench-dns-ebpf-%d", os.Getpid())
}

// startAirlockDNS starts airlock run in the namespace with the DNS filter on r.port. With a
// cgroup it enters only the network namespace (nsenter --net), because `ip netns exec`
// remounts /sys and would hide /sys/fs/cgroup and /sys/fs/bpf from it.
func startAirlockDNS(ctx context.Context, e *env, n *ns, r airlockDNSRun) (*proc, error) {
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return nil, err
	}
	bin := e.airlockBin
	if bin == "" {
		var err error
		if bin, err = airlockBinary(ctx, e, r.dir); err != nil {
			return nil, err
		}
		e.airlockBin = bin
	}
	policyPath := filepath.Join(r.dir, "policy.yaml")
	if err := os.WriteFile(policyPath, []byte(dnsBenchPolicy()), 0o644); err != nil {
		return nil, err
	}
	args := []string{"run", "--policy", policyPath,
		"--proxy-addr", fmt.Sprintf("127.0.0.1:%d", r.proxyPort),
		"--admin-addr", fmt.Sprintf("127.0.0.1:%d", r.adminPort),
		"--dns-addr", fmt.Sprintf("127.0.0.1:%d", r.port),
		"--upstream-dns", fmt.Sprintf("127.0.0.1:%d", dnsUpstreamPort),
		"--transparent-addr", "off", "--llm-addr", "off",
		"--state-dir", filepath.Join(r.dir, "state"), "--audit-log", r.audit, "--sandbox", dnsSandboxName(r.cgroup)}
	cmd := n.command(bin, args...)
	if r.cgroup != "" {
		args = append(args, "--cgroup", r.cgroup)
		cmd = exec.Command("nsenter", append([]string{"--net=/run/netns/" + n.name, "--", bin}, args...)...)
	}
	cmd.Env = nil
	for _, kv := range withoutProxyEnv(os.Environ()) {
		if !strings.HasPrefix(kv, "AIRLOCK_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	e.progress("dns: airlock %s", strings.Join(args, " "))
	p, err := startProc("airlock-dns", cmd, filepath.Join(r.dir, "airlock.log"))
	if err != nil {
		return nil, err
	}
	if err := waitReady(ctx, p, 30*time.Second, dnsCheck(n, r.port)); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// benchCgroup creates an empty cgroup for the airlock+ebpf leg; cleanup removes its pins
// and the cgroup. why says why there is none ("" when there is).
func benchCgroup() (dir string, cleanup func(), why string) {
	if err := ebpf.Probe(); err != nil {
		return "", nil, err.Error()
	}
	root, err := ebpf.Cgroup2Root()
	if err != nil {
		return "", nil, err.Error()
	}
	dir = filepath.Join(root, fmt.Sprintf("airlock-bench-dns-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", nil, err.Error()
	}
	return dir, func() {
		_ = ebpf.Remove("", dnsSandboxName(dir))
		_ = os.Remove(dir)
	}, ""
}

// dnsCheck succeeds once 127.0.0.1:port in the namespace answers an A query for h0.bench.test
// with NOERROR. The query is one dnsperf run of one query inside the namespace (the bench
// process itself stays in the machine's namespace).
func dnsCheck(n *ns, port int) func() error {
	return func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "ip", "netns", "exec", n.name, "dnsperf", "-s", "127.0.0.1",
			"-p", strconv.Itoa(port), "-n", "1", "-t", "1")
		cmd.Stdin = strings.NewReader("h0.bench.test A\n")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("dnsperf probe: %v", err)
		}
		if !strings.Contains(string(out), "NOERROR 1 ") {
			return errors.New("no NOERROR answer yet")
		}
		return nil
	}
}

var (
	dnsperfQPS      = regexp.MustCompile(`Queries per second:\s+([0-9.]+)`)
	dnsperfSent     = regexp.MustCompile(`Queries sent:\s+([0-9]+)`)
	dnsperfLost     = regexp.MustCompile(`Queries lost:\s+([0-9]+)`)
	dnsperfNoError  = regexp.MustCompile(`Response codes:\s+NOERROR ([0-9]+) \(100\.00%\)`)
	dnsperfResponse = regexp.MustCompile(`^> [A-Z]+ .* ([0-9]+\.[0-9]+)$`)
)

// dnsperf runs one dnsperf run against lg for d; round < 0 is a warm-up (nothing recorded).
// With -v every answer's latency is written to a file, from which p50 and p99 are computed.
func dnsperf(ctx context.Context, n *ns, dir string, lg *dnsLeg, data string, d time.Duration, round int) (dnsRound, error) {
	rd := dnsRound{n: round}
	out := filepath.Join(dir, fmt.Sprintf("dnsperf-%s-%d.out", lg.name, round))
	f, err := os.Create(out)
	if err != nil {
		return rd, err
	}
	defer f.Close()
	rctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(rctx, "ip", "netns", "exec", n.name, "dnsperf", "-s", "127.0.0.1", "-p", strconv.Itoa(lg.port),
		"-d", data, "-l", strconv.Itoa(int(d.Seconds())), "-t", "2", "-v")
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Run(); err != nil {
		return rd, fmt.Errorf("dnsperf: %v; see %s", err, out)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return rd, err
	}
	var lat []time.Duration
	var summary strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if m := dnsperfResponse.FindStringSubmatch(line); m != nil {
			if s, err := strconv.ParseFloat(m[1], 64); err == nil {
				lat = append(lat, time.Duration(s*float64(time.Second)))
			}
			continue
		}
		summary.WriteString(line + "\n")
	}
	s := summary.String()
	m := dnsperfQPS.FindStringSubmatch(s)
	if m == nil {
		return rd, fmt.Errorf("dnsperf printed no qps; see %s", out)
	}
	rd.qps, _ = strconv.ParseFloat(m[1], 64)
	if m := dnsperfSent.FindStringSubmatch(s); m != nil {
		rd.sent, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if m := dnsperfLost.FindStringSubmatch(s); m != nil {
		rd.lost, _ = strconv.ParseInt(m[1], 10, 64)
	}
	switch {
	case rd.sent > 0 && float64(rd.lost) > 0.001*float64(rd.sent):
		rd.problem = fmt.Sprintf("%d of %d queries lost", rd.lost, rd.sent)
	case !dnsperfNoError.MatchString(s):
		rd.problem = "not every answer was NOERROR; see " + out
	case len(lat) == 0:
		rd.problem = "no per-query latencies in dnsperf -v output"
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		rd.p50 = lat[len(lat)/2]
		rd.p99 = lat[min(len(lat)-1, len(lat)*99/100)]
	}
	return rd, nil
}

// countDNSAudit counts the dns audit lines of airlock's audit log.
func countDNSAudit(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"kind":"dns"`) {
			n++
		}
	}
	return n, sc.Err()
}

// countLines counts the lines of path holding substr (0 when it cannot be read).
func countLines(path, substr string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.Contains(sc.Text(), substr) {
			n++
		}
	}
	return n
}

// qps returns a leg's per-round qps.
func (lg *dnsLeg) qps() []float64 {
	var out []float64
	for _, r := range lg.rounds {
		out = append(out, r.qps)
	}
	return out
}

// p99s returns a leg's per-round p99 in milliseconds.
func (lg *dnsLeg) p99s() []float64 {
	var out []float64
	for _, r := range lg.rounds {
		out = append(out, float64(r.p99)/float64(time.Millisecond))
	}
	return out
}

// printDNSReport prints the DNS section.
func printDNSReport(w io.Writer, e *env, rep *dnsReport) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "DNS filter — airlock vs dnsmasq, both forwarding every query to the same upstream (dnsperf, UDP)")
	if rep.skipped != "" {
		fmt.Fprintf(w, "  skipped: %s\n", rep.skipped)
		return
	}
	fmt.Fprintf(w, "  %-11s dnsmasq with local data for %d names, in the bench's own network namespace\n", "upstream:", dnsNames)
	fmt.Fprintf(w, "  %-11s dnsperf, %d names round robin, 100 queries outstanding; %d rounds of %s per target, taking turns\n",
		"load:", dnsNames, e.cfg.rounds, max(time.Duration(e.cfg.duration.Seconds())*time.Second, time.Second))
	fmt.Fprintf(w, "  %-11s dnsmasq --cache-size=0 --log-queries (%d query lines); dnsmasq-nolog (reference) the same without the log;\n",
		"config:", rep.dnsmasqLog)
	fmt.Fprintf(w, "  %-11s airlock with policy and audit on (%d dns audit lines), no --cgroup\n", "", rep.audit)
	if rep.noEBPF == "" {
		fmt.Fprintf(w, "  %-11s airlock+ebpf: the same with --cgroup on an empty cgroup: the real eBPF allow map (%d dns audit lines)\n", "", rep.auditEBPF)
	} else {
		fmt.Fprintf(w, "  %-11s airlock+ebpf: not run (%s)\n", "", rep.noEBPF)
	}
	if rep.problem != "" {
		fmt.Fprintf(w, "  PROBLEM: %s\n", rep.problem)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tqps\tmin–max\tp50 ms\tp99 ms\tlost\t")
	byName := map[string]*dnsLeg{}
	for _, lg := range rep.legs {
		byName[lg.name] = lg
		if len(lg.rounds) == 0 {
			fmt.Fprintf(tw, "%s\tFAILED\t-\t-\t-\t-\t\n", lg.name)
			continue
		}
		qps := fmt.Sprintf("%.0f", median(lg.qps()))
		if lg.problem != "" {
			qps = "INVALID"
		}
		var lost int64
		var p50s []float64
		for _, r := range lg.rounds {
			lost += r.lost
			p50s = append(p50s, float64(r.p50)/float64(time.Millisecond))
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f–%.0f\t%.3f\t%.3f\t%d\t\n", lg.name, qps, slices.Min(lg.qps()), slices.Max(lg.qps()),
			median(p50s), median(lg.p99s()), lost)
	}
	tw.Flush()
	for _, lg := range rep.legs {
		if lg.problem != "" {
			fmt.Fprintf(w, "  %s: %s\n", lg.name, lg.problem)
		}
	}
	fmt.Fprintln(w)
	type pair struct{ a, other string }
	pairs := []pair{{"airlock", "dnsmasq"}, {"airlock", "dnsmasq-nolog"}}
	if rep.noEBPF == "" {
		pairs = append(pairs, pair{"airlock+ebpf", "dnsmasq"}, pair{"airlock+ebpf", "airlock"})
	}
	for _, pr := range pairs {
		other := pr.other
		a, d := byName[pr.a], byName[other]
		if a == nil || d == nil || a.problem != "" || d.problem != "" || rep.problem != "" {
			fmt.Fprintf(w, "  %s/%s: no ratio (a leg failed or was invalid)\n", pr.a, other)
			continue
		}
		var qr, prs []float64
		for i := range min(len(a.rounds), len(d.rounds)) {
			if d.rounds[i].qps > 0 && d.rounds[i].p99 > 0 {
				qr = append(qr, a.rounds[i].qps/d.rounds[i].qps)
				prs = append(prs, float64(a.rounds[i].p99)/float64(d.rounds[i].p99))
			}
		}
		note := "reference, no target"
		if pr.other == "airlock" {
			note = "the cost of the kernel allow map"
		} else if !d.reference {
			note = "meets the target"
			if median(qr) < dnsTargetRatio {
				note = "misses the target"
			}
			note += fmt.Sprintf(" ≥ %.1f×", dnsTargetRatio)
		}
		fmt.Fprintf(w, "  %s/%s qps: %.2f×, p99: %.2f× (per-round medians; %s; lower p99 is better)\n", pr.a, other, median(qr), median(prs), note)
	}
	fmt.Fprintf(w, "  %s\n", dnsMapLatencyNote)
}

// failed reports whether the DNS section failed (a skip is not a failure).
func (rep *dnsReport) failed() bool {
	if rep.skipped != "" {
		return false
	}
	if rep.problem != "" {
		return true
	}
	for _, lg := range rep.legs {
		if lg.problem != "" {
			return true
		}
	}
	return false
}
