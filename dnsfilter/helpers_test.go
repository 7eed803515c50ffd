package dnsfilter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// upstreamQuery is one query the test upstream received.
type loggedQuery struct {
	name    string // lower-case FQDN
	raw     string // the name as it arrived, case and all
	qtype   uint16
	network string // "udp" or "tcp"
	options int    // EDNS0 options in the query
}

// answerer builds the upstream's answer to a query; n counts the queries for this name and
// network so far (from 0). Returning nil drops the query (the client times out).
type answerer func(req *dns.Msg, network string, n int) *dns.Msg

// testUpstream is an in-process DNS server on 127.0.0.1:0 (UDP and TCP, same port) playing
// the upstream resolver. It logs every query.
type testUpstream struct {
	addr netip.AddrPort

	// mu guards names, log and counts.
	mu     sync.Mutex
	names  map[string]answerer
	log    []loggedQuery
	counts map[string]int
}

func startUpstream(t *testing.T) *testUpstream {
	t.Helper()
	u := &testUpstream{names: map[string]answerer{}, counts: map[string]int{}}
	pc, l, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.addr = netip.MustParseAddrPort(pc.LocalAddr().String())
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // registered first, so it runs after the shutdowns below
	for _, srv := range []*dns.Server{
		{PacketConn: pc, Handler: dns.HandlerFunc(u.serve("udp"))},
		{Listener: l, Handler: dns.HandlerFunc(u.serve("tcp"))},
	} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = srv.ActivateAndServe()
		}()
		<-started
		t.Cleanup(func() {
			_ = srv.Shutdown()
			if srv.PacketConn != nil {
				srv.PacketConn.Close()
			}
		})
	}
	return u
}

// set makes name answer with f.
func (u *testUpstream) set(name string, f answerer) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.names[dns.CanonicalName(name)] = f
}

// setA makes name answer A/AAAA records of addrs with ttl.
func (u *testUpstream) setA(name string, ttl uint32, addrs ...string) {
	u.set(name, func(req *dns.Msg, _ string, _ int) *dns.Msg {
		return addrAnswer(req, ttl, addrs...)
	})
}

// addrAnswer is the reply to req with the records of addrs matching its type.
func addrAnswer(req *dns.Msg, ttl uint32, addrs ...string) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(req)
	q := req.Question[0]
	for _, s := range addrs {
		m.Answer = append(m.Answer, addrRR(q.Name, q.Qtype, ttl, s)...)
	}
	return m
}

// addrRR is an A or AAAA record of name for addr, when its family matches qtype.
func addrRR(name string, qtype uint16, ttl uint32, addr string) []dns.RR {
	a := netip.MustParseAddr(addr)
	hdr := dns.RR_Header{Name: name, Class: dns.ClassINET, Ttl: ttl}
	switch {
	case a.Is4() && qtype == dns.TypeA:
		hdr.Rrtype = dns.TypeA
		return []dns.RR{&dns.A{Hdr: hdr, A: net.IP(a.AsSlice())}}
	case a.Is6() && qtype == dns.TypeAAAA:
		hdr.Rrtype = dns.TypeAAAA
		return []dns.RR{&dns.AAAA{Hdr: hdr, AAAA: net.IP(a.AsSlice())}}
	}
	return nil
}

func (u *testUpstream) serve(network string) func(dns.ResponseWriter, *dns.Msg) {
	return func(w dns.ResponseWriter, req *dns.Msg) {
		q := req.Question[0]
		name := dns.CanonicalName(q.Name)
		lq := loggedQuery{name: name, raw: q.Name, qtype: q.Qtype, network: network}
		if opt := req.IsEdns0(); opt != nil {
			lq.options = len(opt.Option)
		}
		u.mu.Lock()
		u.log = append(u.log, lq)
		key := name + "/" + network
		n := u.counts[key]
		u.counts[key]++
		f := u.names[name]
		u.mu.Unlock()
		var m *dns.Msg
		if f == nil {
			m = new(dns.Msg)
			m.SetRcode(req, dns.RcodeNameError)
		} else if m = f(req, network, n); m == nil {
			return
		}
		_ = w.WriteMsg(m)
	}
}

// queries returns the logged queries for name.
func (u *testUpstream) queries(name string) []loggedQuery {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []loggedQuery
	for _, q := range u.log {
		if q.name == dns.CanonicalName(name) {
			out = append(out, q)
		}
	}
	return out
}

// total returns how many queries the upstream received.
func (u *testUpstream) total() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.log)
}

// allowCall is one call on the recording map.
type allowCall struct {
	revoke bool
	addr   netip.Addr
	ports  []uint16
	until  time.Time
}

