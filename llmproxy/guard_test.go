package llmproxy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/egress"
)

// answerResolver answers each name with its addresses in the test's order, filtered by
// family; nothing reaches the network. A net.Resolver would not do: it sorts an answer by
// RFC 6724 against the host's routes (an "unreachable" route for a test range, which the e2e
// tests install while other packages run, puts that range last), so the order a test sees,
// and which address the guard dials first, would depend on the machine.
type answerResolver map[string][]netip.Addr

func (r answerResolver) LookupNetIP(_ context.Context, network, host string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, a := range r[host] {
		if network == "ip" || (network == "ip4") == a.Is4() {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return out, nil
}

// dialRecorder stands in for the network: it records each dial and hands back a pipe.
type dialRecorder struct {
	mu     sync.Mutex
	dialed []netip.AddrPort
}

func (d *dialRecorder) dial(_ context.Context, ap netip.AddrPort) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dialed = append(d.dialed, ap)
	c, s := net.Pipe()
	s.Close()
	return c, nil
}

func (d *dialRecorder) dials() []netip.AddrPort {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]netip.AddrPort(nil), d.dialed...)
}

// TestProviderMixedAnswer: the model API follows the proxy's one rule. An answer holding any
// internal address is refused whole (nothing is dialled, the public address included) unless
// the provider names the range (allowInternal); the sidecar's own listeners are refused
// always.
func TestProviderMixedAnswer(t *testing.T) {
	tests := []struct {
		name          string
		answer        []string
		allowInternal bool
		want          error // nil: the answer's first address is dialled
	}{
		{name: "public only", answer: []string{"198.18.0.10"}},
		{name: "public and private", answer: []string{"198.18.0.10", "10.0.0.1"}, want: egress.ErrInternalAddress},
		{name: "public and metadata", answer: []string{"198.18.0.10", "169.254.169.254"}, want: egress.ErrInternalAddress},
		{name: "public and IPv6 ULA", answer: []string{"198.18.0.10", "fd12:3456::1"}, want: egress.ErrInternalAddress},
		{name: "public and IPv6 link-local", answer: []string{"198.18.0.10", "fe80::1"}, want: egress.ErrInternalAddress},
		{name: "public and IPv4-mapped private", answer: []string{"198.18.0.10", "::ffff:10.0.0.1"}, want: egress.ErrInternalAddress},
		{name: "public and NAT64 of private", answer: []string{"198.18.0.10", "64:ff9b::a00:1"}, want: egress.ErrInternalAddress},
		{name: "public and 6to4 of private", answer: []string{"198.18.0.10", "2002:a00:1::1"}, want: egress.ErrInternalAddress},
		{name: "allowInternal names the range", answer: []string{"198.18.0.10", "10.0.0.1"}, allowInternal: true},
		{name: "allowInternal, the named range first", answer: []string{"10.0.0.1", "198.18.0.10"}, allowInternal: true},
		{name: "own listener", answer: []string{"198.18.0.10", "198.18.0.5"}, allowInternal: true, want: egress.ErrSelfAddress},
		{name: "own listener, IPv4-mapped", answer: []string{"::ffff:198.18.0.5"}, allowInternal: true, want: egress.ErrSelfAddress},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			answer := answerResolver{}
			for _, a := range tc.answer {
				answer["provider.test"] = append(answer["provider.test"], netip.MustParseAddr(a))
			}
			rec := &dialRecorder{}
			g, err := egress.New(egress.Config{Resolver: answer, Dial: rec.dial})
			if err != nil {
				t.Fatal(err)
			}
			g.Self().Add(netip.MustParseAddrPort("198.18.0.5:8080"))
			tr := &transports{guard: g}
			r := &route{base: &url.URL{Scheme: "http", Host: "provider.test:8080"}, allowInternal: tc.allowInternal}
			dial := tr.dialer(providerRanges(r), 5*time.Second)
			c, err := dial(context.Background(), "tcp", "provider.test:8080")
			if tc.want == nil {
				if err != nil {
					t.Fatalf("got %v, want a connection", err)
				}
				c.Close()
				want := netip.AddrPortFrom(netip.MustParseAddr(tc.answer[0]), 8080)
				if got := rec.dials(); len(got) != 1 || got[0] != want {
					t.Errorf("dialled %v, want [%s]", got, want)
				}
				return
			}
			if !errors.Is(err, ErrInternalAddress) || !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want ErrInternalAddress and %v", err, tc.want)
			}
			if got := rec.dials(); len(got) != 0 {
				t.Errorf("dialled %v, want nothing", got)
			}
		})
	}
}

// TestProviderIPBaseURL: a base URL that is an IP address names that address, and only it.
func TestProviderIPBaseURL(t *testing.T) {
	tests := []struct {
		base string
		want egress.Ranges
	}{
		{base: "10.0.0.1:8080", want: egress.Ranges{netip.MustParsePrefix("10.0.0.1/32")}},
		{base: "[fd12::1]:8080", want: egress.Ranges{netip.MustParsePrefix("fd12::1/128")}},
		{base: "[::ffff:10.0.0.1]:8080", want: egress.Ranges{netip.MustParsePrefix("10.0.0.1/32")}},
		{base: "provider.test:8080", want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.base, func(t *testing.T) {
			got := providerRanges(&route{base: &url.URL{Scheme: "http", Host: tc.base}})
			if len(got) != len(tc.want) || (len(got) == 1 && got[0] != tc.want[0]) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
