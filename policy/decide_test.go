package policy

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

const decidePolicy = `apiVersion: airlock/v1
kind: EgressPolicy
metadata: {name: decide-test}
spec:
  egress:
    - name: github-api
      hosts: [api.github.com]
      ports: [443]
      http:
        - methods: [GET, HEAD]
          paths: ["/repos/acme/**"]
        - methods: [POST]
          paths: ["/repos/acme/*/issues"]
      inject:
        - {header: Authorization, value: 'Bearer {{ secret "gh" }}'}
    - name: pypi
      hosts: [pypi.org, "*.pythonhosted.org"]
    - name: idn
      hosts: ["bücher.example"]
      ports: [443]
    - name: warehouse
      cidrs: [10.20.0.0/16]
      ports: [5432]
      protocol: tcp
    - name: internal-api
      cidrs: [10.30.0.0/16, "fd00:30::/32"]
      ports: [8080]
    - name: wide
      hosts: ["*.example.com"]
      ports: [443]
      http:
        - methods: [GET]
    - name: wide-2
      hosts: ["*.example.com"]
      ports: [443]
      http:
        - methods: [DELETE]
          paths: ["/x/**"]
  secrets:
    gh: {env: GH}
`

// mustParse parses a policy or fails the test.
func mustParse(t testing.TB, yaml string) *Policy {
	t.Helper()
	p, err := Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return p
}

// wantDecision is what a test checks of a Decision; Detail is checked only when set.
type wantDecision struct {
	verdict   Verdict
	wouldDeny bool
	rule      string
	reason    Reason
	detail    string
	secrets   string // comma-separated
	intercept bool
	host      string
	port      int
}

// check compares a decision with the expectation.
func (w wantDecision) check(t *testing.T, d Decision) {
	t.Helper()
	got := wantDecision{d.Verdict, d.WouldDeny, d.Rule, d.Reason, w.detail, strings.Join(d.Secrets, ","),
		d.Intercept, d.Host, d.Port}
	if got != w {
		t.Errorf("got  %+v\nwant %+v", got, w)
	}
	if w.detail != "" && d.Detail != w.detail {
		t.Errorf("got detail %q, want %q", d.Detail, w.detail)
	}
}

