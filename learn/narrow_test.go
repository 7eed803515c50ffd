package learn

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// req is a recorded request inside an intercepted tunnel of client (its CONNECT included).
func req(client, method, path string) []Recorded {
	at := time.Date(2026, 11, 23, 20, 0, 0, 0, time.UTC)
	return []Recorded{
		{Event: audit.Event{Time: at, Kind: audit.KindConnect, Decision: audit.DecisionAllow, Destination: "api.test:443", Client: client}},
		{Event: audit.Event{Time: at, Kind: audit.KindHTTP, Decision: audit.DecisionAllow, Destination: "api.test:443", Client: client,
			Method: method, Path: path}},
	}
}

// tunnel is an intercepted CONNECT in which no request was made.
func tunnel(client string) []Recorded {
	return []Recorded{{Event: audit.Event{Time: time.Date(2026, 11, 23, 20, 0, 0, 0, time.UTC), Kind: audit.KindConnect,
		Decision: audit.DecisionAllow, Destination: "api.test:443", Client: client}}}
}

// openParent writes a parent allowing api.test:443 whole into dir and loads it.
func openParent(t *testing.T, dir string) *policy.Policy {
	t.Helper()
	doc := "apiVersion: airlock/v1\nkind: EgressPolicy\nmetadata: {name: base}\nspec:\n  egress:\n    - {name: api, hosts: [api.test], ports: [443]}\n"
	f := filepath.Join(dir, "parent.yaml")
	if err := os.WriteFile(f, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := policy.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The trail is the sandbox's to shape. Whatever it records, the candidate allows no request
// it did not record (beyond the documented collapsing of ids), and every request it leaves
// out is reported, in the output and in the candidate, with or without a parent.
func TestLearnFailsNarrow(t *testing.T) {
	ok := req("198.18.0.9:1000", "GET", "/ok")
	type probe struct {
		method, path string
		allow        bool
	}
	for _, tc := range []struct {
		name     string
		trail    [][]Recorded
		reported []string // in the report and the candidate's comments
		probes   []probe
	}{
		{"literal globs", [][]Recorded{ok, req("198.18.0.9:1001", "GET", "/x/**"), req("198.18.0.9:1002", "GET", "/**"),
			req("198.18.0.9:1003", "GET", "/a/*/b"), req("198.18.0.9:1004", "GET", "/c/%2A"), req("198.18.0.9:1005", "GET", "/d*")},
			[]string{"GET api.test:443/x/**", "GET api.test:443/**", "GET api.test:443/a/*/b", "GET api.test:443/c/%2A", "GET api.test:443/d*"},
			[]probe{{"GET", "/ok", true}, {"GET", "/x/secret", false}, {"GET", "/admin", false}, {"GET", "/a/z/b", false}, {"GET", "/dz", false}}},
		{"unnormalisable paths", [][]Recorded{ok, req("198.18.0.9:1001", "GET", "/bad%0Aline"),
			req("198.18.0.9:1002", "GET", "/%C0%AE%C0%AE/etc"), req("198.18.0.9:1003", "POST", "/%zz"), req("198.18.0.9:1004", "GET", "/a/%2e%2e%5cb")},
			[]string{"/bad%0Aline", "/%C0%AE%C0%AE/etc", "/%zz", "/a/%2e%2e%5cb"},
			[]probe{{"GET", "/ok", true}, {"GET", "/other", false}, {"POST", "/ok", false}, {"DELETE", "/", false}}},
		{"odd methods", [][]Recorded{ok, req("198.18.0.9:1001", "PROPFIND", "/dav"), req("198.18.0.9:1002", "BREW", "/pot"),
			req("198.18.0.9:1003", "", "/empty")},
			[]string{"PROPFIND api.test:443/dav", "BREW api.test:443/pot", " api.test:443/empty"},
			[]probe{{"GET", "/ok", true}, {"GET", "/dav", false}, {"DELETE", "/ok", false}, {"PUT", "/pot", false}}},
		{"empty intercepted tunnels", [][]Recorded{ok, tunnel("198.18.0.9:2000"), tunnel("198.18.0.9:2001")},
			[]string{"2 of 3 tunnels were not intercepted"},
			[]probe{{"GET", "/ok", true}, {"GET", "/other", false}, {"POST", "/ok", false}}},
		{"encoded # % ?", [][]Recorded{ok, req("198.18.0.9:1001", "GET", "/a%23b"), req("198.18.0.9:1002", "GET", "/a%25b"),
			req("198.18.0.9:1003", "GET", "/a%3Fb")},
			[]string{"GET api.test:443/a%23b", "GET api.test:443/a%25b", "GET api.test:443/a%3Fb"},
			[]probe{{"GET", "/ok", true}, {"GET", "/a", false}, {"GET", "/other", false}}},
	} {
		for _, parent := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/parent=%t", tc.name, parent), func(t *testing.T) {
				var trail []Recorded
				for _, r := range tc.trail {
					trail = append(trail, r...)
				}
				var report bytes.Buffer
				dir := t.TempDir()
				opt := Options{Filename: filepath.Join(dir, "learned.yaml"), Report: &report}
				if parent {
					opt.Parent, opt.ParentRef = openParent(t, dir), "./parent.yaml"
				}
				out, err := Learn(trail, opt)
				if err != nil {
					t.Fatal(err)
				}
				pol, err := policy.Parse(opt.Filename, out)
				if err != nil {
					t.Fatalf("candidate does not load: %v\n%s", err, out)
				}
				for _, s := range tc.reported {
					if !strings.Contains(string(out), s) {
						t.Errorf("the candidate does not mention %q:\n%s", s, out)
					}
					if !strings.Contains(report.String(), s) && !strings.Contains(s, "tunnels") {
						t.Errorf("the report does not mention %q:\n%s", s, report.String())
					}
				}
				for _, p := range tc.probes {
					d := pol.Decide(policy.Request{Scheme: "https", Host: "api.test", Port: 443, Method: p.method, Path: p.path})
					if got := d.Allowed() && !d.WouldDeny; got != p.allow {
						t.Errorf("%s %s: allowed %t, want %t (%s)\n%s", p.method, p.path, got, p.allow, d.Detail, out)
					}
				}
			})
		}
	}
}

// A host whose every request is one no rule can name is left out and reported, not allowed
// whole.
func TestLearnHostWithOnlyInexpressibleRequests(t *testing.T) {
	var trail []Recorded
	trail = append(trail, req("198.18.0.9:1000", "PROPFIND", "/dav")...)
	trail = append(trail, req("198.18.0.9:1001", "GET", "/**")...)
	var report bytes.Buffer
	out, err := Learn(trail, Options{Filename: "learned.yaml", Report: &report})
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.Parse("learned.yaml", out)
	if err != nil {
		t.Fatal(err)
	}
	if d := pol.Decide(policy.Request{Scheme: "https", Host: "api.test", Port: 443, Method: "GET", Path: "/anything"}); d.Allowed() {
		t.Errorf("the host is allowed:\n%s", out)
	}
	if !strings.Contains(report.String(), "api.test (4 events, at 2026-11-23T20:00:00Z): none of its 2 requests") {
		t.Errorf("report does not say the host was left out:\n%s", report.String())
	}
}
