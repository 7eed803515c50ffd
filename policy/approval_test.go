package policy

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// askBase is a parent with spec.approval that children narrow.
var askBase = policyYAML("ask-base",
	"egress:",
	"  - name: web",
	"    hosts: [api.example.com]",
	"secrets:",
	"  hook-key: {env: HOOK_KEY}",
	"approval:",
	"  hold: 10s",
	"  askTTL: 30m",
	"  maxGrant: 2h",
	"  never: [pastebin.com, \"*.ngrok.io\"]",
	"  approvers:",
	"    webhook: {url: \"https://approvals.example.com/hook\", secret: hook-key}",
)

func TestApprovalAbsentMeansNoAsking(t *testing.T) {
	p, err := Parse("t.yaml", []byte(policyYAML("plain", "egress:", "  - name: web", "    hosts: [a.example.com]")))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Approval(); ok || p.Asks() {
		t.Fatalf("a policy without spec.approval asks (Approval ok %v, Asks %v)", ok, p.Asks())
	}
}

func TestApprovalDefaultsAndAccessors(t *testing.T) {
	p, err := Parse("t.yaml", []byte(policyYAML("ask", "egress:", "  - name: web", "    hosts: [a.example.com]",
		"approval:", "  never: [\"*.IO\", Evil.Example.com]")))
	if err != nil {
		t.Fatal(err)
	}
	c, ok := p.Approval()
	if !ok || !p.Asks() {
		t.Fatalf("got ok %v asks %v, want both true", ok, p.Asks())
	}
	if c.Mode != ApprovalAsk || c.Hold != DefaultApprovalHold || c.AskTTL != DefaultApprovalAskTTL || c.MaxGrant != DefaultApprovalMaxGrant {
		t.Errorf("got %+v, want the defaults", c)
	}
	for _, tc := range []struct {
		host string
		want bool
	}{{"evil.example.com", true}, {"x.ngrok.io", true}, {"io", false}, {"example.com", false}} {
		if got := p.NeverAsk(tc.host); got != tc.want {
			t.Errorf("NeverAsk(%q) = %v, want %v", tc.host, got, tc.want)
		}
	}
}

func TestApprovalReportModeNeverAsks(t *testing.T) {
	p, err := Parse("t.yaml", []byte(policyYAML("rep", "mode: report", "egress:", "  - name: web", "    hosts: [a.example.com]", "approval: {}")))
	if err != nil {
		t.Fatal(err)
	}
	if p.Asks() {
		t.Fatal("a report-mode policy asks")
	}
}

func TestApprovalLoadErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec []string
		want string
	}{
		{"mode", []string{"approval:", "  mode: maybe"}, `t.yaml:7:11: spec.approval.mode: unknown mode "maybe"; use "ask" or "off"`},
		{"hold over limit", []string{"approval:", "  hold: 2m"}, `t.yaml:7:11: spec.approval.hold: 2m0s is over the limit of 1m0s; use at most "1m0s"`},
		{"negative", []string{"approval:", "  maxGrant: -1s"}, `t.yaml:7:15: spec.approval.maxGrant: must not be negative; leave it out for the default`},
		{"askTTL below hold", []string{"approval:", "  hold: 30s", "  askTTL: 10s"}, `t.yaml:8:13: spec.approval.askTTL: 10s is shorter than hold (30s)`},
		{"never ip", []string{"approval:", "  never: [10.0.0.1]"}, `t.yaml:7:13: spec.approval.never[0]: 10.0.0.1 is an IP address; addresses are never asked about, so never lists names only: remove it`},
		{"never url", []string{"approval:", "  never: [\"https://x.example.com/\"]"}, `t.yaml:7:13: spec.approval.never[0]: hosts take a bare name`},
		{"webhook url", []string{"approval:", "  approvers:", "    webhook: {url: \"ftp://x\", secret: k}"}, `spec.approval.approvers.webhook.url: invalid URL "ftp://x"`},
		{"webhook secret undefined", []string{"approval:", "  approvers:", "    webhook: {url: \"https://x.example.com\", secret: nope}"},
			`spec.approval.approvers.webhook.secret: secret "nope" is not defined in spec.secrets`},
		{"webhook secret injected", []string{"egress:", "  - name: web", "    hosts: [a.example.com]", "    ports: [443]",
			"    inject: [{header: X-Key, value: '{{ secret \"k\" }}'}]", "secrets:", "  k: {env: K}",
			"approval:", "  approvers:", "    webhook: {url: \"https://x.example.com\", secret: k}"},
			`secret "k" is also injected by rule "web"`},
		{"unknown field", []string{"approval:", "  holdd: 5s"}, `t.yaml:7:5: spec.approval.holdd: unknown field "holdd"; did you mean "hold"?`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := policyYAML("t", tc.spec...)
			_, err := Parse("t.yaml", []byte(doc))
			if err == nil {
				t.Fatalf("loaded; want error %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestApprovalExtendsNarrows(t *testing.T) {
	for _, tc := range []struct {
		name  string
		child []string
		want  string // error substring, "" to load
		check func(t *testing.T, c ApprovalConfig, p *Policy)
	}{
		{name: "inherits", child: nil, check: func(t *testing.T, c ApprovalConfig, p *Policy) {
			if c.Hold != 10*time.Second || c.MaxGrant != 2*time.Hour || c.Approvers.Webhook == nil || !p.Asks() {
				t.Errorf("got %+v, want the parent's", c)
			}
		}},
		{name: "shortens and adds never", child: []string{"approval:", "  hold: 2s", "  maxGrant: 5m", "  never: [gist.example.com]"},
			check: func(t *testing.T, c ApprovalConfig, p *Policy) {
				if c.Hold != 2*time.Second || c.MaxGrant != 5*time.Minute || c.AskTTL != 30*time.Minute {
					t.Errorf("got %+v", c)
				}
				for _, h := range []string{"pastebin.com", "a.ngrok.io", "gist.example.com"} {
					if !p.NeverAsk(h) {
						t.Errorf("NeverAsk(%q) false; never is unioned down the chain", h)
					}
				}
			}},
		{name: "turns off", child: []string{"approval: {mode: \"off\"}"}, check: func(t *testing.T, c ApprovalConfig, p *Policy) {
			if p.Asks() {
				t.Error("child turned asking off, still asks")
			}
		}},
		{name: "longer hold", child: []string{"approval:", "  hold: 20s"}, want: "spec.approval.hold: 20s is longer than the parents' 10s; a child only narrows"},
		{name: "longer maxGrant", child: []string{"approval:", "  maxGrant: 3h"}, want: "spec.approval.maxGrant: 3h0m0s is longer than the parents' 2h0m0s"},
		{name: "longer askTTL", child: []string{"approval:", "  askTTL: 1h"}, want: "spec.approval.askTTL: 1h0m0s is longer"},
		{name: "sandbox grants", child: []string{"approval:", "  sandboxGrants: true"}, want: "a parent does not allow sandbox-life grants"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			child := policyYAML("child", append([]string{"extends: [./base.yaml]"}, tc.child...)...)
			dir := writeFiles(t, map[string]string{"base.yaml": askBase, "child.yaml": child})
			p, err := Load(filepath.Join(dir, "child.yaml"))
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("got %v, want an error containing %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c, _ := p.Approval()
			tc.check(t, c, p)
		})
	}
}

func TestApprovalOffParentCannotBeTurnedOn(t *testing.T) {
	parent := policyYAML("off", "egress:", "  - name: web", "    hosts: [a.example.com]", "approval: {mode: \"off\"}")
	child := policyYAML("child", "extends: [./p.yaml]", "approval: {mode: ask}")
	dir := writeFiles(t, map[string]string{"p.yaml": parent, "c.yaml": child})
	_, err := Load(filepath.Join(dir, "c.yaml"))
	if err == nil || !strings.Contains(err.Error(), "c.yaml:7:20: spec.approval.mode: a parent turns asking off") {
		t.Fatalf("got %v, want the mode error at c.yaml:7:20", err)
	}
}

func TestWithGrants(t *testing.T) {
	p, err := Parse("t.yaml", []byte(policyYAML("g", "egress:", "  - name: web", "    hosts: [a.example.com]", "approval: {}")))
	if err != nil {
		t.Fatal(err)
	}
	q := p.WithGrants([]GrantRule{{ID: "abc", Host: "New.Example.org.", Ports: []int{443}}, {ID: "bad", Host: "10.0.0.1", Ports: []int{80}}})
	if d := p.Decide(Request{Host: "new.example.org", Port: 443, Method: "GET", Path: "/"}); d.Allowed() {
		t.Fatal("WithGrants changed the original policy")
	}
	d := q.Decide(Request{Host: "new.example.org", Port: 443, Method: "GET", Path: "/"})
	if !d.Allowed() || d.Grant != "abc" || d.Rule != "grant:abc" {
		t.Fatalf("got %+v, want allowed by grant abc", d)
	}
	if d := q.Decide(Request{Host: "new.example.org", Port: 80}); d.Allowed() || d.Reason != ReasonPortNotAllowed {
		t.Fatalf("port 80 under a 443 grant: got %v %s, want port_not_allowed", d.Verdict, d.Reason)
	}
	if nd := q.DecideName("new.example.org"); !nd.Allowed() || !slices.Equal(nd.Ports, []int{443}) {
		t.Fatalf("DecideName: got %+v", nd)
	}
	if d := q.Decide(Request{Host: "a.example.com", Port: 443}); !d.Allowed() || d.Grant != "" {
		t.Fatalf("a written rule's decision: got %+v", d)
	}
	if len(q.Rules()) != 2 {
		t.Fatalf("got %d rules, want the written one and one grant (the IP grant skipped)", len(q.Rules()))
	}
}
