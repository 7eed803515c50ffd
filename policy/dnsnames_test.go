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

// TestPlainHost holds NormalizeHost's fast path (plainHost) to the full IDNA path: every
// string of up to five bytes over an alphabet of the characters that matter, and the
// length and label edges, get the same host and the same error either way; and the fast
// path is taken for the names it exists for.
func TestPlainHost(t *testing.T) {
	alphabet := []byte("aZ09-.xn")
	var inputs []string
	var gen func(prefix []byte)
	gen = func(prefix []byte) {
		inputs = append(inputs, string(prefix))
		if len(prefix) == 5 {
			return
		}
		for _, c := range alphabet {
			gen(append(prefix, c))
		}
	}
	gen(nil)
	label63, label64 := strings.Repeat("a", 63), strings.Repeat("b", 64)
	name253 := strings.Repeat(label63+".", 3) + strings.Repeat("c", 61)
	inputs = append(inputs, label63+".com", label64+".com", name253, name253+".", name253+"d", name253+"..",
		"xn--bcher-kva.example", "XN--BCHER-KVA.example", "a.xn--", "0x7f.1", "a.0x1F", "a.0xg", "1.2.3.4",
		"1.2.3.4.", "a.b.1", "a.1b", "1e.a", "A.B.C.", "a..b", "-a.b", "a-.b", "a.-b", "r3---sn-abc.googlevideo.com",
		"Bücher.example", "a b", "a_b.com", "a:b", "[::1]", "::1", "\u212a.com", "a.com\u3002", "ａ.com",
		"127.0.0.1", "127.0.0.1.", "255.255.255.255", "256.0.0.1", "01.2.3.4", "1.2.3.04", "1.2.3.4.5", "1.2.3", "0x7f.0.0.1")
	for _, s := range inputs {
		fast, ok := plainHost(s)
		full, reason := normalizeHostIDNA(s)
		if ok && (reason != "" || fast != full) {
			t.Errorf("plainHost(%q) = %+v; normalizeHostIDNA = %+v, %q", s, fast, full, reason)
		}
		got, gerr := NormalizeHost(s)
		if (gerr == nil) != (reason == "") || got != full {
			t.Errorf("NormalizeHost(%q) = %+v, %v; normalizeHostIDNA = %+v, %q", s, got, gerr, full, reason)
		}
	}
	for _, s := range []string{"api.github.com", "API.GitHub.COM.", "r3---sn-abc.googlevideo.com", "a", name253, "127.0.0.1", "198.18.0.1."} {
		if _, ok := plainHost(s); !ok {
			t.Errorf("plainHost(%q): got the slow path, want the fast one", s)
		}
	}
}

// FuzzPlainHost holds NormalizeHost's fast path to the full IDNA path on any input.
func FuzzPlainHost(f *testing.F) {
	for _, s := range []string{"api.example.com.", "API.Example.COM", "xn--bcher-kva.example", "1.2.3.4", "a..b",
		"-a.example", "0x7f.1", "Bücher.example", "a.b-.c", strings.Repeat("a", 64) + ".com", "", "\u212a.com"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		full, reason := normalizeHostIDNA(s)
		if fast, ok := plainHost(s); ok && (reason != "" || fast != full) {
			t.Errorf("plainHost(%q) = %+v; normalizeHostIDNA = %+v, %q", s, fast, full, reason)
		}
		got, err := NormalizeHost(s)
		if (err == nil) != (reason == "") || got != full {
			t.Errorf("NormalizeHost(%q) = %+v, %v; normalizeHostIDNA = %+v, %q", s, got, err, full, reason)
		}
	})
}
