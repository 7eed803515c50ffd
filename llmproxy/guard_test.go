package llmproxy

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/airlock-dev/airlock/egress"
)

// fakeDNS is a Go resolver whose queries are answered in-process from answers (A and AAAA
// records by family, TTL 0); nothing reaches the network.
func fakeDNS(answers map[string][]netip.Addr) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		c, s := net.Pipe() // not a PacketConn: the resolver speaks DNS over TCP framing
		go serveDNS(s, answers)
		return c, nil
	}}
}

// serveDNS answers length-prefixed queries on c until it is closed.
func serveDNS(c net.Conn, answers map[string][]netip.Addr) {
	defer c.Close()
	for {
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return
		}
		q := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := io.ReadFull(c, q); err != nil {
			return
		}
		resp, err := dnsAnswer(q, answers)
		if err != nil {
			return
		}
		if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(resp))), resp...)); err != nil {
			return
		}
	}
}

func dnsAnswer(query []byte, answers map[string][]netip.Addr) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true})
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(q); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	rh := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET}
	for _, a := range answers[strings.TrimSuffix(q.Name.String(), ".")] {
		switch {
		case q.Type == dnsmessage.TypeA && a.Is4():
			err = b.AResource(rh, dnsmessage.AResource{A: a.As4()})
		case q.Type == dnsmessage.TypeAAAA && a.Is6():
			err = b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: a.As16()})
		}
		if err != nil {
			return nil, err
		}
	}
	return b.Finish()
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
		want          error // nil: the first address is dialled
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
		{name: "own listener", answer: []string{"198.18.0.10", "198.18.0.5"}, allowInternal: true, want: egress.ErrSelfAddress},
		{name: "own listener, IPv4-mapped", answer: []string{"::ffff:198.18.0.5"}, allowInternal: true, want: egress.ErrSelfAddress},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			answer := map[string][]netip.Addr{}
			for _, a := range tc.answer {
				answer["provider.test"] = append(answer["provider.test"], netip.MustParseAddr(a))
			}
			rec := &dialRecorder{}
			op, err := egress.NewOperator(egress.Config{Resolver: fakeDNS(answer), Dial: rec.dial})
			if err != nil {
				t.Fatal(err)
			}
			op.Self().Add(netip.MustParseAddrPort("198.18.0.5:8080"))
			tr := &transports{op: op}
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
