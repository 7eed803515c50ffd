// Command bench is `make bench`: it measures airlock's proxied keep-alive request rate
// against direct connections and against the proxies a user would run instead (Squid and
// tinyproxy from Debian), in one run, and prints the ratios.
//
// Every leg sends the same small GET, over the same number of keep-alive connections, to the
// same upstream: a Go net/http server the bench starts in a child process (this binary
// re-executed with the "upstream-child" argument) so that its CPU is not mixed with the
// bench's. The load comes from wrk (Debian package), or from a built-in Go generator when
// asked with -loadgen=go. Each proxy runs with its policy/ACL and its audit or access log on,
// alone on the machine during its leg. A leg with any error, any status ≥ 400, a response
// that did not come from the upstream, or no audit trail is reported as invalid, never as a
// speed.
//
// One more leg, go-nethttp, is a reference rather than a competitor: the thinnest forwarding
// proxy Go's net/http allows (this binary re-executed with "nethttp-proxy-child"), with no
// policy and no audit. It shows the ceiling of any net/http-based proxy, airlock included,
// on the machine; every check but the audit one applies to it.
//
// All traffic stays on 127.0.0.1. Every loop is bounded in time and count, and every child
// process is stopped on exit, including on SIGINT and SIGTERM.
//
// This is a main package; nothing imports it. It reads the tree only to build ./cmd/airlock.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// config holds the flags. The zero value is not meaningful; parseFlags fills every field.
type config struct {
	duration     time.Duration // measured time per target per round
	rounds       int           // measured runs per target, interleaved across targets
	warmup       time.Duration // unmeasured load per target before its first round; 0 = none
	connections  int           // concurrent keep-alive connections
	threads      int           // wrk threads
	timeout      time.Duration // a response slower than this is an error
	only         []string      // targets to run, in the canonical order
	airlockBin   string        // prebuilt airlock binary; "" = go build ./cmd/airlock
	loadgen      string        // "wrk" or "go"
	squidWorkers int           // Squid "workers"; 1 runs it with -N, more in SMP mode
	keep         bool          // keep the temporary directory with every log
	dns          bool          // also run the DNS section (dns.go)
	sandboxOnly  bool          // run only the sandbox section (sandbox.go)
	usageOnly    bool          // run only the usage meter section (usage.go)
	identityOnly bool          // run only the identity section (identity.go)
	sandboxRuns  int           // cycles of each sandbox measurement
	sandboxRT    string        // --runtime of the sandboxes
	tls          bool          // run the HTTPS section (tls.go)
	tlsOnly      bool          // run only the HTTPS section
	httpOnly     bool          // run only the HTTP legs (no section after them)
	tlsConns     int           // concurrent tunnels or connections in the HTTPS section
	tlsTests     []string      // keys of the HTTPS tests to run (tlsTest.key)
	bulkBytes    int64         // bytes of the one-tunnel bulk transfer
	profileDir   string        // write CPU profiles of airlock during the HTTPS tests here
	baselineBin  string        // an older airlock binary measured beside airlock (baseline.go); "" = none
	runs         int           // whole runs of the HTTP legs and the HTTPS section (acceptance.go)
	sections     bool          // run the sections after the HTTP legs and the HTTPS section
}

const (
	targetDirect  = "direct"
	targetAirlock = "airlock"
)