func TestDecide(t *testing.T) {
	p := mustParse(t, decidePolicy)
	const gh = "api.github.com"
	tests := []struct {
		name string
		req  Request
		want wantDecision
	}{
		{"allowed GET", Request{Scheme: "https", Host: gh, Port: 443, Method: "GET", Path: "/repos/acme/x"},
			wantDecision{Allow, false, "github-api", ReasonRuleMatched, "", "gh", true, gh, 443}},
		{"https default port", Request{Scheme: "https", Host: gh, Method: "GET", Path: "/repos/acme/x"},
			wantDecision{Allow, false, "github-api", ReasonRuleMatched, "", "gh", true, gh, 443}},
		{"http default port", Request{Scheme: "http", Host: gh, Method: "GET", Path: "/repos/acme/x"},
			wantDecision{Deny, false, "github-api", ReasonPortNotAllowed, `rule "github-api" allows ports [443], not 80`, "", false, gh, 80}},
		{"other port", Request{Host: gh, Port: 8443, Method: "GET", Path: "/repos/acme/x"},
			wantDecision{Deny, false, "github-api", ReasonPortNotAllowed, `rule "github-api" allows ports [443], not 8443`, "", false, gh, 8443}},
		{"empty scheme port 0 is 80", Request{Host: "pypi.org", Method: "GET", Path: "/simple/"},
			wantDecision{Allow, false, "pypi", ReasonRuleMatched, "", "", false, "pypi.org", 80}},
		{"default ports exclude 8080", Request{Host: "pypi.org", Port: 8080},
			wantDecision{Deny, false, "pypi", ReasonPortNotAllowed, `rule "pypi" allows ports [80, 443], not 8080`, "", false, "pypi.org", 8080}},
		{"unnamed host", Request{Host: "evil.com", Port: 443},
			wantDecision{Deny, false, "", ReasonNoRule, `host "evil.com" is not named by any egress rule`, "", false, "evil.com", 443}},
		{"prefix trick", Request{Host: "evilapi.github.com", Port: 443},
			wantDecision{Deny, false, "", ReasonNoRule, "", "", false, "evilapi.github.com", 443}},
		{"suffix trick", Request{Host: "api.github.com.evil.net", Port: 443},
			wantDecision{Deny, false, "", ReasonNoRule, "", "", false, "api.github.com.evil.net", 443}},
		{"case and trailing dot", Request{Host: "API.GitHub.COM.", Port: 443, Method: "get", Path: "/repos/acme/x"},
			wantDecision{Allow, false, "github-api", ReasonRuleMatched, "", "gh", true, gh, 443}},
		{"second L7 rule", Request{Host: gh, Port: 443, Method: "POST", Path: "/repos/acme/widget/issues"},
			wantDecision{Allow, false, "github-api", ReasonRuleMatched, "", "gh", true, gh, 443}},
		{"method not allowed", Request{Host: gh, Port: 443, Method: "DELETE", Path: "/repos/acme/x"},
			wantDecision{Deny, false, "github-api", ReasonMethodNotAllowed, `rule "github-api" does not allow method DELETE`, "", false, gh, 443}},
		{"path not allowed", Request{Host: gh, Port: 443, Method: "GET", Path: "/orgs/acme"},
			wantDecision{Deny, false, "github-api", ReasonPathNotAllowed, `rule "github-api" does not allow GET /orgs/acme`, "", false, gh, 443}},
		{"empty path is root", Request{Host: gh, Port: 443, Method: "GET"},
			wantDecision{Deny, false, "github-api", ReasonPathNotAllowed, `rule "github-api" does not allow GET /`, "", false, gh, 443}},
		{"dotdot escapes prefix", Request{Host: gh, Port: 443, Method: "GET", Path: "/repos/acme/../other/x"},
			wantDecision{Deny, false, "github-api", ReasonPathNotAllowed, `rule "github-api" does not allow GET /repos/other/x`, "", false, gh, 443}},
		{"encoded dotdot escapes prefix", Request{Host: gh, Port: 443, Method: "GET", Path: "/repos/acme/%2e%2e/other"},
			wantDecision{Deny, false, "github-api", ReasonPathNotAllowed, "", "", false, gh, 443}},
		{"encoded slash dotdot", Request{Host: gh, Port: 443, Method: "GET", Path: "/repos/acme/..%2F..%2Fother"},
			wantDecision{Deny, false, "github-api", ReasonPathNotAllowed, `rule "github-api" does not allow GET /other`, "", false, gh, 443}},
		{"double encoding", Request{Host: gh, Port: 443, Method: "GET", Path: "/repos/acme/%252e%252e/x"},
			wantDecision{Deny, false, "github-api", ReasonAmbiguousPath, `path "/repos/acme/%252e%252e/x" is invalid: double-encoded "%2e"`, "", false, gh, 443}},
		{"above root", Request{Host: gh, Port: 443, Method: "GET", Path: "/../repos/acme/x"},
			wantDecision{Deny, false, "github-api", ReasonInvalidPath, "", "", false, gh, 443}},
		{"apex of double star", Request{Host: gh, Port: 443, Method: "GET", Path: "/repos/acme"},
			wantDecision{Allow, false, "github-api", ReasonRuleMatched, "", "gh", true, gh, 443}},
		{"query ignored", Request{Host: gh, Port: 443, Method: "GET", Path: "/repos/acme/x?next=/../../admin"},
			wantDecision{Allow, false, "github-api", ReasonRuleMatched, "", "gh", true, gh, 443}},
		{"encoded slash", Request{Host: gh, Port: 443, Method: "GET", Path: "/repos%2Facme/x"},
			wantDecision{Allow, false, "github-api", ReasonRuleMatched, "", "gh", true, gh, 443}},
		{"invalid method", Request{Host: gh, Port: 443, Method: "G ET", Path: "/repos/acme/x"},
			wantDecision{Deny, false, "github-api", ReasonMethodNotAllowed, `method "G ET" is not a valid HTTP method`, "", false, gh, 443}},
		{"connection level", Request{Scheme: "https", Host: gh},
			wantDecision{Allow, false, "github-api", ReasonRuleMatched, `rule "github-api" allows connections to api.github.com port 443`, "gh", true, gh, 443}},
		{"CONNECT is connection level", Request{Host: gh, Port: 443, Method: "CONNECT"},
			wantDecision{Allow, false, "github-api", ReasonRuleMatched, "", "gh", true, gh, 443}},
		{"connection level without L7", Request{Host: "pypi.org", Port: 443},
			wantDecision{Allow, false, "pypi", ReasonRuleMatched, "", "", false, "pypi.org", 443}},
		{"IDN", Request{Host: "BÜCHER.example", Port: 443, Method: "GET", Path: "/"},
			wantDecision{Allow, false, "idn", ReasonRuleMatched, "", "", false, "xn--bcher-kva.example", 443}},
		{"IDN punycode", Request{Host: "xn--bcher-kva.example", Port: 443},
			wantDecision{Allow, false, "idn", ReasonRuleMatched, "", "", false, "xn--bcher-kva.example", 443}},
		{"wildcard subdomain", Request{Host: "files.pythonhosted.org", Port: 443},
			wantDecision{Allow, false, "pypi", ReasonRuleMatched, "", "", false, "files.pythonhosted.org", 443}},
		{"wildcard not apex", Request{Host: "pythonhosted.org", Port: 443},
			wantDecision{Deny, false, "", ReasonNoRule, "", "", false, "pythonhosted.org", 443}},
		{"tcp only", Request{Host: "10.20.1.1", Port: 5432},
			wantDecision{Deny, false, "warehouse", ReasonTCPOnly, `rule "warehouse" allows port 5432 as raw TCP only (protocol: tcp); it is not proxied`, "", false, "10.20.1.1", 5432}},
		{"IP literal by cidr", Request{Host: "10.30.1.1", Port: 8080, Method: "GET", Path: "/"},
			wantDecision{Allow, false, "internal-api", ReasonRuleMatched, "", "", false, "10.30.1.1", 8080}},
		{"IPv6 literal by cidr", Request{Host: "[fd00:30::1]", Port: 8080},
			wantDecision{Allow, false, "internal-api", ReasonRuleMatched, "", "", false, "fd00:30::1", 8080}},
		{"mapped literal by cidr", Request{Host: "[::ffff:10.30.0.1]", Port: 8080},
			wantDecision{Allow, false, "internal-api", ReasonRuleMatched, "", "", false, "::ffff:10.30.0.1", 8080}},
		{"alternate IPv4 spelling", Request{Host: "0x0a1e0101", Port: 8080},
			wantDecision{Allow, false, "internal-api", ReasonRuleMatched, "", "", false, "10.30.1.1", 8080}},
		{"IP literal wrong port", Request{Host: "10.30.1.1", Port: 80},
			wantDecision{Deny, false, "internal-api", ReasonPortNotAllowed, `rule "internal-api" allows ports [8080], not 80`, "", false, "10.30.1.1", 80}},
		{"IP literal unnamed", Request{Host: "10.99.0.1", Port: 80},
			wantDecision{Deny, false, "", ReasonNoRule, `address 10.99.0.1 is not in any egress rule's cidrs`, "", false, "10.99.0.1", 80}},
		{"loopback spelled as a number", Request{Host: "2130706433", Port: 80},
			wantDecision{Deny, false, "", ReasonNoRule, `address 127.0.0.1 is not in any egress rule's cidrs`, "", false, "127.0.0.1", 80}},
		{"invalid host", Request{Host: "a..b", Port: 443},
			wantDecision{Deny, false, "", ReasonInvalidHost, `invalid host "a..b": empty label`, "", false, "", 443}},
		{"numeric last label", Request{Host: "example.123", Port: 443},
			wantDecision{Deny, false, "", ReasonInvalidHost, "", "", false, "", 443}},
		{"invalid port", Request{Host: gh, Port: 70000},
			wantDecision{Deny, false, "", ReasonPortNotAllowed, "port 70000 is not a valid port", "", false, gh, 70000}},
		{"unknown scheme", Request{Scheme: "ftp", Host: gh},
			wantDecision{Deny, false, "", ReasonPortNotAllowed, `scheme "ftp" has no default port; give the port`, "", false, gh, 0}},
		{"first rule wins", Request{Host: "a.example.com", Port: 443, Method: "GET", Path: "/x/y"},
			wantDecision{Allow, false, "wide", ReasonRuleMatched, "", "", true, "a.example.com", 443}},
		{"later rule allows", Request{Host: "a.b.example.com", Port: 443, Method: "DELETE", Path: "/x/y"},
			wantDecision{Allow, false, "wide-2", ReasonRuleMatched, "", "", true, "a.b.example.com", 443}},
		{"closest is the path rule", Request{Host: "a.example.com", Port: 443, Method: "DELETE", Path: "/z"},
			wantDecision{Deny, false, "wide-2", ReasonPathNotAllowed, `rule "wide-2" does not allow DELETE /z`, "", false, "a.example.com", 443}},
		{"closest is the first rule", Request{Host: "a.example.com", Port: 443, Method: "POST", Path: "/x"},
			wantDecision{Deny, false, "wide", ReasonMethodNotAllowed, `rule "wide" does not allow method POST`, "", false, "a.example.com", 443}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.want.check(t, p.Decide(tc.req))
		})
	}
}

