package policy

import (
	"net/netip"
	"slices"
	"testing"
)

func TestCIDRRules(t *testing.T) {
	pol, err := Parse("inline.yaml", []byte(`apiVersion: airlock/v1
kind: EgressPolicy
metadata:
  name: cidrs
spec:
  egress:
    - name: warehouse
      cidrs: ["10.20.0.0/16"]
      ports: [5432]
      protocol: tcp
    - name: internal-web
      cidrs: ["10.30.0.0/16"]
    - name: names-only
      hosts: ["example.com"]
`))
	if err != nil {
		t.Fatal(err)
	}
	got := pol.CIDRRules()
	want := []CIDRRule{
		{Prefix: netip.MustParsePrefix("10.20.0.0/16"), Ports: []uint16{5432}, Raw: true},
		{Prefix: netip.MustParsePrefix("10.30.0.0/16"), Ports: []uint16{80, 443}},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Prefix != want[i].Prefix || got[i].Raw != want[i].Raw || !slices.Equal(got[i].Ports, want[i].Ports) {
			t.Errorf("rule %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}
