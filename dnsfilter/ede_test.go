package dnsfilter

import (
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// ede returns the Extended DNS Error options of r.
func ede(r *dns.Msg) []*dns.EDNS0_EDE {
	var out []*dns.EDNS0_EDE
	if opt := r.IsEdns0(); opt != nil {
		for _, o := range opt.Option {
			if e, ok := o.(*dns.EDNS0_EDE); ok {
				out = append(out, e)
			}
		}
	}
	return out
}

// TestDenialsCarryExtendedDNSError checks RFC 8914 on denials: Blocked for a name the policy
// denies, Prohibited for a refused query type, each with the policy name, the reason code and
// the remedy as EXTRA-TEXT; nothing on an allowed answer or for a client without EDNS(0).
func TestDenialsCarryExtendedDNSError(t *testing.T) {
	h := newHarness(t, basicSpec, nil)
	h.up.setA("allowed.example", 30, "198.18.0.10")
	tests := []struct {
		name  string
		qname string
		qtype uint16
		edns  bool
		code  uint16 // 0: no EDE
		text  []string
	}{
		{"denied name", "denied.example", dns.TypeA, true, dns.ExtendedErrorCodeBlocked,
			[]string{"airlock policy dnstest: no_rule", "no_rule", `"denied.example"`, "; ask the policy owner to add the host"}},
		{"refused type", "allowed.example", dns.TypeANY, true, dns.ExtendedErrorCodeProhibited,
			[]string{"qtype_refused", "ANY", "; ask for the record type you need"}},
		{"allowed name", "allowed.example", dns.TypeA, true, 0, nil},
		{"denied without EDNS", "denied.example", dns.TypeA, false, 0, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := question(tc.qname, tc.qtype)
			if tc.edns {
				m.SetEdns0(1232, false)
			}
			r, err := h.exchange("tcp", m)
			if err != nil {
				t.Fatal(err)
			}
			got := ede(r)
			if tc.code == 0 {
				if len(got) != 0 || (!tc.edns && r.IsEdns0() != nil) {
					t.Errorf("got EDE %v (OPT %v), want none", got, r.IsEdns0())
				}
				return
			}
			if len(got) != 1 || got[0].InfoCode != tc.code {
				t.Fatalf("got EDE %v, want one with code %d", got, tc.code)
			}
			for _, s := range tc.text {
				if !strings.Contains(got[0].ExtraText, s) {
					t.Errorf("EXTRA-TEXT %q lacks %q", got[0].ExtraText, s)
				}
			}
		})
	}
}
