package dnsfilter

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// A sandbox chooses the case of every letter of a name it asks for; forwarded as asked, each
// letter is a bit sent upstream under an allowed wildcard, and the brake (which counts every
// spelling as one name) never sees it. Every spelling must reach the upstream in one case, and
// the client must still get its own spelling back.
func TestUpstreamSeesOneSpelling(t *testing.T) {
	spec := strings.Replace(basicSpec, "grace: 10s", "grace: 10s\n    wildcardQueriesPerMinute: 1", 1)
	h := newHarness(t, spec, nil)
	h.up.setA("data.zone.example", 60, "198.18.5.1")
	h.up.setA("exact.zone.example", 60, "198.18.5.2")
	spellings := []string{"data.zone.example", "DATA.zone.example", "DaTa.ZoNe.ExAmPlE", "dATA.ZONE.EXAMPLE", "Data.zone.example."}
	for _, network := range []string{"udp", "tcp"} {
		for _, name := range spellings {
			r := h.ask(t, network, name, dns.TypeA)
			if r.Rcode != dns.RcodeSuccess {
				t.Fatalf("%s over %s: got %s, want NOERROR (one name, one token)", name, network, dns.RcodeToString[r.Rcode])
			}
			if got := r.Question[0].Name; got != dns.Fqdn(name) {
				t.Errorf("%s: question came back as %q, want the client's spelling", name, got)
			}
			for _, rr := range r.Answer {
				if rr.Header().Name != dns.Fqdn(name) {
					t.Errorf("%s: answer owner %q, want the client's spelling %q", name, rr.Header().Name, dns.Fqdn(name))
				}
			}
		}
	}
	// An exact name is forwarded in one case too: the channel is the spelling, not the brake.
	h.ask(t, "udp", "EXACT.Zone.Example", dns.TypeA)
	for _, n := range []string{"data.zone.example", "exact.zone.example"} {
		qs := h.up.queries(n)
		if len(qs) == 0 {
			t.Fatalf("%s never reached the upstream", n)
		}
		for _, q := range qs {
			if q.raw != dns.CanonicalName(q.raw) {
				t.Errorf("upstream received %q, want it in canonical case %q", q.raw, dns.CanonicalName(q.raw))
			}
		}
	}
	// A second name under the wildcard is new and the bucket is empty, whatever its case.
	h.up.setA("more.zone.example", 60, "198.18.5.1")
	for _, name := range []string{"MORE.zone.example", "more.zone.example"} {
		if r := h.ask(t, "udp", name, dns.TypeA); r.Rcode == dns.RcodeSuccess {
			t.Errorf("%s: got NOERROR, want the brake to stop a second new name", name)
		}
	}
}

// The proxy's resolver asks upstream through Lookup: the spelling must not leave there either.
func TestLookupSendsCanonicalCase(t *testing.T) {
	up := startUpstream(t)
	up.setA("MiXeD.zone.example", 60, "198.18.5.1")
	l, err := NewLookup([]netip.AddrPort{up.addr}, "", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	addrs, _, err := l.LookupTTL(context.Background(), "MiXeD.ZONE.example", false)
	if err != nil || len(addrs) != 1 {
		t.Fatalf("LookupTTL: got %v, %v; want one address", addrs, err)
	}
	for _, q := range up.queries("mixed.zone.example") {
		if q.raw != "mixed.zone.example." {
			t.Errorf("upstream received %q, want %q", q.raw, "mixed.zone.example.")
		}
	}
}

// One brake for the filter and the proxy's resolver: names the proxy resolves for the sandbox
// spend the wildcard's tokens as the sandbox's own queries do, in any spelling, and the
// label-length limit holds on both paths.
func TestBrakeSharedWithResolver(t *testing.T) {
	spec := strings.Replace(basicSpec, "grace: 10s", "grace: 10s\n    maxLabelLength: 12\n    wildcardQueriesPerMinute: 3", 1)
	clock := &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	brake := NewBrake(clock.now)
	h := newHarness(t, spec, func(c *Config) { c.Brake = brake; c.Now = clock.now })
	pol := h.f.cfg.Policy.Current()
	for i, name := range []string{"a.zone.example", "B.zone.example", "c.ZONE.example"} {
		if err := brake.Admit(pol, name); err != nil {
			t.Fatalf("name %d (%s) within the rate: %v", i, name, err)
		}
	}
	// Spellings of admitted names are the same names: free.
	for _, name := range []string{"A.zone.example", "b.zone.example", "C.Zone.Example"} {
		if err := brake.Admit(pol, name); err != nil {
			t.Errorf("%s, a spelling of an admitted name: %v", name, err)
		}
	}
	if err := brake.Admit(pol, "d.zone.example"); !errors.Is(err, ErrBraked) {
		t.Errorf("fourth new name through the resolver: got %v, want ErrBraked", err)
	}
	h.up.setA("e.zone.example", 60, "198.18.5.1")
	if r := h.ask(t, "udp", "e.zone.example", dns.TypeA); r.Rcode == dns.RcodeSuccess {
		t.Error("the resolver spent the bucket, yet the filter admitted a new name")
	}
	if len(h.up.queries("e.zone.example")) != 0 {
		t.Error("the braked name reached the upstream")
	}
	if err := brake.Admit(pol, "abcdefghijklm.zone.example"); !errors.Is(err, ErrBraked) {
		t.Errorf("13-byte label through the resolver: got %v, want ErrBraked", err)
	}
	// Exact names, names the policy does not allow and addresses are not the brake's business.
	for _, name := range []string{"exact.zone.example", "allowed.example", "other.example", "198.18.5.1"} {
		if err := brake.Admit(pol, name); err != nil {
			t.Errorf("%s: got %v, want nil", name, err)
		}
	}
	clock.advance(time.Minute)
	if err := brake.Admit(pol, "d.zone.example"); err != nil {
		t.Errorf("after a minute: %v", err)
	}
}

// Report mode never refuses, on the resolver path too.
func TestBrakeReportMode(t *testing.T) {
	spec := "  mode: report\n" + strings.Replace(basicSpec, "grace: 10s", "grace: 10s\n    wildcardQueriesPerMinute: 1", 1)
	pol := testPolicy(t, spec)
	b := NewBrake(nil)
	for i := range 5 {
		if err := b.Admit(pol, fmt.Sprintf("n%d.zone.example", i)); err != nil {
			t.Errorf("report mode: %v", err)
		}
	}
}
