package dnsfilter

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

func TestAllowedAnswerIsInsertedWithPortsAndExpiry(t *testing.T) {
	h := newHarness(t, basicSpec, nil)
	h.up.setA("allowed.example", 30, "198.18.0.10", "198.18.0.11")
	h.up.setA("db.example", 1, "198.18.0.12")

	// Mixed case and a chosen ID come back as sent (RFC 1035 §4.1.1; 0x20 case randomisation).
	m := question("AlLoWeD.ExAmPlE", dns.TypeA)
	m.Id = 4242
	r, err := h.exchange("udp", m)
	if err != nil {
		t.Fatal(err)
	}
	if r.Id != 4242 || r.Question[0].Name != "AlLoWeD.ExAmPlE." || r.Rcode != dns.RcodeSuccess {
		t.Fatalf("got id %d question %q rcode %s, want 4242 %q NOERROR", r.Id, r.Question[0].Name, dns.RcodeToString[r.Rcode], "AlLoWeD.ExAmPlE.")
	}
	if got, want := answerAddrs(r), []string{"198.18.0.10", "198.18.0.11"}; !slices.Equal(got, want) {
		t.Errorf("answer: got %v, want %v", got, want)
	}
	until := h.clock.now().Add(30*time.Second + 10*time.Second)
	calls := h.am.snapshot()
	if len(calls) != 2 {
		t.Fatalf("allow map calls: got %+v, want two", calls)
	}
	for i, want := range []string{"198.18.0.10", "198.18.0.11"} {
		c := calls[i]
		if c.revoke || c.addr != netip.MustParseAddr(want) || !slices.Equal(c.ports, []uint16{443}) || !c.until.Equal(until) {
			t.Errorf("call %d: got %+v, want Allow %s [443] until %v", i, c, want, until)
		}
	}
	if !h.f.Resolved("allowed.example", netip.MustParseAddr("198.18.0.10")) || !h.f.Resolved("ALLOWED.example.", netip.MustParseAddr("::ffff:198.18.0.11")) {
		t.Error("Resolved: want true for the answered addresses")
	}
	if h.f.Resolved("db.example", netip.MustParseAddr("198.18.0.10")) || h.f.Resolved("allowed.example", netip.MustParseAddr("198.18.0.12")) {
		t.Error("Resolved: want false for an address of another name")
	}

	// TTL 1s is raised to minTTL 5s in the answer and in the map; tcp rule ports apply.
	r = h.ask(t, "tcp", "db.example", dns.TypeA)
	if len(r.Answer) != 1 || r.Answer[0].Header().Ttl != 5 {
		t.Fatalf("db answer: got %v, want one record with TTL 5", r.Answer)
	}
	c := h.am.snapshot()[2]
	if !slices.Equal(c.ports, []uint16{5432}) || !c.until.Equal(h.clock.now().Add(15*time.Second)) {
		t.Errorf("db allow: got %+v, want ports [5432] until now+15s", c)
	}

	// After TTL + grace the name no longer counts as resolved.
	h.clock.advance(41 * time.Second)
	if h.f.Resolved("allowed.example", netip.MustParseAddr("198.18.0.10")) {
		t.Error("Resolved after expiry: got true, want false")
	}
	e := h.audit.last(t)
	if e.Kind != audit.KindDNS || e.Decision != audit.DecisionAllow || e.Rule != "db" || e.Destination != "db.example" || e.Addr != h.up.addr.String() {
		t.Errorf("audit: got %+v, want dns allow rule db for db.example via the upstream", e)
	}
}

