package dnsfilter

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

func TestCNAMEChainBelongsToAskedName(t *testing.T) {
	h := newHarness(t, basicSpec, nil)
	h.up.set("alias.example", func(req *dns.Msg, _ string, _ int) *dns.Msg {
		m := new(dns.Msg)
		m.SetReply(req)
		hdr := dns.RR_Header{Name: "alias.example.", Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: 300}
		m.Answer = append(m.Answer, &dns.CNAME{Hdr: hdr, Target: "edge.cdn.other."})
		hdr.Name, hdr.Rrtype = "edge.cdn.other.", dns.TypeCNAME
		m.Answer = append(m.Answer, &dns.CNAME{Hdr: hdr, Target: "node.cdn.other."})
		m.Answer = append(m.Answer, addrRR("node.cdn.other.", dns.TypeA, 20, "198.18.0.77")...)
		// A record of a name off the chain: an upstream smuggling an address.
		m.Answer = append(m.Answer, addrRR("evil.other.", dns.TypeA, 20, "198.18.0.66")...)
		return m
	})
	r := h.ask(t, "udp", "alias.example", dns.TypeA)
	if got := answerAddrs(r); !slices.Equal(got, []string{"198.18.0.77"}) || len(r.Answer) != 3 {
		t.Fatalf("answer: got %v (%d records), want the chain of two CNAMEs and 198.18.0.77", got, len(r.Answer))
	}
	a := netip.MustParseAddr("198.18.0.77")
	if !h.f.Resolved("alias.example", a) {
		t.Error("Resolved(alias.example): got false, want true (the addresses belong to the asked name)")
	}
	if h.f.Resolved("node.cdn.other", a) || h.f.Resolved("edge.cdn.other", a) {
		t.Error("Resolved(CNAME target): got true, want false")
	}
	calls := h.am.snapshot()
	if len(calls) != 1 || calls[0].addr != a || !slices.Equal(calls[0].ports, []uint16{443}) {
		t.Errorf("allow map: got %+v, want only 198.18.0.77 with alias.example's port 443", calls)
	}
	// Asking for the target itself is decided on its own name.
	if r := h.ask(t, "udp", "node.cdn.other", dns.TypeA); r.Rcode != dns.RcodeRefused {
		t.Errorf("CNAME target asked directly: got %s, want REFUSED", dns.RcodeToString[r.Rcode])
	}
}

func TestInternalAddressesLeftOut(t *testing.T) {
	h := newHarness(t, basicSpec, nil)
	h.up.setA("mixed.example", 30, "127.0.0.1", "198.18.0.10", "169.254.169.254", "10.0.0.1")
	h.up.setA("mixed.example", 30, "127.0.0.1", "198.18.0.10", "169.254.169.254", "10.0.0.1", "::ffff:127.0.0.1", "2001:db8::10")
	r := h.ask(t, "udp", "mixed.example", dns.TypeA)
	if got := answerAddrs(r); !slices.Equal(got, []string{"198.18.0.10"}) {
		t.Errorf("A: got %v, want only the public address", got)
	}
	r = h.ask(t, "udp", "mixed.example", dns.TypeAAAA)
	if got := answerAddrs(r); !slices.Equal(got, []string{"2001:db8::10"}) {
		t.Errorf("AAAA: got %v, want only 2001:db8::10", got)
	}
	for _, c := range h.am.snapshot() {
		if policyClass(c.addr) != "public" {
			t.Errorf("allow map got internal address %v", c.addr)
		}
	}
}

