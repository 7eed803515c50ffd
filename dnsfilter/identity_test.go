package dnsfilter

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/airlock-dev/airlock/policy"
)

// identitySpec is basicSpec with two identities: reviewer may resolve allowed.example only,
// author has the sandbox's rules.
const identitySpec = basicSpec + `  identities:
    reviewer:
      egress:
        - name: web-read
          hosts: ["allowed.example"]
          ports: [443]
    author: {}
`

// fakeIdentities is the kernel's lookup: each query ID is some identity's, or an error.
type fakeIdentities struct {
	// mu guards byID and asked.
	mu    sync.Mutex
	byID  map[uint16]string // absent: the lookup fails
	asked []identityAsk
}

// identityAsk is one QueryIdentity call.
type identityAsk struct {
	client netip.AddrPort
	id     uint16
	tcp    bool
}

func (f *fakeIdentities) QueryIdentity(client netip.AddrPort, id uint16, tcp bool) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, identityAsk{client, id, tcp})
	name, ok := f.byID[id]
	if !ok {
		return "", errors.New("no record")
	}
	return name, nil
}

func (f *fakeIdentities) calls() []identityAsk {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]identityAsk(nil), f.asked...)
}

// askAs sends a query with message ID id (which the fake maps to an identity) with EDNS0, over
// network, from a socket whose local address it returns.
func (h *harness) askAs(t *testing.T, network string, id uint16, name string) (*dns.Msg, netip.AddrPort) {
	t.Helper()
	m := question(name, dns.TypeA)
	m.Id = id
	m.SetEdns0(1232, false)
	conn, err := net.Dial(network, h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	local := conn.LocalAddr().(interface{ AddrPort() netip.AddrPort }).AddrPort()
	c := &dns.Conn{Conn: conn}
	if err := c.WriteMsg(m); err != nil {
		t.Fatal(err)
	}
	r, err := c.ReadMsg()
	if err != nil {
		t.Fatalf("query %s as %d over %s: %v", name, id, network, err)
	}
	return r, local
}

// TestIdentityQueries: with identities, each query is decided by the policy of the identity
// the kernel says sent it, is audited with it, opens the allow map only for the sandbox's own
// tasks, and is refused (identity_unknown, with an Extended DNS Error) when the sender
// cannot be told.
func TestIdentityQueries(t *testing.T) {
	const (
		idOwn, idReviewer, idAuthor, idUnknown, idStranger uint16 = 1, 2, 3, 4, 5
	)
	ids := &fakeIdentities{byID: map[uint16]string{idOwn: "", idReviewer: "reviewer", idAuthor: "author", idStranger: "stranger"}}
	h := newHarness(t, identitySpec, func(c *Config) { c.Identities = ids })
	h.up.setA("big.example.", 60, "198.18.0.7")
	h.up.setA("allowed.example.", 60, "198.18.0.8")
	tests := []struct {
		name, network, qname string
		id                   uint16
		rcode                int
		identity, reason     string
		allowMap             bool // the answer's address entered the allow map
	}{
		{"reviewer, a name only author may resolve", "udp", "big.example", idReviewer, dns.RcodeRefused, "reviewer", string(policy.ReasonNoRule), false},
		{"reviewer over TCP", "tcp", "big.example", idReviewer, dns.RcodeRefused, "reviewer", string(policy.ReasonNoRule), false},
		{"reviewer, its own name", "udp", "allowed.example", idReviewer, dns.RcodeSuccess, "reviewer", "", false},
		{"author", "udp", "big.example", idAuthor, dns.RcodeSuccess, "author", "", false},
		{"author over TCP", "tcp", "big.example", idAuthor, dns.RcodeSuccess, "author", "", false},
		{"the sandbox's own", "udp", "big.example", idOwn, dns.RcodeSuccess, "", "", true},
		{"no record", "udp", "big.example", idUnknown, dns.RcodeRefused, "", string(policy.ReasonIdentityUnknown), false},
		{"no record, over TCP", "tcp", "allowed.example", idUnknown, dns.RcodeRefused, "", string(policy.ReasonIdentityUnknown), false},
		{"an identity the policy lacks", "udp", "allowed.example", idStranger, dns.RcodeRefused, "", string(policy.ReasonIdentityUnknown), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			upBefore, mapBefore, asksBefore := h.up.total(), len(h.am.snapshot()), len(ids.calls())
			r, local := h.askAs(t, tc.network, tc.id, tc.qname)
			if r.Rcode != tc.rcode {
				t.Fatalf("rcode %s, want %s", dns.RcodeToString[r.Rcode], dns.RcodeToString[tc.rcode])
			}
			asks := ids.calls()[asksBefore:]
			if want := (identityAsk{local, tc.id, tc.network == "tcp"}); len(asks) != 1 || asks[0] != want {
				t.Errorf("lookups %+v, want one %+v", asks, want)
			}
			ev := h.audit.last(t)
			if ev.Identity != tc.identity || (tc.reason != "" && ev.Reason != tc.reason) {
				t.Errorf("audit identity %q reason %q, want %q %q", ev.Identity, ev.Reason, tc.identity, tc.reason)
			}
			if tc.rcode != dns.RcodeSuccess {
				if h.up.total() != upBefore {
					t.Errorf("a refused query was forwarded upstream")
				}
				e := ede(r)
				if len(e) != 1 || e[0].InfoCode != dns.ExtendedErrorCodeBlocked || !strings.Contains(e[0].ExtraText, ": "+tc.reason+": ") {
					t.Fatalf("EDE %v, want Blocked naming %s", e, tc.reason)
				}
				if named := strings.Contains(e[0].ExtraText, "(identity "+tc.identity+")"); named != (tc.identity != "") {
					t.Errorf("EDE %q names the identity: %v, want %v", e[0].ExtraText, named, tc.identity != "")
				}
				return
			}
			if len(r.Answer) != 1 {
				t.Fatalf("answer %v, want one address", r.Answer)
			}
			a, _ := rrAddr(r.Answer[0])
			if got := len(h.am.snapshot()) > mapBefore; got != tc.allowMap {
				t.Errorf("allow map written: %v, want %v", got, tc.allowMap)
			}
			if !h.f.Resolved(tc.qname, a) {
				t.Errorf("Resolved(%s, %v) = false after the answer", tc.qname, a)
			}
		})
	}
	if got := testutil.ToFloat64(h.f.metrics.queries.WithLabelValues("deny", string(policy.ReasonNoRule), "reviewer")); got != 2 {
		t.Errorf("reviewer's refusals counted %v, want 2", got)
	}
	if got := h.countQueries(t, "allow", "author"); got != 2 {
		t.Errorf("author's answers counted %v, want 2", got)
	}
}

// countQueries sums airlock_dns_queries_total over the reasons of decision and identity.
func (h *harness) countQueries(t *testing.T, decision, identity string) float64 {
	t.Helper()
	fams, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, fam := range fams {
		if fam.GetName() != "airlock_dns_queries_total" {
			continue
		}
		for _, m := range fam.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["decision"] == decision && labels["identity"] == identity {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// TestIdentityLookupOnlyWithIdentities: a policy without identities never asks the kernel,
// and its queries open the allow map as before.
func TestIdentityLookupOnlyWithIdentities(t *testing.T) {
	ids := &fakeIdentities{}
	h := newHarness(t, basicSpec, func(c *Config) { c.Identities = ids })
	h.up.setA("allowed.example.", 60, "198.18.0.8")
	if r, _ := h.askAs(t, "udp", 9, "allowed.example"); r.Rcode != dns.RcodeSuccess {
		t.Fatalf("rcode %s, want NOERROR", dns.RcodeToString[r.Rcode])
	}
	if n := len(ids.calls()); n != 0 {
		t.Errorf("%d identity lookups without identities, want none", n)
	}
	if len(h.am.snapshot()) == 0 {
		t.Error("the answer did not enter the allow map")
	}
}