func TestDeniedNameIsNeverForwarded(t *testing.T) {
	for _, tc := range []struct {
		name, onDeny string
		rcode        int
	}{
		{"refused by default", "", dns.RcodeRefused},
		{"nxdomain", "onDeny: nxdomain", dns.RcodeNameError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := strings.Replace(basicSpec, "minTTL: 5s", "minTTL: 5s\n    "+tc.onDeny, 1)
			h := newHarness(t, spec, nil)
			h.up.setA("denied.example", 30, "198.18.0.20")
			for _, network := range []string{"udp", "tcp"} {
				for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeTXT} {
					r := h.ask(t, network, "denied.example", qt)
					if r.Rcode != tc.rcode || len(r.Answer) != 0 {
						t.Errorf("%s %s: got %s with %d answers, want %s and none", network, dns.TypeToString[qt],
							dns.RcodeToString[r.Rcode], len(r.Answer), dns.RcodeToString[tc.rcode])
					}
				}
			}
			// The apex of a wildcard is not allowed, nor a lookalike.
			for _, n := range []string{"zone.example", "evilzone.example", "allowed.example.evil"} {
				if r := h.ask(t, "udp", n, dns.TypeA); r.Rcode != tc.rcode {
					t.Errorf("%s: got %s, want %s", n, dns.RcodeToString[r.Rcode], dns.RcodeToString[tc.rcode])
				}
			}
			if n := h.up.total(); n != 0 {
				t.Errorf("upstream received %d queries (%v), want none", n, h.up.queries("denied.example"))
			}
			if calls := h.am.snapshot(); len(calls) != 0 {
				t.Errorf("allow map calls: got %+v, want none", calls)
			}
			e := h.audit.last(t)
			if e.Decision != audit.DecisionDeny || e.Reason != "no_rule" {
				t.Errorf("audit: got %+v, want deny no_rule", e)
			}
			if got := testutil.ToFloat64(h.f.metrics.queries.WithLabelValues("deny", "no_rule", "")); got != 9 {
				t.Errorf("metric deny/no_rule: got %v, want 9", got)
			}
		})
	}
}

func TestAnswerWaitsForAllowMap(t *testing.T) {
	h := newHarness(t, basicSpec, nil)
	h.am.gate, h.am.entered = make(chan struct{}), make(chan allowCall, 4)
	h.up.setA("allowed.example", 30, "198.18.0.10")

	type result struct {
		r         *dns.Msg
		err       error
		allowDone int // Allow calls completed when the answer arrived
	}
	got := make(chan result, 1)
	go func() {
		r, err := h.exchange("udp", question("allowed.example", dns.TypeA))
		got <- result{r, err, h.am.allowsDone()}
	}()
	c := <-h.am.entered
	if c.addr != netip.MustParseAddr("198.18.0.10") {
		t.Fatalf("Allow: got %v, want 198.18.0.10", c.addr)
	}
	// While Allow blocks, no answer may reach the client. (A bounded wait for something that
	// must not happen; the check after release below holds regardless of timing.)
	select {
	case res := <-got:
		t.Fatalf("the client got an answer while Allow was blocked: %v %v", res.r, res.err)
	case <-time.After(200 * time.Millisecond):
	}
	close(h.am.gate)
	res := <-got
	if res.err != nil {
		t.Fatal(res.err)
	}
	if res.allowDone != 1 || !slices.Equal(answerAddrs(res.r), []string{"198.18.0.10"}) {
		t.Errorf("got answer %v with %d Allow calls done, want 198.18.0.10 after 1", answerAddrs(res.r), res.allowDone)
	}
}

func TestUpstreamFailureIsServfailAndInsertsNothing(t *testing.T) {
	h := newHarness(t, basicSpec, func(c *Config) { c.Timeout = 300 * time.Millisecond })
	// The upstream drops the query: the filter times out.
	h.up.set("allowed.example", func(*dns.Msg, string, int) *dns.Msg { return nil })
	// The upstream answers SERVFAIL itself.
	h.up.set("alias.example", func(req *dns.Msg, _ string, _ int) *dns.Msg {
		m := new(dns.Msg)
		return m.SetRcode(req, dns.RcodeServerFailure)
	})
	r := h.ask(t, "udp", "allowed.example", dns.TypeA)
	if r.Rcode != dns.RcodeServerFailure || len(r.Answer) != 0 {
		t.Errorf("timeout: got %s with %v, want SERVFAIL and nothing", dns.RcodeToString[r.Rcode], r.Answer)
	}
	e := h.audit.last(t)
	if e.Decision != audit.DecisionDeny || e.Reason != string(policy.ReasonUpstreamFailed) || e.Error == "" {
		t.Errorf("audit: got %+v, want deny upstream_failed with an error", e)
	}
	if r := h.ask(t, "udp", "alias.example", dns.TypeA); r.Rcode != dns.RcodeServerFailure {
		t.Errorf("upstream SERVFAIL: got %s, want SERVFAIL", dns.RcodeToString[r.Rcode])
	}
	if calls := h.am.snapshot(); len(calls) != 0 {
		t.Errorf("allow map calls: got %+v, want none", calls)
	}

	// No upstream listening at all (a closed port): SERVFAIL too.
	h2 := newHarness(t, basicSpec, func(c *Config) {
		c.Upstreams = []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:1")}
		c.Timeout = 300 * time.Millisecond
	})
	if r := h2.ask(t, "udp", "allowed.example", dns.TypeA); r.Rcode != dns.RcodeServerFailure {
		t.Errorf("no upstream: got %s, want SERVFAIL", dns.RcodeToString[r.Rcode])
	}
}