func TestPerNameCapEvictsLeastRecentlyAnswered(t *testing.T) {
	spec := strings.Replace(basicSpec, "grace: 10s", "grace: 10s\n    maxIPsPerName: 2", 1)
	h := newHarness(t, spec, nil)
	// Each query gets the next address: a rotating DNS load balancer.
	h.up.set("allowed.example", func(req *dns.Msg, _ string, n int) *dns.Msg {
		return addrAnswer(req, 60, netip.AddrFrom4([4]byte{198, 18, 2, byte(n + 1)}).String())
	})
	for range 3 {
		h.ask(t, "udp", "allowed.example", dns.TypeA)
		h.clock.advance(time.Second)
	}
	a1, a2, a3 := netip.MustParseAddr("198.18.2.1"), netip.MustParseAddr("198.18.2.2"), netip.MustParseAddr("198.18.2.3")
	if h.f.Resolved("allowed.example", a1) || !h.f.Resolved("allowed.example", a2) || !h.f.Resolved("allowed.example", a3) {
		t.Errorf("Resolved a1,a2,a3: got %v %v %v, want false true true", h.f.Resolved("allowed.example", a1),
			h.f.Resolved("allowed.example", a2), h.f.Resolved("allowed.example", a3))
	}
	calls := h.am.snapshot()
	var revokes []allowCall
	for _, c := range calls {
		if c.revoke {
			revokes = append(revokes, c)
		}
	}
	if len(revokes) != 1 || revokes[0].addr != a1 || !slices.Equal(revokes[0].ports, []uint16{443}) {
		t.Errorf("revokes: got %+v, want 198.18.2.1 port 443 once", revokes)
	}
	// The revoke comes before the new address is allowed.
	if i := slices.IndexFunc(calls, func(c allowCall) bool { return c.revoke }); i < 0 || calls[i+1].addr != a3 {
		t.Errorf("calls: got %+v, want the revoke of a1 right before Allow a3", calls)
	}

	// An answer larger than the cap on its own: the client gets only the first two addresses.
	h.up.setA("big.example", 60, "198.18.3.1", "198.18.3.2", "198.18.3.3")
	r := h.ask(t, "udp", "big.example", dns.TypeA)
	if got := answerAddrs(r); !slices.Equal(got, []string{"198.18.3.1", "198.18.3.2"}) {
		t.Errorf("capped answer: got %v, want the first two", got)
	}
}

func TestEvictionKeepsPortsAnotherNameHolds(t *testing.T) {
	spec := strings.Replace(basicSpec, "grace: 10s", "grace: 10s\n    maxIPsPerName: 1", 1)
	h := newHarness(t, spec, nil)
	h.up.setA("alias.example", 60, "198.18.4.1")
	h.up.set("allowed.example", func(req *dns.Msg, _ string, n int) *dns.Msg {
		return addrAnswer(req, 60, []string{"198.18.4.1", "198.18.4.2"}[min(n, 1)])
	})
	h.ask(t, "udp", "alias.example", dns.TypeA)
	h.ask(t, "udp", "allowed.example", dns.TypeA)
	h.ask(t, "udp", "allowed.example", dns.TypeA) // evicts 198.18.4.1 from allowed.example
	for _, c := range h.am.snapshot() {
		if c.revoke {
			t.Errorf("got %+v; want no revoke: alias.example still holds 198.18.4.1 on port 443", c)
		}
	}
	if !h.f.Resolved("alias.example", netip.MustParseAddr("198.18.4.1")) || h.f.Resolved("allowed.example", netip.MustParseAddr("198.18.4.1")) {
		t.Error("Resolved: want 198.18.4.1 for alias.example only")
	}
}

