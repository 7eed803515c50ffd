package egress

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"

	"github.com/airlock-dev/airlock/policy"
)

// resolver answers from a list of answers per name: the first query gets the first answer,
// later queries the last one (so a rebinding name can answer differently the second time).
// It counts queries.
type resolver struct {
	mu      sync.Mutex
	answers map[string][][]netip.Addr
	queries map[string]int
}

func newResolver() *resolver {
	return &resolver{answers: map[string][][]netip.Addr{}, queries: map[string]int{}}
}

// set makes name answer with each of answers in turn (the last one repeats).
func (r *resolver) set(name string, answers ...[]netip.Addr) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answers[name] = answers
}

func (r *resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.queries[host]
	r.queries[host]++
	as := r.answers[host]
	if len(as) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return as[min(n, len(as)-1)], nil
}

func (r *resolver) count(host string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.queries[host]
}

// dialer records every dial; addresses in fail fail, others get one end of a pipe. Nothing
// reaches the network.
type dialer struct {
	mu     sync.Mutex
	fail   map[netip.AddrPort]bool
	dialed []netip.AddrPort
}

func (d *dialer) dial(_ context.Context, ap netip.AddrPort) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dialed = append(d.dialed, ap)
	if d.fail[ap] {
		return nil, errors.New("connection refused")
	}
	c1, c2 := net.Pipe()
	c2.Close()
	return c1, nil
}

func (d *dialer) dials() []netip.AddrPort {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]netip.AddrPort(nil), d.dialed...)
}

// newTestGuard returns a guard with a fake resolver and dialer. Its own-address list knows
// the interface addresses 198.18.0.5 and 2001:db8::5.
func newTestGuard(t *testing.T) (*Guard, *resolver, *dialer) {
	t.Helper()
	r, d := newResolver(), &dialer{fail: map[netip.AddrPort]bool{}}
	self := NewSelfAddrs(func() ([]netip.Addr, error) {
		return addrs("198.18.0.5", "2001:db8::5"), nil
	})
	g, err := New(Config{Resolver: r, Self: self, Dial: d.dial})
	if err != nil {
		t.Fatal(err)
	}
	return g, r, d
}

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

func prefixes(ss ...string) Ranges {
	out := make(Ranges, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

func mustPolicy(t *testing.T, mode, egress string) *policy.Policy {
	t.Helper()
	doc := "apiVersion: airlock/v1\nkind: EgressPolicy\nmetadata:\n  name: t\nspec:\n  mode: " + mode + "\n  egress:\n" + egress
	p, err := policy.Parse(t.Name()+".yaml", []byte(doc))
	if err != nil {
		t.Fatalf("parse policy: %v", err)
	}
	return p
}

// denialOf returns err's *Denial, failing the test when it has none.
func denialOf(t *testing.T, err error) *Denial {
	t.Helper()
	var den *Denial
	if !errors.As(err, &den) {
		t.Fatalf("got %v, want a *Denial", err)
	}
	return den
}
