package main

import (
	"bufio"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// tlsLegNames are the HTTPS section's legs, in run order (filtered by -only; the baseline
// only with -baseline-bin, and only beside airlock).
var tlsLegNames = []string{targetDirect, targetAirlock, targetBaseline, "squid"}

// baseLegs are the legs of the tests Squid 5.7 cannot run (HTTP/2). The baseline runs in
// every test, the ones against Squid too, so that both airlock processes have done the same
// work whenever they are compared.
var baseLegs = []string{targetDirect, targetAirlock, targetBaseline}

// tlsEnv is what the HTTPS section's legs share.
type tlsEnv struct {
	e         *env
	dir       string
	pki       *tlsPKI
	upstream  string // 127.0.0.1:port of the TLS upstream child
	up        *proc
	dns       *benchDNS
	roots     *x509.CertPool // the upstream CA, Squid's and airlock's
	squidConf []byte         // the configuration Squid ran with, printed in the report
	rss       *rssSamples    // idle RSS of fresh starts of airlock and the baseline; nil without one
	// airBin and baseBin are the copies of airlock and of -baseline-bin the section runs when
	// it has a baseline (copyBinaries); "" without one.
	airBin, baseBin string
	run             int // the run of -runs, from 0
}

// tlsLeg is one target of the HTTPS section.
type tlsLeg struct {
	name    string
	pr      *proxyRun // nil for direct
	idleRSS int64     // right after start, before any load
	audit   *auditStats
	problem string // the target could not start, or its audit trail is missing
}

// checkAudit stops the proxy (its audit trail is complete only then) and checks that it
// recorded the section's traffic, none of it denied.
func (l *tlsLeg) checkAudit() {
	if l.pr == nil || l.problem != "" || l.pr.audit == nil {
		return
	}
	l.pr.p.stop()
	st, err := l.pr.audit()
	l.audit = &st
	if err != nil {
		l.problem = "audit: " + err.Error()
	}
}

// tlsResult is one run of one test against one leg.
type tlsResult struct {
	ops     int64 // tunnels or requests completed
	bytes   int64 // body bytes read (the bulk test)
	elapsed time.Duration
}

// tlsRound is one measured round of one test on one leg.
type tlsRound struct {
	n   int
	res tlsResult
	cpu time.Duration // proxy CPU (process tree) during the round
	rss int64         // proxy RSS (process tree) after the round
}

// tlsTest is one measurement of the HTTPS section.
type tlsTest struct {
	name   string
	key    string // its name in -tls-tests
	unit   string // of rate()
	legs   []string
	bytes  bool // rate is MiB/s of body bytes, not ops/s
	run    func(ctx context.Context, te *tlsEnv, c tlsClient, d time.Duration) (tlsResult, error)
	direct func(c *tlsClient) // adjusts the direct leg's client
	// target: the test's goal as "airlock/OTHER ≥ ratio"; other "" = none.
	other string
	ratio float64
}

// tlsOutcome is one test's rounds per leg.
type tlsOutcome struct {
	test    *tlsTest
	rounds  map[string][]tlsRound
	problem map[string]string // per leg: invalid, and why; "n/a: …" when not available
}

func (r tlsResult) rate(bytes bool) float64 {
	if r.elapsed <= 0 {
		return 0
	}
	if bytes {
		return float64(r.bytes) / (1 << 20) / r.elapsed.Seconds()
	}
	return float64(r.ops) / r.elapsed.Seconds()
}

// tlsTests lists the HTTPS section's tests.
func tlsTests(cfg config) []*tlsTest {
	return []*tlsTest{
		{name: "new tunnels", key: "tunnels", unit: "tunnels/s", legs: tlsLegNames, other: targetDirect, ratio: 0.9,
			run: func(ctx context.Context, te *tlsEnv, c tlsClient, d time.Duration) (tlsResult, error) {
				return runNewTunnels(ctx, c, cfg.tlsConns, d)
			}},
		{name: "one tunnel bulk", key: "bulk", unit: "MiB/s", legs: tlsLegNames, bytes: true, other: targetDirect, ratio: 0.9,
			run: func(ctx context.Context, te *tlsEnv, c tlsClient, d time.Duration) (tlsResult, error) {
				return runBulk(ctx, c, cfg.bulkBytes)
			}},
		{name: "intercepted keep-alive", key: "keepalive", unit: "req/s", legs: tlsLegNames, other: "squid", ratio: 2,
			direct: func(c *tlsClient) { c.inject = true },
			run: func(ctx context.Context, te *tlsEnv, c tlsClient, d time.Duration) (tlsResult, error) {
				return runKeepAlive(ctx, c, cfg.tlsConns, d)
			}},
		{name: "intercepted POST 1-4 KiB JSON, Content-Length", key: "post-length", unit: "req/s", legs: tlsLegNames, other: "squid", ratio: 2,
			direct: func(c *tlsClient) { c.inject = true },
			run: func(ctx context.Context, te *tlsEnv, c tlsClient, d time.Duration) (tlsResult, error) {
				return runPosts(ctx, c, cfg.tlsConns, d, false)
			}},
		{name: "intercepted POST 1-4 KiB JSON, chunked", key: "post-chunked", unit: "req/s", legs: tlsLegNames, other: "squid", ratio: 2,
			direct: func(c *tlsClient) { c.inject = true },
			run: func(ctx context.Context, te *tlsEnv, c tlsClient, d time.Duration) (tlsResult, error) {
				return runPosts(ctx, c, cfg.tlsConns, d, true)
			}},
		{name: "intercepted chunked gzip response", key: "gzip", unit: "req/s", legs: tlsLegNames, other: "squid", ratio: 2,
			direct: func(c *tlsClient) { c.inject = true },
			run: func(ctx context.Context, te *tlsEnv, c tlsClient, d time.Duration) (tlsResult, error) {
				return runGzip(ctx, c, cfg.tlsConns, d)
			}},
		{name: "intercepted gRPC streaming", key: "grpc", unit: "msg/s", legs: baseLegs,
			direct: func(c *tlsClient) { c.inject = true },
			run: func(ctx context.Context, te *tlsEnv, c tlsClient, d time.Duration) (tlsResult, error) {
				return runGRPCStream(ctx, c, cfg.tlsConns, d)
			}},
		{name: "intercepted h2 (h2load)", key: "h2", unit: "req/s", legs: baseLegs,
			direct: func(c *tlsClient) { c.inject = true },
			run: func(ctx context.Context, te *tlsEnv, c tlsClient, d time.Duration) (tlsResult, error) {
				return runH2load(ctx, te, c, cfg.tlsConns, d)
			}},
	}
}

// runTLSBench is the HTTPS section: it starts the TLS upstream, the DNS server and every
// leg, then runs each test in rounds with the legs taking turns.
func runTLSBench(ctx context.Context, e *env, root string, run int) (*tlsEnv, []*tlsLeg, []*tlsOutcome, error) {
	te, err := setUpTLS(ctx, e, filepath.Join(root, "tls"))
	if err != nil {
		return nil, nil, nil, err
	}
	te.run = run
	defer te.up.stop()
	defer te.dns.close()
	var legs []*tlsLeg
	defer func() {
		for _, l := range legs {
			if l.pr != nil {
				l.pr.p.stop()
			}
		}
	}()
	if hasBaseline(e.cfg) {
		if err := te.copyBinaries(ctx); err != nil {
			return te, nil, nil, err
		}
	}
	for _, name := range tlsLegNames {
		if !slices.Contains(e.cfg.only, name) && (name != targetBaseline || !hasBaseline(e.cfg)) {
			continue
		}
		l := &tlsLeg{name: name}
		legs = append(legs, l)
		if err := te.startLeg(ctx, l); err != nil {
			l.problem = "start: " + err.Error()
			e.progress("https %s: %s", name, l.problem)
		}
	}
	if hasBaseline(e.cfg) {
		te.rss = te.sampleIdleRSS(ctx)
	}
	var outs []*tlsOutcome
	for _, t := range tlsTests(e.cfg) {
		if !slices.Contains(e.cfg.tlsTests, t.key) {
			continue
		}
		outs = append(outs, te.runTest(ctx, t, legs))
		if ctx.Err() != nil {
			return te, legs, outs, ctx.Err()
		}
	}
	for _, l := range legs {
		l.checkAudit()
	}
	return te, legs, outs, nil
}

// setUpTLS writes the PKI and starts the TLS upstream and the DNS server.
func setUpTLS(ctx context.Context, e *env, dir string) (*tlsEnv, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	pki, err := newPKI(dir)
	if err != nil {
		return nil, fmt.Errorf("bench PKI: %w", err)
	}
	environ := append(os.Environ(), "BENCH_TLS_CERT="+pki.certFile, "BENCH_TLS_KEY="+pki.keyFile)
	up, addr, err := startSelf(ctx, "tls-upstream", tlsUpstreamRole, environ, filepath.Join(dir, "upstream.log"))
	if err != nil {
		return nil, fmt.Errorf("start TLS upstream: %w", err)
	}
	d, err := startBenchDNS()
	if err != nil {
		up.stop()
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pki.caPEM)
	roots.AppendCertsFromPEM(pki.squidCACert)
	return &tlsEnv{e: e, dir: dir, pki: pki, upstream: addr, up: up, dns: d, roots: roots}, nil
}

// startLeg starts a proxy leg and records its idle RSS.
func (te *tlsEnv) startLeg(ctx context.Context, l *tlsLeg) error {
	return te.startLegIn(ctx, l, filepath.Join(te.dir, l.name))
}

// startLegIn starts a proxy leg with its files in dir and records its idle RSS.
func (te *tlsEnv) startLegIn(ctx context.Context, l *tlsLeg, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var err error
	switch l.name {
	case targetDirect:
		return nil
	case targetAirlock:
		l.pr, err = te.startAirlock(ctx, dir, te.airBin)
	case targetBaseline:
		l.pr, err = te.startAirlock(ctx, dir, te.baseBin)
	case "squid":
		l.pr, err = te.startSquid(ctx, dir)
	}
	if err != nil {
		return err
	}
	// Let the runtime settle (GC, lazily started helpers) before reading the idle figure.
	time.Sleep(500 * time.Millisecond)
	l.idleRSS = procRSS(l.pr.p.cmd.Process.Pid)
	return nil
}

// tlsAirlockPolicy: bench.test is a passthrough tunnel, inject.bench.test is intercepted
// with an injected Authorization. Both resolve to 127.0.0.1, which the cidrs entry allows.
const tlsAirlockPolicy = `apiVersion: airlock/v1
kind: EgressPolicy
metadata:
  name: bench-tls
spec:
  mode: enforce
  egress:
    - name: bench-tunnel
      hosts: [%[3]q]
      cidrs: ["127.0.0.1/32"]
      ports: [%[1]s]
    - name: bench-inject
      hosts: [%[4]q]
      ports: [%[1]s]
      inject:
        - header: Authorization
          value: 'Bearer {{ secret "bench-token" }}'
  secrets:
    bench-token: {file: %[2]q}
`

// startAirlock starts airlock, or bin when not "" (the baseline), with the section's policy.
func (te *tlsEnv) startAirlock(ctx context.Context, dir, bin string) (*proxyRun, error) {
	secret := filepath.Join(dir, "bench-token")
	if err := os.WriteFile(secret, []byte(tlsToken+"\n"), 0o600); err != nil {
		return nil, err
	}
	_, port, _ := strings.Cut(te.upstream, ":")
	pol := fmt.Appendf(nil, tlsAirlockPolicy, port, secret, tlsTunnelHost, tlsInjectHost)
	pr, err := startAirlockWith(ctx, te.e, dir, pol, airlockOpts{upstreamDNS: te.dns.addr,
		env: []string{"SSL_CERT_FILE=" + te.pki.caFile}, pprof: te.e.cfg.profileDir != "", bin: bin})
	if err != nil {
		return nil, err
	}
	ca, err := findFile(pr.stateDir, "ca.crt")
	if err == nil {
		var b []byte
		if b, err = os.ReadFile(ca); err == nil && !te.roots.AppendCertsFromPEM(b) {
			err = errors.New("no certificate in " + ca)
		}
	}
	if err != nil {
		pr.p.stop()
		return nil, fmt.Errorf("airlock's interception CA: %w", err)
	}
	return pr, nil
}

// findFile returns the first file called name under dir.
func findFile(dir, name string) (string, error) {
	var found string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == name && found == "" {
			found = p
		}
		return nil
	})
	if found == "" {
		return "", fmt.Errorf("no %s under %s (%v)", name, dir, err)
	}
	return found, nil
}