func TestExfiltrationBrake(t *testing.T) {
	spec := strings.Replace(basicSpec, "grace: 10s", "grace: 10s\n    maxLabelLength: 12\n    wildcardQueriesPerMinute: 3", 1)
	h := newHarness(t, spec, nil)
	for _, n := range []string{"a.zone.example", "b.zone.example", "c.zone.example", "d.zone.example", "exact.zone.example",
		"x.y.zone.example", "abcdefghijklm.zone.example"} {
		h.up.setA(n, 60, "198.18.5.1")
	}
	ok := func(name string) bool {
		t.Helper()
		r := h.ask(t, "udp", name, dns.TypeA)
		return r.Rcode == dns.RcodeSuccess
	}
	if ok("abcdefghijklm.zone.example") {
		t.Error("a 13-byte label under the wildcard: got NOERROR, want REFUSED")
	}
	if e := h.audit.last(t); e.Reason != string(policy.ReasonLabelTooLong) {
		t.Errorf("audit reason: got %q, want %q", e.Reason, policy.ReasonLabelTooLong)
	}
	if len(h.up.queries("abcdefghijklm.zone.example")) != 0 {
		t.Error("the braked name reached the upstream")
	}
	for _, n := range []string{"a.zone.example", "b.zone.example", "c.zone.example"} {
		if !ok(n) {
			t.Errorf("%s: refused within the rate", n)
		}
	}
	if ok("d.zone.example") {
		t.Error("fourth new name within a minute: got NOERROR, want REFUSED")
	}
	if e := h.audit.last(t); e.Reason != string(policy.ReasonRateLimited) || e.Decision != audit.DecisionDeny {
		t.Errorf("audit: got %+v, want deny rate_limited", e)
	}
	if len(h.up.queries("d.zone.example")) != 0 {
		t.Error("the rate-limited name reached the upstream")
	}
	// Names already admitted, and exact hosts, are not braked.
	if !ok("a.zone.example") || !ok("exact.zone.example") {
		t.Error("a repeated name or an exact host was braked")
	}
	h.clock.advance(time.Minute)
	if !ok("d.zone.example") {
		t.Error("after a minute: got REFUSED, want NOERROR")
	}
}

func TestReservedLLMName(t *testing.T) {
	for _, tc := range []struct {
		name  string
		llm   netip.AddrPort
		rcode int
		a     []string
		aaaa  []string
	}{
		{"specific address", netip.MustParseAddrPort("198.18.6.1:4000"), dns.RcodeSuccess, []string{"198.18.6.1"}, nil},
		{"loopback", netip.MustParseAddrPort("127.0.0.1:4000"), dns.RcodeSuccess, []string{"127.0.0.1"}, nil},
		{"ipv6", netip.MustParseAddrPort("[2001:db8::4]:4000"), dns.RcodeSuccess, nil, []string{"2001:db8::4"}},
		// Unspecified: the address the query arrived on (the filter listens on 127.0.0.1).
		{"unspecified", netip.MustParseAddrPort("0.0.0.0:4000"), dns.RcodeSuccess, []string{"127.0.0.1"}, nil},
		{"off", netip.AddrPort{}, dns.RcodeNameError, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, basicSpec, func(c *Config) { c.LLMAddr = tc.llm })
			for qt, want := range map[uint16][]string{dns.TypeA: tc.a, dns.TypeAAAA: tc.aaaa} {
				r := h.ask(t, "udp", "LLM.airlock.internal", qt)
				if r.Rcode != tc.rcode || !slices.Equal(answerAddrs(r), want) {
					t.Errorf("%s: got %s %v, want %s %v", dns.TypeToString[qt], dns.RcodeToString[r.Rcode], answerAddrs(r),
						dns.RcodeToString[tc.rcode], want)
				}
			}
			if h.up.total() != 0 || len(h.am.snapshot()) != 0 {
				t.Error("the reserved name was forwarded or inserted")
			}
			if e := h.audit.last(t); e.Reason != string(policy.ReasonReservedName) {
				t.Errorf("audit reason: got %q, want %q", e.Reason, policy.ReasonReservedName)
			}
		})
	}
}

