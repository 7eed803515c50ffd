package approval

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// events is an audit.Sink that keeps what it gets.
type events struct {
	mu sync.Mutex
	ev []audit.Event
}

func (e *events) Log(ev audit.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ev = append(e.ev, ev)
}

func (e *events) Health() error { return nil }

// of returns the events with that decision.
func (e *events) of(decision string) []audit.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []audit.Event
	for _, ev := range e.ev {
		if ev.Decision == decision {
			out = append(out, ev)
		}
	}
	return out
}

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// resolver answers from a table; a name not in it does not resolve.
type resolver map[string][]netip.Addr

func (r resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return a, nil
	}
	return nil, fmt.Errorf("lookup %s: no such host", host)
}

// selfAddrs is a fixed set of own listeners.
type selfAddrs []netip.AddrPort

func (s selfAddrs) Contains(ap netip.AddrPort) bool {
	for _, x := range s {
		if x == ap {
			return true
		}
	}
	return false
}

// source is a settable PolicySource.
type source struct {
	mu sync.Mutex
	p  *policy.Policy
}

func (s *source) Current() *policy.Policy {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.p
}

func (s *source) set(p *policy.Policy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.p = p
}

func mustPolicy(t *testing.T, approval string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse("asks.yaml", []byte(policyDoc(approval)))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// policyDoc is the test policy with an approval section.
func policyDoc(approval string) string {
	return `apiVersion: airlock/v1
kind: EgressPolicy
metadata: {name: asks}
spec:
  egress:
    - name: pypi
      hosts: [pypi.org]
    - name: api
      hosts: [api.example.com]
      ports: [443]
      http:
        - methods: [GET]
          paths: ["/v1/**"]
  secrets:
    hook-key: {env: HOOK_KEY}
` + approval
}

const askAll = `  approval:
    hold: 1m
    askTTL: 10m
    maxGrant: 1h
    sandboxGrants: true
    never: ["*.pastebin.example"]
`

func pub(s string) netip.Addr { return netip.MustParseAddr(s) }

// table resolves the test names.
var table = resolver{
	"new.example.org":    {pub("198.18.0.10")},
	"other.example.org":  {pub("198.18.0.11")},
	"private.example":    {pub("10.1.2.3")},
	"loop.example":       {pub("127.0.0.1")},
	"meta.example":       {pub("169.254.169.254")},
	"mixed.example":      {pub("198.18.0.12"), pub("192.168.1.1")},
	"mapped.example":     {pub("::ffff:10.0.0.1")},
	"self.example":       {pub("198.18.0.99")},
	"x.pastebin.example": {pub("198.18.0.13")},
}

type fixture struct {
	s      *Stage
	src    *source
	clk    *clock
	ev     *events
	asked  chan Ask
	joined chan Ask
	change chan struct{}
}

func newFixture(t *testing.T, approval string, mod func(*Config)) *fixture {
	t.Helper()
	f := &fixture{src: &source{p: mustPolicy(t, approval)}, clk: newClock(), ev: &events{},
		asked: make(chan Ask, 100000), joined: make(chan Ask, 100000), change: make(chan struct{}, 100000)}
	cfg := Config{Policy: f.src, StateDir: t.TempDir(), Sandbox: "box", Audit: f.ev, Now: f.clk.Now,
		Resolver: table, Self: selfAddrs{netip.MustParseAddrPort("198.18.0.99:443")},
		OnChange: func() { f.change <- struct{}{} }}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	s.onAsk = func(a Ask) { f.asked <- a }
	s.onJoin = func(a Ask) { f.joined <- a }
	f.s = s
	return f
}

// settle runs Settle for a GET of https://host:port/path under the effective policy.
func (f *fixture) settle(ctx context.Context, host string, port int) policy.Decision {
	req := policy.Request{Scheme: "https", Host: host, Port: port, Method: "GET", Path: "/x"}
	pol := f.s.Current()
	_, d := f.s.Settle(ctx, pol, req, pol.Decide(req), ViaHTTP)
	return d
}

// settleAsync runs settle in a goroutine and returns its result channel.
func (f *fixture) settleAsync(host string, port int) chan policy.Decision {
	ch := make(chan policy.Decision, 1)
	go func() { ch <- f.settle(context.Background(), host, port) }()
	return ch
}