func TestDecideReportMode(t *testing.T) {
	p := mustParse(t, strings.Replace(decidePolicy, "spec:\n", "spec:\n  mode: report\n", 1))
	tests := []struct {
		name string
		req  Request
		want wantDecision
	}{
		{"deny becomes allow", Request{Host: "evil.com", Port: 443},
			wantDecision{Allow, true, "", ReasonNoRule, `host "evil.com" is not named by any egress rule`, "", false, "evil.com", 443}},
		{"path deny reported", Request{Host: "api.github.com", Port: 443, Method: "GET", Path: "/orgs"},
			wantDecision{Allow, true, "github-api", ReasonPathNotAllowed, "", "", false, "api.github.com", 443}},
		{"invalid host reported", Request{Host: "a..b"},
			wantDecision{Allow, true, "", ReasonInvalidHost, "", "", false, "", 80}},
		{"allow unchanged", Request{Host: "pypi.org", Port: 443},
			wantDecision{Allow, false, "pypi", ReasonRuleMatched, "", "", false, "pypi.org", 443}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.want.check(t, p.Decide(tc.req))
		})
	}
}

func TestDecideOffline(t *testing.T) {
	p, err := Builtin("offline")
	if err != nil {
		t.Fatal(err)
	}
	want := wantDecision{Deny, false, "", ReasonOffline, `policy "offline" allows no egress`, "", false, "example.com", 443}
	want.check(t, p.Decide(Request{Scheme: "https", Host: "example.com"}))
}