// runTest runs one test: the legs take turns for the rounds, each after a warm-up.
func (te *tlsEnv) runTest(ctx context.Context, t *tlsTest, legs []*tlsLeg) *tlsOutcome {
	out := &tlsOutcome{test: t, rounds: map[string][]tlsRound{}, problem: map[string]string{}}
	var mine []*tlsLeg
	for _, l := range legs {
		if !slices.Contains(t.legs, l.name) {
			continue
		}
		mine = append(mine, l)
		if l.problem != "" {
			out.problem[l.name] = l.problem
		} else if why := te.available(ctx, t, l); why != "" {
			out.problem[l.name] = "n/a: " + why
			te.e.progress("https %s %s: not available: %s", t.name, l.name, why)
		}
	}
	for r := range te.e.cfg.rounds {
		for _, l := range roundOrder(mine, r, te.run) {
			if out.problem[l.name] != "" {
				continue
			}
			rd, err := te.measure(ctx, t, l, r)
			if err != nil {
				out.problem[l.name] = fmt.Sprintf("invalid: round %d: %v", r+1, err)
				te.e.progress("https %s %s: %s", t.name, l.name, out.problem[l.name])
				continue
			}
			out.rounds[l.name] = append(out.rounds[l.name], rd)
			if ctx.Err() != nil {
				return out
			}
		}
	}
	return out
}

