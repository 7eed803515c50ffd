package dnsfilter

import (
	"fmt"
	"net"
	"sync/atomic"
	"testing"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// swappablePolicy is a policy source whose policy a test replaces, as a reload does.
type swappablePolicy struct{ p atomic.Pointer[policy.Policy] }

func (s *swappablePolicy) Current() *policy.Policy { return s.p.Load() }

func TestCachedDecisionFollowsPolicyReload(t *testing.T) {
	src := &swappablePolicy{}
	src.p.Store(testPolicy(t, basicSpec))
	h := newHarness(t, basicSpec, func(c *Config) { c.Policy = src })
	h.up.setA("allowed.example", 60, "198.18.8.1")
	for range 2 { // the second answer comes from the cached decision
		if r := h.ask(t, "udp", "allowed.example", dns.TypeA); r.Rcode != dns.RcodeSuccess {
			t.Fatalf("before reload: rcode %s, want NOERROR", dns.RcodeToString[r.Rcode])
		}
	}
	src.p.Store(testPolicy(t, `  egress:
    - name: other
      hosts: ["db.example"]
      ports: [5432]
`))
	if r := h.ask(t, "udp", "allowed.example", dns.TypeA); r.Rcode != dns.RcodeRefused {
		t.Fatalf("after reload: rcode %s, want REFUSED (the new policy no longer names it)", dns.RcodeToString[r.Rcode])
	}
	if ev := h.audit.last(t); ev.Decision != audit.DecisionDeny || ev.Reason != string(policy.ReasonNoRule) {
		t.Errorf("after reload: audit %s/%s, want deny/%s", ev.Decision, ev.Reason, policy.ReasonNoRule)
	}
}

func TestDecisionCacheStaysBoundedAndCorrect(t *testing.T) {
	pol := testPolicy(t, basicSpec)
	var d decisions
	for i := range maxCachedDecisions + 10 {
		name := fmt.Sprintf("n%d.example.", i)
		if nd := d.decide(pol, name); nd.Allowed() {
			t.Fatalf("%s: allowed, want denied", name)
		}
		if n := d.cur.Load().n.Load(); n > maxCachedDecisions {
			t.Fatalf("cache holds %d decisions, want at most %d", n, maxCachedDecisions)
		}
	}
	for range 2 {
		if nd := d.decide(pol, "allowed.example."); !nd.Allowed() || len(nd.Ports) != 1 || nd.Ports[0] != 443 {
			t.Fatalf("allowed.example: got %+v, want allowed on 443", nd)
		}
	}
}

func TestPlainIfBound(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	if _, ok := plainIfBound(pc).(boundUDPConn); !ok {
		t.Errorf("a socket bound to 127.0.0.1: got %T, want boundUDPConn", plainIfBound(pc))
	}
	wrapped := boundUDPConn{pc.(*net.UDPConn)}
	if got := plainIfBound(wrapped); got != net.PacketConn(wrapped) {
		t.Errorf("a socket that is not a *net.UDPConn: got %T, want it unchanged", got)
	}
}