func TestCheckAddr(t *testing.T) {
	p := mustParse(t, decidePolicy)
	tests := []struct {
		name string
		host string
		port int
		addr string
		want wantDecision
	}{
		{"public", "api.github.com", 443, "140.82.112.5",
			wantDecision{Allow, false, "", ReasonPublicAddress, `address 140.82.112.5 of "api.github.com" is public`, "", false, "api.github.com", 443}},
		{"benchmarking range is public", "upstream.test", 443, "198.18.0.10",
			wantDecision{Allow, false, "", ReasonPublicAddress, "", "", false, "upstream.test", 443}},
		{"documentation IPv6 is public", "upstream.test", 443, "2001:db8::10",
			wantDecision{Allow, false, "", ReasonPublicAddress, "", "", false, "upstream.test", 443}},
		{"loopback", "x.test", 443, "127.0.0.1",
			wantDecision{Deny, false, "", ReasonInternalAddress, `address 127.0.0.1 of "x.test" is loopback; name it in a rule's cidrs to allow it`, "", false, "x.test", 443}},
		{"metadata", "x.test", 80, "169.254.169.254",
			wantDecision{Deny, false, "", ReasonInternalAddress, `address 169.254.169.254 of "x.test" is link-local; name it in a rule's cidrs to allow it`, "", false, "x.test", 80}},
		{"mapped loopback", "x.test", 443, "::ffff:127.0.0.1",
			wantDecision{Deny, false, "", ReasonInternalAddress, `address 127.0.0.1 of "x.test" is loopback; name it in a rule's cidrs to allow it`, "", false, "x.test", 443}},
		{"NAT64 loopback", "x.test", 443, "64:ff9b::7f00:1",
			wantDecision{Deny, false, "", ReasonInternalAddress, `address 64:ff9b::7f00:1 of "x.test" is an IPv6 form embedding 127.0.0.1 (loopback); name it in a rule's cidrs to allow it`, "", false, "x.test", 443}},
		{"named by cidr", "svc.internal", 8080, "10.30.0.5",
			wantDecision{Allow, false, "internal-api", ReasonRuleMatched, "", "", false, "svc.internal", 8080}},
		{"mapped named by cidr", "svc.internal", 8080, "::ffff:10.30.0.5",
			wantDecision{Allow, false, "internal-api", ReasonRuleMatched, "", "", false, "svc.internal", 8080}},
		{"named by cidr, other port", "svc.internal", 443, "10.30.0.5",
			wantDecision{Deny, false, "internal-api", ReasonInternalAddress, `address 10.30.0.5 of "svc.internal" is private; rule "internal-api" names it but allows ports [8080], not 443`, "", false, "svc.internal", 443}},
		{"tcp rule cidr", "db.internal", 5432, "10.20.0.5",
			wantDecision{Allow, false, "warehouse", ReasonRuleMatched, "", "", false, "db.internal", 5432}},
		{"host normalised", "SVC.Internal.", 8080, "10.30.0.5",
			wantDecision{Allow, false, "internal-api", ReasonRuleMatched, "", "", false, "svc.internal", 8080}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.want.check(t, p.CheckAddr(tc.host, tc.port, netip.MustParseAddr(tc.addr)))
		})
	}
	t.Run("invalid address", func(t *testing.T) {
		d := p.CheckAddr("x.test", 443, netip.Addr{})
		if d.Allowed() || d.Reason != ReasonInternalAddress {
			t.Errorf("got %+v, want a deny with %s", d, ReasonInternalAddress)
		}
	})
	t.Run("report mode", func(t *testing.T) {
		rp := mustParse(t, strings.Replace(decidePolicy, "spec:\n", "spec:\n  mode: report\n", 1))
		want := wantDecision{Allow, true, "", ReasonInternalAddress, "", "", false, "x.test", 443}
		want.check(t, rp.CheckAddr("x.test", 443, netip.MustParseAddr("127.0.0.1")))
	})
}