// allTargets is the canonical run order.
func allTargets() []string {
	names := []string{targetDirect}
	for _, p := range proxies() {
		names = append(names, p.name)
	}
	return names
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	var only, tlsOnlyTests string
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&c.duration, "duration", 3*time.Second, "measured `time` per target per round (whole seconds with wrk)")
	fs.IntVar(&c.rounds, "rounds", 3, "measured rounds per target; targets take turns, and the report gives medians")
	fs.DurationVar(&c.warmup, "warmup", time.Second, "unmeasured load per target before its first round (0 = none)")
	fs.IntVar(&c.connections, "connections", 32, "concurrent keep-alive connections")
	fs.IntVar(&c.threads, "threads", 2, "load generator threads (wrk -t)")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Second, "a response slower than this counts as an error")
	fs.StringVar(&only, "only", strings.Join(allTargets(), ","), "comma-separated `targets` to run")
	fs.BoolVar(&c.sandboxOnly, "sandbox-only", false, "run only the local sandbox create/exec/delete section")
	fs.BoolVar(&c.usageOnly, "usage-only", false, "run only the usage meter section: the cost of measuring a sandbox")
	fs.BoolVar(&c.identityOnly, "identity-only", false, "run only the identity section: the sidecar's CPU per request without identities and as an identity")
	fs.StringVar(&c.sandboxRT, "sandbox-runtime", "runc", "OCI runtime of the measured sandboxes: runc | crun | PATH")
	fs.IntVar(&c.sandboxRuns, "sandbox-cycles", 10, "cycles of each local sandbox measurement (create/exec/delete, exec --ephemeral)")
	fs.StringVar(&c.airlockBin, "airlock-bin", "", "use this airlock `binary` instead of building ./cmd/airlock")
	fs.StringVar(&c.loadgen, "loadgen", "wrk", "load generator: wrk, or go (built-in fallback; figures not comparable with wrk's)")
	fs.IntVar(&c.squidWorkers, "squid-workers", 1, "Squid worker processes (1 = Squid's default; more = SMP mode)")
	fs.BoolVar(&c.keep, "keep", false, "keep the temporary directory with configs and logs")
	fs.BoolVar(&c.dns, "dns", true, "also measure the DNS filter against dnsmasq with dnsperf (needs root: runs in its own network namespace)")
	fs.BoolVar(&c.tls, "tls", true, "also run the HTTPS section: new tunnels/s, one tunnel's throughput, intercepted keep-alive and h2")
	fs.BoolVar(&c.tlsOnly, "tls-only", false, "run only the HTTPS section")
	fs.BoolVar(&c.httpOnly, "http-only", false, "run only the plain HTTP legs (no HTTPS, DNS, kernel, model API or sandbox section after them)")
	fs.IntVar(&c.tlsConns, "tls-conns", 16, "concurrent tunnels (new-tunnel test) or connections (intercepted tests) in the HTTPS section")
	fs.StringVar(&tlsOnlyTests, "tls-tests", strings.Join(tlsTestKeys(), ","), "comma-separated HTTPS `tests` to run")
	fs.Int64Var(&c.bulkBytes, "bulk-bytes", 1<<30, "bytes carried by the one-tunnel bulk test")
	fs.StringVar(&c.profileDir, "profile-dir", "", "write a CPU profile of airlock during its first round of each HTTPS test into this `directory`")
	fs.StringVar(&c.baselineBin, "baseline-bin", "", "also measure this older airlock `binary` as leg "+targetBaseline+
		" in the HTTPS section (new tunnels, bulk, gRPC, h2, idle RSS), taking turns with airlock, and judge airlock/"+targetBaseline+" against the 5 % rule")
	fs.BoolVar(&c.sections, "sections", true, "run the sections after the HTTP legs and the HTTPS section (audit cost, DNS, kernel, usage, identity, model API, sandboxes); false: only those two, as the acceptance summary reads them")
	fs.IntVar(&c.runs, "runs", 1, "whole runs of the HTTP legs and the HTTPS section; the acceptance summary gives each run's ratios and their median")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: go run ./bench [flags]\n\nMeasures airlock's proxied req/s against direct, Squid and tinyproxy, next to a bare\nnet/http forwarder (go-nethttp) as the reference.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	switch {
	case c.duration < time.Second || c.duration > 10*time.Minute:
		return c, fmt.Errorf("-duration %s: use 1s to 10m", c.duration)
	case c.rounds < 1 || c.rounds > 20:
		return c, fmt.Errorf("-rounds %d: use 1 to 20", c.rounds)
	case c.warmup < 0 || c.warmup > time.Minute:
		return c, fmt.Errorf("-warmup %s: use 0 to 1m", c.warmup)
	case c.connections < 1 || c.connections > 10000:
		return c, fmt.Errorf("-connections %d: use 1 to 10000", c.connections)
	case c.threads < 1 || c.threads > c.connections:
		return c, fmt.Errorf("-threads %d: use 1 to -connections (%d)", c.threads, c.connections)
	case c.timeout < time.Second:
		return c, fmt.Errorf("-timeout %s: use at least 1s", c.timeout)
	case c.squidWorkers < 1 || c.squidWorkers > 64:
		return c, fmt.Errorf("-squid-workers %d: use 1 to 64", c.squidWorkers)
	case c.tlsConns < 1 || c.tlsConns > 1000:
		return c, fmt.Errorf("-tls-conns %d: use 1 to 1000", c.tlsConns)
	case c.bulkBytes < 1<<20:
		return c, fmt.Errorf("-bulk-bytes %d: use at least 1 MiB", c.bulkBytes)
	case c.loadgen != "wrk" && c.loadgen != "go":
		return c, fmt.Errorf("-loadgen %q: use %q or %q", c.loadgen, "wrk", "go")
	case c.runs < 1 || c.runs > 10:
		return c, fmt.Errorf("-runs %d: use 1 to 10", c.runs)
	}
	if err := checkBaselineBin(c.baselineBin); err != nil {
		return c, err
	}
	var err error
	if c.tlsTests, err = pickTLSTests(tlsOnlyTests); err != nil {
		return c, err
	}
	want := map[string]bool{}
	for _, n := range strings.Split(only, ",") {
		if n = strings.TrimSpace(n); n == "" {
			continue
		}
		if !slices.Contains(allTargets(), n) {
			return c, fmt.Errorf("-only: unknown target %q: use some of %s", n, strings.Join(allTargets(), ","))
		}
		want[n] = true
	}
	for _, n := range allTargets() {
		if want[n] {
			c.only = append(c.only, n)
		}
	}
	if len(c.only) == 0 {
		return c, errors.New("-only: name at least one target")
	}
	return c, nil
}

