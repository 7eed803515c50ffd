package learn

import (
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// TestLearnFromGrants: the operator's grants (approval events) become rules of the
// candidate, with a comment naming the grant; other approval events and internal names do
// not.
func TestLearnFromGrants(t *testing.T) {
	at := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	ev := func(decision, dest, id string) Recorded {
		return Recorded{Event: audit.Event{Time: at, Kind: audit.KindApproval, Decision: decision, Destination: dest,
			RequestID: id, Rule: "grant:" + id, Detail: "approver=uid:0 scope=once"}, Source: "t:1"}
	}
	trail := []Recorded{
		ev("ask", "pypi.example.org:443", "a1"),
		ev("grant", "pypi.example.org:443", "a1"),
		ev("grant", "files.example.org:80,443", "b2"),
		ev("grant", "db.ns.svc:443", "c3"),
		ev("deny", "evil.example.org:443", "d4"),
	}
	out, err := Learn(trail, Options{Name: "from-grants"})
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, want := range []string{`hosts: ["pypi.example.org"]`, "ports: [443]", `hosts: ["files.example.org"]`, "ports: [80, 443]",
		"granted by the operator (a1; approver=uid:0 scope=once)"} {
		if !strings.Contains(s, want) {
			t.Errorf("candidate lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, `hosts: ["evil.example.org"]`) || strings.Contains(s, `hosts: ["db.ns.svc"]`) {
		t.Errorf("a denial or an internal name became a rule:\n%s", s)
	}
	p, err := policy.Parse("learned.yaml", out)
	if err != nil {
		t.Fatalf("the candidate does not load: %v", err)
	}
	if d := p.Decide(policy.Request{Host: "files.example.org", Port: 80, Method: "GET", Path: "/"}); !d.Allowed() {
		t.Errorf("the candidate does not allow the granted host: %+v", d)
	}
}