// roundOrder is the order of the legs in round r of run: they take turns starting at the r-th,
// as everywhere in the bench, except that airlock and the baseline go as one unit, back to
// back, and swap places every round and every run, so that neither always follows the other
// or the same leg (a leg measured after direct's thousands of connections, say). Without a
// baseline it is the plain rotation.
func roundOrder(legs []*tlsLeg, r, run int) []*tlsLeg {
	var air, base *tlsLeg
	for _, l := range legs {
		switch l.name {
		case targetAirlock:
			air = l
		case targetBaseline:
			base = l
		}
	}
	var units [][]*tlsLeg
	for _, l := range legs {
		switch {
		case l == base && air != nil:
		case l == air && base != nil:
			pair := []*tlsLeg{air, base}
			if (r+run)%2 == 1 {
				pair = []*tlsLeg{base, air}
			}
			units = append(units, pair)
		default:
			units = append(units, []*tlsLeg{l})
		}
	}
	var out []*tlsLeg
	for i := range units {
		out = append(out, units[(i+r)%len(units)]...)
	}
	return out
}

// client returns the test's client for a leg.
func (te *tlsEnv) client(t *tlsTest, l *tlsLeg) tlsClient {
	c := tlsClient{upstream: te.upstream, roots: te.roots}
	if l.pr != nil {
		c.proxy = l.pr.addr
	} else if t.direct != nil {
		t.direct(&c)
	}
	return c
}

