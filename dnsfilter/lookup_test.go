package dnsfilter

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestLookupTTL: Lookup returns the addresses of the asked family (by record type) with the smallest TTL of
// the chain, a NODATA answer with its SOA's negative TTL, and a missing name as an error.
func TestLookupTTL(t *testing.T) {
	u := startUpstream(t)
	u.setA("svc.test", 120, "198.18.0.10", "198.18.0.11", "2001:db8::10")
	u.setA("mapped.test", 90, "::ffff:127.0.0.1") // an AAAA record of a v4-mapped address
	u.set("alias.test", func(req *dns.Msg, _ string, _ int) *dns.Msg {
		m := new(dns.Msg)
		m.SetReply(req)
		m.Answer = append(m.Answer, &dns.CNAME{Hdr: dns.RR_Header{Name: "alias.test.", Rrtype: dns.TypeCNAME,
			Class: dns.ClassINET, Ttl: 30}, Target: "svc.test."})
		m.Answer = append(m.Answer, addrRR("svc.test.", req.Question[0].Qtype, 120, "198.18.0.10")...)
		if len(m.Answer) == 1 {
			m.Ns = append(m.Ns, &dns.SOA{Hdr: dns.RR_Header{Name: "test.", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 60},
				Ns: "ns.test.", Mbox: "h.test.", Minttl: 45})
		}
		return m
	})
	l, err := NewLookup([]netip.AddrPort{u.addr}, "", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		v6   bool
		want []netip.Addr
		ttl  time.Duration
	}{
		{"svc.test", false, []netip.Addr{netip.MustParseAddr("198.18.0.10"), netip.MustParseAddr("198.18.0.11")}, 120 * time.Second},
		{"svc.test", true, []netip.Addr{netip.MustParseAddr("2001:db8::10")}, 120 * time.Second},
		{"alias.test", false, []netip.Addr{netip.MustParseAddr("198.18.0.10")}, 30 * time.Second},
		{"alias.test", true, nil, 45 * time.Second}, // NODATA: min(SOA TTL 60, MINIMUM 45)
		// The family is the record's: the mapped AAAA is the AAAA answer (unmapped, so the
		// guard sees loopback), never dropped as "not v6" nor moved into the A answer.
		{"mapped.test", true, []netip.Addr{netip.MustParseAddr("127.0.0.1")}, 90 * time.Second},
		{"mapped.test", false, nil, 0},
	} {
		got, ttl, err := l.LookupTTL(ctx, tc.name, tc.v6)
		if err != nil || !slices.Equal(got, tc.want) || ttl != tc.ttl {
			t.Errorf("LookupTTL(%s, v6=%v) = %v, %s, %v; want %v, %s", tc.name, tc.v6, got, ttl, err, tc.want, tc.ttl)
		}
	}
	if _, _, err := l.LookupTTL(ctx, "missing.test", false); err == nil {
		t.Error("a name the upstream does not answer: want an error")
	}
}

// answerLog records the answers the filter shares.
type answerLog struct {
	mu  sync.Mutex
	got []string
}

func (a *answerLog) PutAnswer(name string, v6 bool, addrs []netip.Addr, ttl time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.got = append(a.got, fmt.Sprintf("%s v6=%v %v %s", name, v6, addrs, ttl))
}

func (a *answerLog) shared() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.got)
}

// TestFilterSharesWholeAnswers: the filter hands every address of a forwarded answer to
// Config.Answers, the ones it keeps from the sandbox (internal, no rule) included, so the
// proxy's guard refuses the whole answer as it would refuse a fresh one.
func TestFilterSharesWholeAnswers(t *testing.T) {
	log := &answerLog{}
	h := newHarness(t, basicSpec, func(c *Config) { c.Answers = log })
	h.up.setA("allowed.example", 30, "198.18.0.10", "10.0.0.1")
	r := h.ask(t, "udp", "allowed.example", dns.TypeA)
	if got := answerAddrs(r); slices.Contains(got, "10.0.0.1") {
		t.Fatalf("the sandbox got the internal address: %v", got)
	}
	want := []string{"allowed.example v6=false [198.18.0.10 10.0.0.1] 30s"}
	if got := log.shared(); !slices.Equal(got, want) {
		t.Fatalf("shared %q, want %q", got, want)
	}
}
