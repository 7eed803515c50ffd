package proxy

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
)

// dnsBook stands in for the DNS filter's record of which addresses it answered for a name.
type dnsBook struct {
	mu      sync.Mutex
	answers map[string]netip.Addr
}

func (b *dnsBook) Resolved(name string, addr netip.Addr) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.answers[name] == addr
}

func TestTransparentNameAddrs(t *testing.T) {
	od := &origDst{}
	book := &dnsBook{answers: map[string]netip.Addr{}}
	h := newHarness(t, mustPolicy(t, policyDoc("transparent", "enforce", basicEgress)), func(c *Config) {
		c.OriginalDst = od
		c.NameAddrs = book
	})
	h.route(addrPlain, 80, httpServer(t, echo()))
	od.set(netip.MustParseAddrPort("198.18.0.20:80"))
	tests := []struct {
		name   string
		answer netip.Addr // what the DNS filter answered for plain.test
		status int
		reason string
	}{
		{name: "the DNS filter never answered the name with this address", answer: netip.MustParseAddr("198.18.0.99"), status: 403, reason: "original_destination_mismatch"},
		{name: "the DNS filter answered the name with this address", answer: addrPlain, status: 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			book.mu.Lock()
			book.answers["plain.test"] = tc.answer
			book.mu.Unlock()
			resp, body := rawHTTP(t, h.taddr, fmt.Sprintf("GET /p HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", "plain.test"))
			if resp.StatusCode != tc.status {
				t.Fatalf("got %d %s, want %d", resp.StatusCode, body, tc.status)
			}
			if tc.reason != "" {
				if d := deniedJSON(t, body); d.Reason != tc.reason {
					t.Errorf("got reason %q, want %q", d.Reason, tc.reason)
				}
			}
		})
	}
	h.log.wait(t, len(tests))
}