func TestAllowMapFailureIsServfail(t *testing.T) {
	h := newHarness(t, basicSpec, nil)
	h.am.fail = errTestMap
	h.up.setA("allowed.example", 30, "198.18.0.10")
	r := h.ask(t, "udp", "allowed.example", dns.TypeA)
	if r.Rcode != dns.RcodeServerFailure || len(r.Answer) != 0 {
		t.Errorf("got %s with %v, want SERVFAIL and no answer", dns.RcodeToString[r.Rcode], r.Answer)
	}
	if h.f.Resolved("allowed.example", netip.MustParseAddr("198.18.0.10")) {
		t.Error("Resolved: got true for an address the map refused")
	}
	if e := h.audit.last(t); e.Reason != string(policy.ReasonAllowMapFailed) {
		t.Errorf("audit reason: got %q, want %q", e.Reason, policy.ReasonAllowMapFailed)
	}
}

func TestTruncation(t *testing.T) {
	h := newHarness(t, basicSpec, nil)
	// Upstream: over UDP only a truncated empty answer; the full one over TCP.
	h.up.set("allowed.example", func(req *dns.Msg, network string, _ int) *dns.Msg {
		if network == "udp" {
			m := new(dns.Msg)
			m.SetReply(req)
			m.Truncated = true
			return m
		}
		return addrAnswer(req, 30, "198.18.0.10")
	})
	r := h.ask(t, "udp", "allowed.example", dns.TypeA)
	if r.Truncated || !slices.Equal(answerAddrs(r), []string{"198.18.0.10"}) {
		t.Errorf("got TC=%v %v, want the full TCP answer", r.Truncated, answerAddrs(r))
	}
	var nets []string
	for _, q := range h.up.queries("allowed.example") {
		nets = append(nets, q.network)
	}
	if !slices.Equal(nets, []string{"udp", "tcp"}) {
		t.Errorf("upstream saw %v, want udp then tcp", nets)
	}

	// An answer too big for the client's 512 bytes: TC, and the client's TCP retry gets all.
	var big []string
	for i := range 40 {
		big = append(big, netip.AddrFrom4([4]byte{198, 18, 1, byte(i + 1)}).String())
	}
	h.up.setA("big.example", 30, big...)
	r = h.ask(t, "udp", "big.example", dns.TypeA)
	if !r.Truncated {
		t.Errorf("udp: got TC=false with %d records, want TC", len(r.Answer))
	}
	r = h.ask(t, "tcp", "big.example", dns.TypeA)
	if r.Truncated || len(r.Answer) != 40 {
		t.Errorf("tcp: got TC=%v with %d records, want all 40", r.Truncated, len(r.Answer))
	}
	// With EDNS0 and a 4096-byte buffer, UDP carries it whole.
	m := question("big.example", dns.TypeA)
	m.SetEdns0(4096, false)
	r, err := h.exchange("udp", m)
	if err != nil {
		t.Fatal(err)
	}
	if r.Truncated || len(r.Answer) != 40 || r.IsEdns0() == nil {
		t.Errorf("edns udp: got TC=%v, %d records, OPT %v; want 40 records and an OPT", r.Truncated, len(r.Answer), r.IsEdns0())
	}
}

