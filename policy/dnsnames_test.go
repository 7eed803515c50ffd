package policy

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

const dnsNamesPolicy = `apiVersion: airlock/v1
kind: EgressPolicy
metadata:
  name: names
spec:
  egress:
    - name: api
      hosts: ["api.example.com", "*.cdn.example.com"]
      ports: [443]
    - name: deep
      hosts: ["*.eu.cdn.example.com"]
      ports: [8443]
    - name: db
      hosts: ["db.example.com"]
      ports: [5432]
      protocol: tcp
    - name: net
      cidrs: ["10.20.0.0/16"]
      ports: [22]
`

func TestDecideName(t *testing.T) {
	p, err := Parse("names.yaml", []byte(dnsNamesPolicy))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		allowed  bool
		reason   Reason
		rule     string
		ports    []int
		wildcard string
	}{
		{"api.example.com.", true, ReasonRuleMatched, "api", []int{443}, ""},
		{"API.Example.COM", true, ReasonRuleMatched, "api", []int{443}, ""},
		{"db.example.com", true, ReasonRuleMatched, "db", []int{5432}, ""},
		{"x.cdn.example.com", true, ReasonRuleMatched, "api", []int{443}, "*.cdn.example.com"},
		{"x.eu.cdn.example.com", true, ReasonRuleMatched, "api", []int{443, 8443}, "*.eu.cdn.example.com"},
		{"cdn.example.com", false, ReasonNoRule, "", nil, ""},
		{"example.com", false, ReasonNoRule, "", nil, ""},
		{"10.20.0.1", false, ReasonInvalidHost, "", nil, ""},
		{"bad..name", false, ReasonInvalidHost, "", nil, ""},
		{"1.0.20.10.in-addr.arpa", false, ReasonNoRule, "", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nd := p.DecideName(tc.name)
			if nd.Allowed() != tc.allowed || nd.Reason != tc.reason || nd.Rule != tc.rule ||
				!slices.Equal(nd.Ports, tc.ports) || nd.Wildcard != tc.wildcard {
				t.Errorf("got allowed %v reason %s rule %q ports %v wildcard %q; want %v %s %q %v %q",
					nd.Allowed(), nd.Reason, nd.Rule, nd.Ports, nd.Wildcard, tc.allowed, tc.reason, tc.rule, tc.ports, tc.wildcard)
			}
			if tc.allowed && !slices.Equal(nd.Ports, p.HostPorts(tc.name)) {
				t.Errorf("ports %v differ from HostPorts %v", nd.Ports, p.HostPorts(tc.name))
			}
		})
	}
}

func TestDecideNameReportMode(t *testing.T) {
	p, err := Parse("names.yaml", []byte(strings.Replace(dnsNamesPolicy, "spec:\n", "spec:\n  mode: report\n", 1)))
	if err != nil {
		t.Fatal(err)
	}
	nd := p.DecideName("evil.example.org")
	if !nd.Allowed() || !nd.WouldDeny || nd.Reason != ReasonNoRule || nd.Ports != nil {
		t.Errorf("got %+v, want a would-deny allow without ports", nd)
	}
}

func TestDNSBrakeFieldsValidation(t *testing.T) {
	for _, tc := range []struct {
		name, dns, want string
	}{
		{"negative grace", "grace: -1s", "spec.dns.grace: must not be negative"},
		{"long grace", "grace: 2h", "spec.dns.grace: 2h0m0s is longer than an hour"},
		{"label 64", "maxLabelLength: 64", "spec.dns.maxLabelLength: 64 is out of range"},
		{"negative rate", "wildcardQueriesPerMinute: -5", "spec.dns.wildcardQueriesPerMinute: must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := strings.Replace(dnsNamesPolicy, "spec:\n", "spec:\n  dns:\n    "+tc.dns+"\n", 1)
			_, err := Parse("names.yaml", []byte(doc))
			if err == nil || !errors.Is(err, ErrInvalidPolicy) || !strings.Contains(err.Error(), "names.yaml:7:") ||
				!strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want names.yaml:7: ... %q", err, tc.want)
			}
		})
	}
	p, err := Parse("names.yaml", []byte(dnsNamesPolicy))
	if err != nil {
		t.Fatal(err)
	}
	c := p.DNS()
	if c.Grace != DefaultGrace || c.MaxLabelLength != DefaultMaxLabelLength || c.WildcardQueriesPerMinute != DefaultWildcardQueriesPerMinute {
		t.Errorf("defaults: got %+v", c)
	}
	doc := strings.Replace(dnsNamesPolicy, "spec:\n", "spec:\n  dns:\n    grace: 3s\n    maxLabelLength: 20\n    wildcardQueriesPerMinute: 7\n", 1)
	if p, err = Parse("names.yaml", []byte(doc)); err != nil {
		t.Fatal(err)
	}
	if c := p.DNS(); c.Grace != 3*time.Second || c.MaxLabelLength != 20 || c.WildcardQueriesPerMinute != 7 {
		t.Errorf("set values: got %+v", c)
	}
}

func FuzzNormalizeQueryName(f *testing.F) {
	for _, s := range []string{"api.example.com.", "API.Example.COM", "xn--bcher-kva.example", "1.2.3.4", "a..b",
		"-a.example", "0x7f.1", "Bücher.example", "a.b-.c", strings.Repeat("a", 64) + ".com", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, gerr := normalizeQueryName(s)
		want, werr := NormalizeHost(s)
		if (gerr == nil) != (werr == nil) || got != want {
			t.Errorf("normalizeQueryName(%q) = %+v, %v; NormalizeHost = %+v, %v", s, got, gerr, want, werr)
		}
	})
}