// recordingMap is an AllowMap that records its calls. With gate set, Allow signals entered
// and then blocks until gate is closed; with fail set, Allow fails.
type recordingMap struct {
	entered chan allowCall // receives each Allow call when gated
	gate    chan struct{}  // nil: never blocks

	// mu guards calls, fail and done.
	mu    sync.Mutex
	calls []allowCall
	fail  error
	done  int // Allow calls that returned successfully
}

func (m *recordingMap) Allow(addr netip.Addr, ports []uint16, until time.Time) error {
	c := allowCall{addr: addr, ports: slices.Clone(ports), until: until}
	if m.gate != nil {
		m.entered <- c
		<-m.gate
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	m.calls = append(m.calls, c)
	m.done++
	return nil
}

func (m *recordingMap) Revoke(addr netip.Addr, ports []uint16) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, allowCall{revoke: true, addr: addr, ports: slices.Clone(ports)})
	return nil
}

func (m *recordingMap) snapshot() []allowCall {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.calls)
}

func (m *recordingMap) allowsDone() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.done
}

// recordingAudit collects audit events.
type recordingAudit struct {
	mu  sync.Mutex // guards evs
	evs []audit.Event
}

func (a *recordingAudit) Log(e audit.Event) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.evs = append(a.evs, e)
}

func (a *recordingAudit) Health() error { return nil }

// last returns the last event; it fails t when there is none.
func (a *recordingAudit) last(t *testing.T) audit.Event {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.evs) == 0 {
		t.Fatal("no audit event")
	}
	return a.evs[len(a.evs)-1]
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// staticPolicy serves one policy.
type staticPolicy struct{ p *policy.Policy }

func (s staticPolicy) Current() *policy.Policy { return s.p }

// harness is a filter serving on 127.0.0.1:0 in front of a test upstream.
type harness struct {
	f     *Filter
	addr  string
	up    *testUpstream
	am    *recordingMap
	audit *recordingAudit
	clock *fakeClock
	reg   *prometheus.Registry
}

// testPolicy wraps the egress and dns sections in a policy document.
func testPolicy(t *testing.T, spec string) *policy.Policy {
	t.Helper()
	doc := "apiVersion: airlock/v1\nkind: EgressPolicy\nmetadata:\n  name: dnstest\nspec:\n" + spec
	p, err := policy.Parse("test.yaml", []byte(doc))
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	return p
}

// basicSpec allows two names, a wildcard and a raw TCP host.
const basicSpec = `  dns:
    minTTL: 5s
    grace: 10s
  egress:
    - name: web
      hosts: ["allowed.example", "alias.example", "mixed.example", "big.example", "svc.example"]
      ports: [443]
    - name: db
      hosts: ["db.example"]
      ports: [5432]
      protocol: tcp
    - name: zone
      hosts: ["*.zone.example", "exact.zone.example"]
`

// newHarness starts a filter with policy spec and cfg's optional fields.
func newHarness(t *testing.T, spec string, mod func(*Config)) *harness {
	t.Helper()
	h := &harness{up: startUpstream(t), am: &recordingMap{}, audit: &recordingAudit{},
		clock: &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}, reg: prometheus.NewRegistry()}
	cfg := Config{
		Policy:     staticPolicy{testPolicy(t, spec)},
		Upstreams:  []netip.AddrPort{h.up.addr},
		AllowMap:   h.am,
		Audit:      h.audit,
		Registerer: h.reg,
		Timeout:    time.Second,
		Now:        h.clock.now,
	}
	if mod != nil {
		mod(&cfg)
	}
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.f = f
	pc, l, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = pc.LocalAddr().String()
	served := make(chan error, 1)
	go func() { served <- f.Serve(pc, l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := f.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
		if err := <-served; err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	return h
}

// ask sends one query over network ("udp" or "tcp") and returns the answer.
func (h *harness) ask(t *testing.T, network, name string, qtype uint16) *dns.Msg {
	t.Helper()
	r, err := h.exchange(network, question(name, qtype))
	if err != nil {
		t.Fatalf("query %s %s over %s: %v", name, dns.TypeToString[qtype], network, err)
	}
	return r
}

func (h *harness) exchange(network string, m *dns.Msg) (*dns.Msg, error) {
	c := &dns.Client{Net: network, Timeout: 5 * time.Second}
	r, _, err := c.Exchange(m, h.addr)
	return r, err
}

// question is a query for name and qtype with RD set.
func question(name string, qtype uint16) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	return m
}

// answerAddrs returns the addresses of r's A and AAAA records, as strings.
func answerAddrs(r *dns.Msg) []string {
	var out []string
	for _, rr := range r.Answer {
		if a, ok := rrAddr(rr); ok {
			out = append(out, a.String())
		}
	}
	return out
}

// errTestMap is the error the failing map returns.
var errTestMap = errors.New("map full")

// policyClass names the address class of a, "public" for a public one.
func policyClass(a netip.Addr) string {
	if c := policy.ClassifyAddr(a); c != policy.AddrPublic {
		return c.String()
	}
	return "public"
}