// available says why a leg cannot run a test ("" when it can): for the h2 test, the leg
// must negotiate h2 on the intercepted host.
func (te *tlsEnv) available(ctx context.Context, t *tlsTest, l *tlsLeg) string {
	if !strings.Contains(t.name, "h2") {
		return ""
	}
	if _, err := exec.LookPath("h2load"); err != nil {
		return "h2load not found; install it with: apt-get install -y nghttp2-client"
	}
	conn, err := te.client(t, l).open(ctx, tlsInjectHost, []string{"h2", "http/1.1"})
	if err != nil {
		return err.Error()
	}
	defer conn.Close()
	if p := conn.ConnectionState().NegotiatedProtocol; p != "h2" {
		return fmt.Sprintf("%s's interception did not negotiate h2 (ALPN %q)", l.name, p)
	}
	return ""
}

// measure runs one round (after a warm-up in the first) and checks it: every counted
// request must have been served by the upstream.
func (te *tlsEnv) measure(ctx context.Context, t *tlsTest, l *tlsLeg, n int) (tlsRound, error) {
	c := te.client(t, l)
	if n == 0 && te.e.cfg.warmup > 0 && !t.bytes {
		_, _ = t.run(ctx, te, c, te.e.cfg.warmup) // errors show in the rounds
	}
	served0, err := tlsServed(te.upstream, te.roots)
	if err != nil {
		return tlsRound{}, err
	}
	var cpu0 time.Duration
	var prof func()
	if l.pr != nil {
		cpu0 = treeCPU(l.pr.p.cmd.Process.Pid)
		if n == 0 && l.name == targetAirlock && te.e.cfg.profileDir != "" {
			prof = te.profile(ctx, l, t)
		}
	}
	res, err := t.run(ctx, te, c, te.e.cfg.duration)
	if prof != nil {
		prof()
	}
	if err != nil {
		return tlsRound{}, err
	}
	rd := tlsRound{n: n, res: res}
	if l.pr != nil {
		rd.cpu = treeCPU(l.pr.p.cmd.Process.Pid) - cpu0
		rd.rss = procRSS(l.pr.p.cmd.Process.Pid)
		if done, err := l.pr.p.exited(); done {
			return rd, fmt.Errorf("%s exited (%s)", l.name, exitStatus(err))
		}
	}
	served1, err := tlsServed(te.upstream, te.roots)
	if err != nil {
		return rd, err
	}
	if served1-served0 < res.ops {
		return rd, fmt.Errorf("the upstream served %d of %d responses", served1-served0, res.ops)
	}
	te.e.progress("https round %d/%d: %-24s %-12s %9.1f %s", n+1, te.e.cfg.rounds, t.name, l.name, res.rate(t.bytes), t.unit)
	return rd, nil
}

