package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/egress"
	"github.com/airlock-dev/airlock/policy"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if s, n := pathTally.strict.Load(), pathTally.netHTTP.Load(); s+n > 0 {
			fmt.Fprintf(os.Stderr, "HTTP/1.x requests by path over these tests: strict %d, nethttp %d (strict share %.0f%%)\n",
				s, n, 100*float64(s)/float64(s+n))
		}
		os.Exit(code)
	}))
}

// pathTally sums airlock_proxy_http1_requests_total over every harness of the run.
var pathTally struct{ strict, netHTTP atomic.Int64 }

// fastPathOff reports whether the tests run with the HTTP/1.1 fast path off: the package's
// tests run both ways (AIRLOCK_TEST_HTTP1_FASTPATH=off go test ./proxy/, and without).
func fastPathOff() bool { return os.Getenv("AIRLOCK_TEST_HTTP1_FASTPATH") == "off" }

// waitTimeout bounds every wait on an event in these tests; it is a failure deadline, not
// synchronisation.
const waitTimeout = 10 * time.Second

// Test addresses: public in the policy's eyes (198.18.0.0/15, the benchmarking range), mapped
// by the harness's dialer to loopback servers, so no test needs a cidrs rule for loopback.
var (
	addrAPI   = netip.MustParseAddr("198.18.0.10") // api.test
	addrPlain = netip.MustParseAddr("198.18.0.20") // plain.test
	addrOther = netip.MustParseAddr("198.18.0.99") // an address no test name has
)

// mustPolicy parses a policy document, failing the test on error.
func mustPolicy(t testing.TB, doc string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse(t.Name()+".yaml", []byte(doc))
	if err != nil {
		t.Fatalf("parse policy: %v", err)
	}
	return p
}

// policyDoc builds a policy from its egress rules (YAML, indented by four spaces).
func policyDoc(name, mode, egress string) string {
	return fmt.Sprintf("apiVersion: airlock/v1\nkind: EgressPolicy\nmetadata:\n  name: %s\nspec:\n  mode: %s\n  egress:\n%s", name, mode, egress)
}

// basicPolicy allows api.test:443 and plain.test:80 without interception.
const basicEgress = `    - name: api
      hosts: ["api.test"]
      ports: [443]
    - name: plain
      hosts: ["plain.test", "*.ssrf.test"]
      ports: [80]
`

// source is a PolicySource whose policy a test can swap.
type source struct{ p atomic.Pointer[policy.Policy] }

func newSource(p *policy.Policy) *source {
	s := &source{}
	s.p.Store(p)
	return s
}

func (s *source) Current() *policy.Policy { return s.p.Load() }

// resolver is a Resolver from a map; lookup, when set, overrides it. It counts lookups.
type resolver struct {
	mu     sync.Mutex
	names  map[string][]netip.Addr
	calls  map[string]int
	lookup func(host string, call int) []netip.Addr
}

func (r *resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls == nil {
		r.calls = make(map[string]int)
	}
	r.calls[host]++
	if r.lookup != nil {
		if as := r.lookup(host, r.calls[host]); as != nil {
			return as, nil
		}
	}
	if as, ok := r.names[host]; ok {
		return as, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (r *resolver) count(host string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[host]
}

// eventLog collects audit JSON lines and signals each one.
type eventLog struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines chan struct{}
}

func newEventLog() *eventLog { return &eventLog{lines: make(chan struct{}, 1024)} }

func (l *eventLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	for _, line := range bytes.SplitAfter(p, []byte("\n")) {
		if bytes.HasSuffix(line, []byte("\n")) && !isDecisionLine(line) {
			l.lines <- struct{}{}
		}
	}
	return len(p), nil
}

// wait blocks until n more audit events were written since the last wait, and returns all
// events written so far.
func (l *eventLog) wait(t testing.TB, n int) []map[string]any {
	t.Helper()
	deadline := time.After(waitTimeout)
	for range n {
		select {
		case <-l.lines:
		case <-deadline:
			t.Fatalf("timed out waiting for %d audit events; have: %s", n, l.text())
		}
	}
	return l.events(t)
}

func (l *eventLog) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// isDecisionLine tells a decision-phase event (written before a request is forwarded) from
// the canonical events the tests count.
func isDecisionLine(line []byte) bool { return bytes.Contains(line, []byte(`"phase":"decision"`)) }

// events returns the canonical events written so far (decision-phase events left out;
// allEvents has them).
func (l *eventLog) events(t testing.TB) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, ev := range l.allEvents(t) {
		if ev["phase"] != "decision" {
			out = append(out, ev)
		}
	}
	return out
}

// allEvents returns every event written so far, in order.
func (l *eventLog) allEvents(t testing.TB) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.text()), "\n") {
		if line == "" {
			continue
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("decode audit line %q: %v", line, err)
		}
		out = append(out, ev)
	}
	return out
}

// pki is a test CA for upstream servers.
type pki struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newPKI(t testing.TB) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "upstream test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &pki{cert: cert, key: key, pool: pool}
}

// leaf issues a server certificate for names.
func (k *pki) leaf(t testing.TB, names ...string) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: names,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, k.cert, &key.PublicKey, k.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// tlsServer starts an HTTPS upstream with a certificate from k for names.
func (k *pki) tlsServer(t testing.TB, h http.Handler, names ...string) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{k.leaf(t, names...)}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// httpServer starts a plain HTTP upstream.
func httpServer(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// echo answers with the request's method, host and path, and the Authorization header's
// presence, so tests see what reached the upstream.
func echo() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %s auth=%q body=%d", r.Method, r.Host, r.URL.Path, r.Header.Get("Authorization"), len(body))
	})
}