func TestReportModeForwardsWithoutInserting(t *testing.T) {
	h := newHarness(t, "  mode: report\n"+basicSpec, nil)
	h.up.setA("denied.example", 30, "198.18.0.20", "127.0.0.1")
	r := h.ask(t, "udp", "denied.example", dns.TypeA)
	if r.Rcode != dns.RcodeSuccess || !slices.Equal(answerAddrs(r), []string{"198.18.0.20"}) {
		t.Errorf("got %s %v, want NOERROR with the public address", dns.RcodeToString[r.Rcode], answerAddrs(r))
	}
	e := h.audit.last(t)
	if e.Decision != audit.DecisionReport || e.Reason != "no_rule" || !strings.HasPrefix(e.Detail, "would deny: ") {
		t.Errorf("audit: got %+v, want report no_rule with a would-deny detail", e)
	}
	if len(h.am.snapshot()) != 0 || h.f.Resolved("denied.example", netip.MustParseAddr("198.18.0.20")) {
		t.Error("report mode inserted a name enforce would deny")
	}
	// An allowed name in report mode is recorded as in enforce mode.
	h.up.setA("allowed.example", 30, "198.18.0.10")
	h.ask(t, "udp", "allowed.example", dns.TypeA)
	if len(h.am.snapshot()) != 1 {
		t.Errorf("allow map: got %+v, want the allowed name's address", h.am.snapshot())
	}
	// A name a rule names but a brake would stop: answered, recorded, reported.
	long := strings.Repeat("x", 60) + ".zone.example"
	h.up.setA(long, 30, "198.18.0.11")
	if r := h.ask(t, "udp", long, dns.TypeA); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Errorf("braked name in report mode: got %s %v, want NOERROR and its address", dns.RcodeToString[r.Rcode], r.Answer)
	}
	if e := h.audit.last(t); e.Decision != audit.DecisionReport || e.Reason != string(policy.ReasonLabelTooLong) {
		t.Errorf("audit: got %+v, want report label_too_long", e)
	}
	if !h.f.Resolved(long, netip.MustParseAddr("198.18.0.11")) {
		t.Error("braked name in report mode: not recorded, want recorded (a rule names it)")
	}
}

func TestCloseIsIdempotentAndServeAfterCloseFails(t *testing.T) {
	h := newHarness(t, basicSpec, nil)
	pc, l, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.f.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := h.f.Serve(pc, l); err != ErrClosed {
		t.Errorf("Serve after Close: got %v, want ErrClosed", err)
	}
}

func TestPolicyChangedRevokes(t *testing.T) {
	h := newHarness(t, basicSpec, nil)
	h.up.setA("allowed.example", 60, "198.18.8.1")
	h.up.setA("db.example", 60, "198.18.8.2")
	h.up.setA("alias.example", 60, "198.18.8.1")
	for _, n := range []string{"allowed.example", "db.example", "alias.example"} {
		h.ask(t, "udp", n, dns.TypeA)
	}
	// The new policy drops db.example and allowed.example; alias.example keeps 198.18.8.1:443.
	next := testPolicy(t, `  egress:
    - name: web
      hosts: ["alias.example"]
      ports: [443]
`)
	n, err := h.f.PolicyChanged(next)
	if err != nil || n != 2 {
		t.Fatalf("PolicyChanged: got %d, %v; want 2 entries narrowed", n, err)
	}
	var revokes []allowCall
	for _, c := range h.am.snapshot() {
		if c.revoke {
			revokes = append(revokes, c)
		}
	}
	if len(revokes) != 1 || revokes[0].addr != netip.MustParseAddr("198.18.8.2") || !slices.Equal(revokes[0].ports, []uint16{5432}) {
		t.Errorf("revokes: got %+v, want only 198.18.8.2 port 5432 (alias.example still holds 198.18.8.1:443)", revokes)
	}
	if h.f.Resolved("db.example", netip.MustParseAddr("198.18.8.2")) || h.f.Resolved("allowed.example", netip.MustParseAddr("198.18.8.1")) {
		t.Error("Resolved: got true for a name the new policy denies")
	}
	if !h.f.Resolved("alias.example", netip.MustParseAddr("198.18.8.1")) {
		t.Error("Resolved(alias.example): got false, want true")
	}
}