// tlsTestKeys are the keys of the HTTPS tests, in their order.
func tlsTestKeys() []string {
	var keys []string
	for _, t := range tlsTests(config{}) {
		keys = append(keys, t.key)
	}
	return keys
}

// pickTLSTests checks a -tls-tests list.
func pickTLSTests(list string) ([]string, error) {
	var keys []string
	for _, k := range strings.Split(list, ",") {
		if k = strings.TrimSpace(k); k == "" {
			continue
		}
		if !slices.Contains(tlsTestKeys(), k) {
			return nil, fmt.Errorf("-tls-tests: unknown test %q: use some of %s", k, strings.Join(tlsTestKeys(), ","))
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("-tls-tests: name at least one test")
	}
	return keys, nil
}

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case upstreamRole:
			os.Exit(runUpstreamChild())
		case nethttpRole:
			os.Exit(runNetHTTPProxyChild())
		case kernelConnectRole:
			os.Exit(runKernelConnectChild())
		case llmProviderRole:
			os.Exit(runLLMProviderChild())
		case tlsUpstreamRole:
			os.Exit(runTLSUpstreamChild())
		case llmAnthropicRole:
			os.Exit(runLLMAnthropicChild())
		case usageRecvRole:
			os.Exit(runUsageRecvChild())
		case identityClientRole:
			os.Exit(runIdentityClientChild())
		}
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole bench; it returns the exit code: 0 when every leg measured validly,
// 1 when one failed or was invalid, 2 on bad flags, 130 when interrupted.
func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	gen, err := pickGenerator(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	root, err := os.MkdirTemp("", "airlock-bench-")
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	// The proxies drop to user "proxy" and must reach their own subdirectories.
	os.Chmod(root, 0o755)
	if cfg.keep {
		defer fmt.Fprintf(stderr, "bench: configs and logs kept in %s\n", root)
	} else {
		defer os.RemoveAll(root)
	}

	progress := func(format string, a ...any) {
		fmt.Fprintf(stderr, "bench: "+format+"\n", a...)
	}
	up, err := startUpstream(ctx, root)
	if err != nil {
		fmt.Fprintf(stderr, "bench: start upstream: %v\n", err)
		return 1
	}
	defer up.p.stop()
	e := &env{cfg: cfg, upstream: up, progress: progress}
	if cfg.usageOnly {
		urep := runUsageBench(ctx, e, root)
		printUsageReport(stdout, urep)
		if urep.err != nil {
			return 1
		}
		return 0
	}
	if cfg.identityOnly {
		irep := runIdentityBench(ctx, e, root)
		printIdentityReport(stdout, irep)
		if irep.err != nil {
			return 1
		}
		return 0
	}
	if cfg.sandboxOnly {
		srep := runSandboxBench(ctx, e, root)
		printSandboxReport(stdout, srep)
		if srep.err != nil {
			return 1
		}
		return 0
	}

	acc := &acceptance{runs: cfg.runs}
	code := 0
	for i := range cfg.runs {
		c := runOnce(ctx, e, gen, root, i, stdout, acc)
		if c == 130 || ctx.Err() != nil {
			fmt.Fprintln(stderr, "bench: interrupted; every child process stopped")
			return 130
		}
		code = max(code, c)
	}
	acc.print(stdout)
	if cfg.sections && !cfg.tlsOnly && !cfg.httpOnly && runSections(ctx, e, root, stdout) != 0 {
		code = 1
	}
	return code
}