// profile starts a CPU profile of airlock for the test's duration; the returned function
// waits for it and writes it to -profile-dir.
func (te *tlsEnv) profile(ctx context.Context, l *tlsLeg, t *tlsTest) func() {
	secs := int(te.e.cfg.duration / time.Second)
	if t.bytes {
		secs = 3
	}
	path := filepath.Join(te.e.cfg.profileDir, strings.NewReplacer(" ", "-", "(", "", ")", "").Replace(t.name)+".pprof")
	var wg sync.WaitGroup
	wg.Go(func() {
		cl := &http.Client{Transport: &http.Transport{Proxy: nil}}
		resp, err := cl.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", l.pr.admin, secs))
		if err != nil {
			te.e.progress("profile %s: %v", t.name, err)
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		err = os.MkdirAll(te.e.cfg.profileDir, 0o755)
		if err == nil {
			err = os.WriteFile(path, b, 0o644)
		}
		if err != nil {
			te.e.progress("profile %s: %v", t.name, err)
			return
		}
		te.e.progress("profile of airlock during %q: %s", t.name, path)
	})
	return wg.Wait
}

// runNewTunnels opens a tunnel per request: CONNECT, TLS handshake (no resumption), one
// GET, close; workers loops in parallel for d. Any failure fails the run.
func runNewTunnels(ctx context.Context, c tlsClient, workers int, d time.Duration) (tlsResult, error) {
	return parallel(ctx, workers, d, func(ctx context.Context, more func() bool, ops *atomic.Int64) error {
		for more() {
			conn, err := c.open(ctx, tlsTunnelHost, []string{"http/1.1"})
			if err != nil {
				return err
			}
			_, err = c.get(conn, bufio.NewReaderSize(conn, 4096), tlsTunnelHost, "/", int64(len(upstreamBody)))
			conn.Close()
			if err != nil {
				return err
			}
			ops.Add(1)
		}
		return nil
	})
}

// runKeepAlive opens conns tunnels to the intercepted host and sends GETs on each, one at
// a time, for d.
func runKeepAlive(ctx context.Context, c tlsClient, conns int, d time.Duration) (tlsResult, error) {
	return parallel(ctx, conns, d, func(ctx context.Context, more func() bool, ops *atomic.Int64) error {
		conn, err := c.open(ctx, tlsInjectHost, []string{"http/1.1"})
		if err != nil {
			return err
		}
		defer conn.Close()
		br := bufio.NewReaderSize(conn, 4096)
		for more() {
			if _, err := c.get(conn, br, tlsInjectHost, "/", int64(len(upstreamBody))); err != nil {
				return err
			}
			ops.Add(1)
		}
		return nil
	})
}

// parallel runs n copies of f until d has passed and counts their operations; the first
// error wins. f loops while more() holds; an operation under way at the end completes (and
// counts), so no request is cut off by the clock.
func parallel(ctx context.Context, n int, d time.Duration, f func(context.Context, func() bool, *atomic.Int64) error) (tlsResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var ops atomic.Int64
	errs := make([]error, n)
	start := time.Now()
	end := start.Add(d)
	more := func() bool { return ctx.Err() == nil && time.Now().Before(end) }
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := f(ctx, more, &ops); err != nil {
				errs[i] = err
				cancel()
			}
		})
	}
	wg.Wait()
	res := tlsResult{ops: ops.Load(), elapsed: time.Since(start)}
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	if res.ops == 0 {
		return res, errors.New("no operation completed")
	}
	return res, nil
}

// runBulk reads size bytes through one tunnel in one response.
func runBulk(ctx context.Context, c tlsClient, size int64) (tlsResult, error) {
	conn, err := c.open(ctx, tlsTunnelHost, []string{"http/1.1"})
	if err != nil {
		return tlsResult{}, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	start := time.Now()
	n, err := c.get(conn, bufio.NewReaderSize(conn, 64<<10), tlsTunnelHost, fmt.Sprintf("%s?n=%d", bulkPath, size), size)
	res := tlsResult{ops: 1, bytes: n, elapsed: time.Since(start)}
	return res, err
}