func TestRefusedTypesAndShapes(t *testing.T) {
	h := newHarness(t, basicSpec, nil)
	h.up.setA("allowed.example", 30, "198.18.0.10")
	for _, qt := range []uint16{dns.TypeANY, dns.TypeAXFR, dns.TypeIXFR} {
		r := h.ask(t, "tcp", "allowed.example", qt)
		if r.Rcode != dns.RcodeRefused {
			t.Errorf("%s: got %s, want REFUSED", dns.TypeToString[qt], dns.RcodeToString[r.Rcode])
		}
	}
	if e := h.audit.last(t); e.Reason != string(policy.ReasonTypeRefused) || e.Decision != audit.DecisionDeny {
		t.Errorf("audit: got %+v, want deny qtype_refused", e)
	}
	m := question("allowed.example", dns.TypeA)
	m.Question[0].Qclass = dns.ClassCHAOS
	if r, err := h.exchange("udp", m); err != nil || r.Rcode != dns.RcodeRefused {
		t.Errorf("class CH: got %v %v, want REFUSED", r, err)
	}
	m = question("allowed.example", dns.TypeA)
	m.SetEdns0(1232, false)
	m.IsEdns0().SetVersion(1)
	if r, err := h.exchange("udp", m); err != nil || r.Rcode != dns.RcodeBadVers {
		t.Errorf("EDNS version 1: got %v %v, want BADVERS", r, err)
	}
	if n := h.up.total(); n != 0 {
		t.Errorf("upstream received %d queries, want none", n)
	}
}

func TestEDNSOptionsNotForwarded(t *testing.T) {
	h := newHarness(t, basicSpec, nil)
	h.up.setA("allowed.example", 30, "198.18.0.10")
	m := question("allowed.example", dns.TypeA)
	m.SetEdns0(1232, true)
	opt := m.IsEdns0()
	opt.Option = append(opt.Option, &dns.EDNS0_LOCAL{Code: 65001, Data: []byte("secret-data-out")},
		&dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, Address: netip.MustParseAddr("198.18.9.0").AsSlice()})
	r, err := h.exchange("udp", m)
	if err != nil || r.Rcode != dns.RcodeSuccess {
		t.Fatalf("got %v %v", r, err)
	}
	qs := h.up.queries("allowed.example")
	if len(qs) != 1 || qs[0].options != 0 {
		t.Errorf("upstream saw %+v, want one query without EDNS0 options", qs)
	}
	if o := r.IsEdns0(); o == nil || len(o.Option) != 0 {
		t.Errorf("reply OPT: got %v, want one without options", o)
	}
}

func TestHTTPSHintsStripped(t *testing.T) {
	h := newHarness(t, basicSpec, nil)
	h.up.set("svc.example", func(req *dns.Msg, _ string, _ int) *dns.Msg {
		m := new(dns.Msg)
		m.SetReply(req)
		hdr := dns.RR_Header{Name: req.Question[0].Name, Rrtype: req.Question[0].Qtype, Class: dns.ClassINET, Ttl: 300}
		kv := []dns.SVCBKeyValue{
			&dns.SVCBAlpn{Alpn: []string{"h2", "h3"}},
			&dns.SVCBIPv4Hint{Hint: []net.IP{net.ParseIP("198.18.7.7").To4()}},
			&dns.SVCBECHConfig{ECH: []byte{1, 2, 3}},
			&dns.SVCBIPv6Hint{Hint: []net.IP{net.ParseIP("2001:db8::7")}},
		}
		svcb := dns.SVCB{Hdr: hdr, Priority: 1, Target: ".", Value: kv}
		if req.Question[0].Qtype == dns.TypeHTTPS {
			m.Answer = append(m.Answer, &dns.HTTPS{SVCB: svcb})
		} else {
			m.Answer = append(m.Answer, &svcb)
		}
		// Additional addresses that never went through the filter.
		m.Extra = append(m.Extra, addrRR("svc.example.", dns.TypeA, 300, "198.18.7.8")...)
		return m
	})
	for _, qt := range []uint16{dns.TypeHTTPS, dns.TypeSVCB} {
		r := h.ask(t, "udp", "svc.example", qt)
		if len(r.Answer) != 1 {
			t.Fatalf("%s: got %v, want one record", dns.TypeToString[qt], r.Answer)
		}
		var kv []dns.SVCBKeyValue
		switch v := r.Answer[0].(type) {
		case *dns.HTTPS:
			kv = v.Value
		case *dns.SVCB:
			kv = v.Value
		}
		if len(kv) != 1 || kv[0].Key() != dns.SVCB_ALPN {
			t.Errorf("%s params: got %v, want alpn only", dns.TypeToString[qt], kv)
		}
		if len(r.Extra) != 0 {
			t.Errorf("%s additional: got %v, want none", dns.TypeToString[qt], r.Extra)
		}
	}
	if calls := h.am.snapshot(); len(calls) != 0 {
		t.Errorf("allow map calls: got %+v, want none (hints are not addresses the filter hands out)", calls)
	}
}