// runOnce is run i of -runs: the HTTP legs and the HTTPS section, as the flags select them,
// each in its own directory. It records the run's ratios in acc and returns 0, 1 when a leg
// failed or was invalid, or 130 when interrupted.
func runOnce(ctx context.Context, e *env, gen generator, root string, i int, stdout io.Writer, acc *acceptance) int {
	cfg := e.cfg
	if cfg.runs > 1 {
		fmt.Fprintf(stdout, "\n======== run %d of %d ========\n", i+1, cfg.runs)
		e.progress("run %d of %d", i+1, cfg.runs)
		root = filepath.Join(root, fmt.Sprintf("run%d", i+1))
	}
	code := 0
	if !cfg.tlsOnly {
		legs := runLegs(ctx, e, gen, root)
		if ctx.Err() != nil {
			return 130
		}
		printReport(stdout, cfg, gen, e, legs)
		printInjectReport(stdout, legs)
		printChainReport(stdout, legs)
		acc.addHTTP(i, legs)
		for _, l := range legs {
			if l.problem != "" {
				code = 1
			}
		}
	}
	if cfg.tlsOnly || (cfg.tls && !cfg.httpOnly) {
		c := runTLSSection(ctx, e, root, stdout, i, acc)
		if c == 130 {
			return 130
		}
		code = max(code, c)
	}
	return code
}

// runSections runs and prints the sections after the HTTP legs and the HTTPS section, once
// whatever -runs says: audit cost, DNS, kernel, usage, identity, model API and sandboxes. It
// returns 1 when one failed or was invalid, else 0.
func runSections(ctx context.Context, e *env, root string, stdout io.Writer) int {
	cfg := e.cfg
	code := 0
	arep := runAuditCostBench(ctx, e, root)
	printAuditCostReport(stdout, arep)
	if arep.err != nil {
		code = 1
	}
	if cfg.dns {
		rep := runDNSBench(ctx, e, root)
		printDNSReport(stdout, e, rep)
		if rep.failed() {
			return 1
		}
	}
	krep := runKernelBench(ctx, e.progress)
	printKernelReport(stdout, krep)
	if krep.err != nil {
		return 1
	}
	urep := runUsageBench(ctx, e, root)
	printUsageReport(stdout, urep)
	if urep.err != nil {
		return 1
	}
	irep := runIdentityBench(ctx, e, root)
	printIdentityReport(stdout, irep)
	if irep.err != nil {
		return 1
	}
	lrep := runLLMBench(ctx, e, root)
	printLLMReport(stdout, lrep)
	if lrep.err != nil {
		return 1
	}
	trep := runTranslateBench(ctx, e, root)
	printTranslateReport(stdout, trep)
	if trep.err != nil {
		return 1
	}
	srep := runSandboxBench(ctx, e, root)
	printSandboxReport(stdout, srep)
	if srep.err != nil {
		return 1
	}
	return code
}

// pickGenerator returns wrk, or says exactly how to install it.
func pickGenerator(cfg config) (generator, error) {
	if cfg.loadgen == "go" {
		return goGenerator{}, nil
	}
	path, err := exec.LookPath("wrk")
	if err != nil {
		return nil, errors.New("wrk not found; install it with:\n\n    apt-get install -y wrk\n\n" +
			"or, if it cannot be installed, run with -loadgen=go (a slower built-in generator whose figures are not comparable with wrk's)")
	}
	return wrkGenerator{path: path}, nil
}