// harness is a running proxy with its audit log, metrics and dial table.
type harness struct {
	t        testing.TB
	p        *Proxy
	src      *source
	res      *resolver
	log      *eventLog
	reg      *prometheus.Registry
	addr     string // explicit listener
	taddr    string // transparent listener ("" when not started)
	upstream *pki

	// mu guards routes, dialled and hold.
	mu      sync.Mutex
	routes  map[netip.AddrPort]string // checked address -> real loopback address
	dialled []netip.AddrPort
	// hold, when set, runs before every dial (with the dial's context); an error fails it.
	hold func(ctx context.Context, ap netip.AddrPort) error
}

type harnessOpt func(*Config)

func newHarness(t testing.TB, pol *policy.Policy, opts ...harnessOpt) *harness {
	t.Helper()
	ca, err := LoadOrCreateCA(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, src: newSource(pol), log: newEventLog(), reg: prometheus.NewRegistry(),
		upstream: newPKI(t), routes: make(map[netip.AddrPort]string),
		res: &resolver{names: map[string][]netip.Addr{
			"api.test":   {addrAPI},
			"plain.test": {addrPlain},
		}}}
	al, err := audit.New(audit.Options{Writer: h.log, Sandbox: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = al.Close() }) // runs after the proxy's cleanup: events are flushed
	g, err := egress.New(egress.Config{Resolver: h.res, Dial: h.dial})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Policy: h.src, CA: ca, Audit: al, Guard: g, UpstreamRoots: h.upstream.pool,
		Registerer: h.reg, DialTimeout: 2 * time.Second, IdleTimeout: 5 * time.Second,
		DisableHTTP1FastPath: fastPathOff()}
	for _, o := range opts {
		o(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.p = p
	h.addr = h.serve(p.Serve)
	if cfg.OriginalDst != nil {
		h.taddr = h.serve(p.ServeTransparent)
	}
	t.Cleanup(func() { // after Shutdown: the counts are final
		pathTally.strict.Add(int64(h.metric("airlock_proxy_http1_requests_total", map[string]string{"path": pathStrict})))
		pathTally.netHTTP.Add(int64(h.metric("airlock_proxy_http1_requests_total", map[string]string{"path": pathNetHTTP})))
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return h
}

// serve starts serve on a new loopback listener and returns its address; cleanup waits for
// serve to return ErrClosed.
func (h *harness) serve(serve func(net.Listener) error) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		h.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- serve(l) }()
	h.t.Cleanup(func() {
		select {
		case err := <-done:
			if !errors.Is(err, ErrClosed) {
				h.t.Errorf("serve returned %v, want ErrClosed", err)
			}
		case <-time.After(waitTimeout):
			h.t.Errorf("serve did not return after Shutdown")
		}
	})
	return l.Addr().String()
}

// route makes the proxy's dials to addr:port reach srv (an httptest server).
func (h *harness) route(addr netip.Addr, port uint16, srv *httptest.Server) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.routes[netip.AddrPortFrom(addr, port)] = srv.Listener.Addr().String()
}

// dial is the proxy's dialer in tests: routed addresses reach test servers, others are
// dialled for real (so a guard bug would really connect).
func (h *harness) dial(ctx context.Context, ap netip.AddrPort) (net.Conn, error) {
	h.mu.Lock()
	h.dialled = append(h.dialled, ap)
	target, ok := h.routes[ap]
	hold := h.hold
	h.mu.Unlock()
	if hold != nil {
		if err := hold(ctx, ap); err != nil {
			return nil, err
		}
	}
	if !ok {
		target = ap.String()
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", target)
}

func (h *harness) dials() []netip.AddrPort {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]netip.AddrPort(nil), h.dialled...)
}

// client is an HTTP client using the explicit proxy, trusting roots.
func (h *harness) client(roots *x509.CertPool) *http.Client {
	u, _ := url.Parse("http://" + h.addr)
	tr := &http.Transport{Proxy: http.ProxyURL(u), TLSClientConfig: &tls.Config{RootCAs: roots}}
	h.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: waitTimeout}
}

// airlockRoots trusts the proxy's CA.
func (h *harness) airlockRoots() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(h.p.cfg.CA.Certificate())
	return pool
}

// get fetches url through the proxy and returns the response with its body read.
func get(t testing.TB, c *http.Client, method, url string, body io.Reader) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp, string(b)
}

// connect opens a CONNECT tunnel by hand and returns the connection and the response.
func (h *harness) connect(target string) (net.Conn, *http.Response) {
	h.t.Helper()
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		h.t.Fatalf("read CONNECT response: %v", err)
	}
	return &prefixConn{Conn: c, r: br}, resp
}

// deniedJSON decodes a denial body.
func deniedJSON(t testing.TB, body string) deniedBody {
	t.Helper()
	var d deniedBody
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("decode denial body %q: %v", body, err)
	}
	return d
}

// counter reads a counter or gauge value from the registry by name and labels.
func (h *harness) metric(name string, labels map[string]string) float64 {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue metrics
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			case m.Histogram != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}