func TestHostPorts(t *testing.T) {
	p := mustParse(t, decidePolicy)
	tests := []struct {
		host string
		want string
	}{
		{"api.github.com", "[443]"},
		{"pypi.org", "[80, 443]"},
		{"a.example.com", "[443]"},
		{"10.20.0.1", "[5432]"},
		{"evil.com", "[]"},
		{"a..b", "[]"},
	}
	for _, tc := range tests {
		t.Run(tc.host, func(t *testing.T) {
			if got := formatPorts(p.HostPorts(tc.host)); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestInjectionExpand(t *testing.T) {
	secrets := map[string]string{"a": "A", "b": "B", "nl": "x\r\nEvil: 1"}
	lookup := func(name string) (string, error) {
		if v, ok := secrets[name]; ok {
			return v, nil
		}
		return "", fmt.Errorf("no secret %q", name)
	}
	tests := []struct {
		value   string
		want    string
		secrets string
		wantErr bool
	}{
		{`Bearer {{ secret "a" }}`, "Bearer A", "a", false},
		{`{{secret "a"}}:{{ secret "b" }}:{{ secret "a" }}`, "A:B:A", "a,b", false},
		{`plain`, "plain", "", false},
		{`{{ secret "missing" }}`, "", "missing", true},
		{`{{ secret "nl" }}`, "", "nl", true},
		{`{{ env "X" }}`, "", "", true},
	}
	for _, tc := range tests {
		t.Run(tc.value, func(t *testing.T) {
			in := Injection{Header: "X", Value: tc.value}
			got, err := in.Expand(lookup)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("got %q, %v; want %q (error %v)", got, err, tc.want, tc.wantErr)
			}
			if s := strings.Join(in.Secrets(), ","); s != tc.secrets {
				t.Errorf("got secrets %q, want %q", s, tc.secrets)
			}
		})
	}
}
