package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeFiles writes name → content into a new temporary directory and returns it.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// policyYAML builds a policy file: name, then the lines of its spec (each indented by two).
func policyYAML(name string, spec ...string) string {
	return "apiVersion: airlock/v1\nkind: EgressPolicy\nmetadata:\n  name: " + name + "\nspec:\n" +
		"  " + strings.Join(spec, "\n  ") + "\n"
}

// base is the parent most extends tests narrow.
var base = policyYAML("base",
	"egress:",
	"  - name: web",
	"    hosts: [\"*.example.com\", api.example.org]",
	"    ports: [80, 443]",
	"  - name: api",
	"    hosts: [api.example.net]",
	"    ports: [443]",
	"    http:",
	"      - methods: [GET, HEAD]",
	"        paths: [\"/repos/**\", \"/*/*/git-upload-pack\"]",
	"      - methods: [POST]",
	"        paths: [\"/repos/*/issues\"]",
	"  - name: db",
	"    cidrs: [10.20.0.0/16]",
	"    ports: [5432]",
	"    protocol: tcp",
	"  - name: internal",
	"    cidrs: [10.30.0.0/16]",
	"    ports: [8080]",
	"secrets:",
	"  token: {env: TOKEN}",
	"dns:",
	"  upstreams: [\"10.96.0.10:53\"]",
	"  minTTL: 5s",
	"llm:",
	"  providers:",
	"    openai: {baseURL: \"https://api.openai.com\"}",
	"  models:",
	"    - {name: small, provider: openai}",
	"    - {name: big, provider: openai}",
	"  budget: {usd: 5, tokens: 1000}",
)

func TestExtendsAllowed(t *testing.T) {
	tests := []struct {
		name  string
		spec  []string
		check func(t *testing.T, p *Policy)
	}{
		{"no rules inherits the parent's", []string{"extends: [./base.yaml]"}, func(t *testing.T, p *Policy) {
			wantDecision{Allow, false, "web", ReasonRuleMatched, "", "", false, "www.example.com", 443}.
				check(t, p.Decide(Request{Host: "www.example.com", Port: 443}))
			if got := len(p.Rules()); got != 4 {
				t.Errorf("got %d rules, want 4", got)
			}
		}},
		{"narrower host and port", []string{"extends: [./base.yaml]", "egress:",
			"  - {name: a, hosts: [www.example.com, \"*.a.example.com\", api.example.org], ports: [443]}"}, func(t *testing.T, p *Policy) {
			wantDecision{Deny, false, "", ReasonNoRule, "", "", false, "b.example.com", 443}.
				check(t, p.Decide(Request{Host: "b.example.com", Port: 443}))
			wantDecision{Allow, false, "a", ReasonRuleMatched, "", "", false, "x.a.example.com", 443}.
				check(t, p.Decide(Request{Host: "x.a.example.com", Port: 443}))
		}},
		{"equal wildcard", []string{"extends: [./base.yaml]", "egress:", "  - {name: a, hosts: [\"*.example.com\"]}"}, nil},
		{"L7 under no L7", []string{"extends: [./base.yaml]", "egress:",
			"  - {name: a, hosts: [www.example.com], http: [{methods: [GET], paths: [\"/x/**\"]}]}"}, nil},
		{"narrower method and path", []string{"extends: [./base.yaml]", "egress:",
			"  - name: a", "    hosts: [api.example.net]", "    ports: [443]", "    http:",
			"      - {methods: [GET], paths: [\"/repos/acme/**\", \"/acme/widget.git/git-upload-pack\"]}",
			"      - {methods: [post], paths: [\"/repos/acme/issues\"]}"}, nil},
		{"methods split over parent entries", []string{"extends: [./base.yaml]", "egress:",
			"  - {name: a, hosts: [api.example.net], ports: [443], http: [{methods: [GET, POST], paths: [\"/repos/x/issues\"]}]}"}, nil},
		{"narrower cidr", []string{"extends: [./base.yaml]", "egress:",
			"  - {name: a, cidrs: [10.20.5.0/24], ports: [5432], protocol: tcp}",
			"  - {name: b, cidrs: [10.30.0.1/32], ports: [8080], http: [{methods: [GET]}]}"}, nil},
		{"inject a parent secret", []string{"extends: [./base.yaml]", "egress:",
			"  - {name: a, hosts: [www.example.com], inject: [{header: X-Token, value: '{{ secret \"token\" }}'}]}"},
			func(t *testing.T, p *Policy) {
				d := p.Decide(Request{Host: "www.example.com", Method: "GET", Path: "/"})
				if strings.Join(d.Secrets, ",") != "token" {
					t.Errorf("got secrets %v, want [token]", d.Secrets)
				}
			}},
		{"secrets merge, child overrides", []string{"extends: [./base.yaml]", "secrets:", "  token: {env: CHILD}", "  extra: {file: /x}"},
			func(t *testing.T, p *Policy) {
				s := p.Secrets()
				if s["token"].Env != "CHILD" || s["extra"].File != "/x" || len(s) != 2 {
					t.Errorf("got %+v, want token from CHILD and extra", s)
				}
			}},
		{"dns override", []string{"extends: [./base.yaml]", "dns: {upstreams: [\"10.0.0.53:53\"], onDeny: nxdomain}"},
			func(t *testing.T, p *Policy) {
				d := p.DNS()
				if d.Upstreams[0] != "10.0.0.53:53" || d.OnDeny != OnDenyNXDomain || d.MinTTL != 5*time.Second {
					t.Errorf("got %+v, want child upstreams and onDeny, parent minTTL", d)
				}
			}},
		{"llm narrowing", []string{"extends: [./base.yaml]", "llm:", "  models: [{name: small, provider: openai}]", "  budget: {usd: 2}"},
			func(t *testing.T, p *Policy) {
				l := p.LLM()
				if len(l.Models) != 1 || l.Budget.USD != 2 || l.Budget.Tokens != 1000 {
					t.Errorf("got %+v, want one model, usd 2, tokens 1000 from the parent", l)
				}
			}},
		{"builtin parent", []string{"extends: [repo-read]", "egress:",
			"  - {name: gh, hosts: [api.github.com], ports: [443], http: [{methods: [GET], paths: [\"/repos/acme/**\"]}]}",
			"  - {name: fetch, hosts: [github.com], ports: [443], http: [{methods: [POST], paths: [\"/acme/widget.git/git-upload-pack\"]}]}",
			"  - {name: pypi, hosts: [pypi.org], http: [{methods: [GET]}]}"}, nil},
		{"two parents: union", []string{"extends: [./base.yaml, repo-read]"}, func(t *testing.T, p *Policy) {
			if got := p.Decide(Request{Host: "pypi.org", Port: 443}); !got.Allowed() {
				t.Errorf("got %+v, want pypi.org allowed by repo-read", got)
			}
			if got := len(p.Parents()); got != 2 {
				t.Errorf("got %d parents, want 2", got)
			}
		}},
		{"grandchild", []string{"extends: [./mid.yaml]", "egress:", "  - {name: a, hosts: [x.example.com], ports: [443]}"}, nil},
		{"enforce under report", []string{"extends: [./report.yaml]", "mode: enforce"}, nil},
		{"report under report", []string{"extends: [./report.yaml]", "mode: report"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeFiles(t, map[string]string{
				"base.yaml":   base,
				"mid.yaml":    policyYAML("mid", "extends: [./base.yaml]", "egress:", "  - {name: m, hosts: [\"*.example.com\"], ports: [443]}"),
				"report.yaml": policyYAML("rep", "mode: report", "egress:", "  - {name: r, hosts: [example.com]}"),
				"child.yaml":  policyYAML("child", tc.spec...),
			})
			p, err := Load(filepath.Join(dir, "child.yaml"))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if tc.check != nil {
				tc.check(t, p)
			}
		})
	}
}

func TestExtendsRejected(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string // besides base.yaml
		spec  []string          // child.yaml's spec; line 6 is the first
		want  []string
	}{
		{"host", nil, []string{"extends: [./base.yaml]", "egress:", "  - {name: pypi, hosts: [pypi.org]}"},
			[]string{`child.yaml:8:28: spec.egress[0]: rule "pypi" allows host "pypi.org" that no parent (./base.yaml) allows`}},
		{"wider wildcard", nil, []string{"extends: [./base.yaml]", "egress:", "  - {name: a, hosts: [\"*.org\", \"*.example.org\"]}"},
			[]string{
				`child.yaml:8:25: spec.egress[0].hosts[0]: "*.org" would match every domain under the public suffix "org"; name a registrable domain, e.g. "*.example.org"`,
				`child.yaml:8:34: spec.egress[0]: rule "a" allows host "*.example.org" that no parent (./base.yaml) allows`,
			}},
		{"wildcard under exact", nil, []string{"extends: [./base.yaml]", "egress:", "  - {name: a, hosts: [\"*.api.example.org\"]}"},
			[]string{`child.yaml:8:25: spec.egress[0]: rule "a" allows host "*.api.example.org" that no parent (./base.yaml) allows`}},
		{"port", nil, []string{"extends: [./base.yaml]", "egress:", "  - {name: a, hosts: [api.example.net], ports: [8443]}"},
			[]string{`child.yaml:8:25: spec.egress[0]: rule "a" allows port 8443 on host "api.example.net" that no parent (./base.yaml) allows`}},
		{"default ports", nil, []string{"extends: [./base.yaml]", "egress:", "  - {name: a, hosts: [api.example.net], http: [{methods: [GET]}]}"},
			[]string{`child.yaml:8:25: spec.egress[0]: rule "a" allows port 80 on host "api.example.net" that no parent (./base.yaml) allows`}},
		{"method", nil, []string{"extends: [./base.yaml]", "egress:",
			"  - {name: a, hosts: [api.example.net], ports: [443], http: [{methods: [DELETE], paths: [\"/repos/x\"]}]}"},
			[]string{`child.yaml:8:25: spec.egress[0]: rule "a" allows DELETE "/repos/x" on host "api.example.net" port 443 that no parent (./base.yaml) allows`}},
		{"path", nil, []string{"extends: [./base.yaml]", "egress:",
			"  - {name: a, hosts: [api.example.net], ports: [443], http: [{methods: [GET], paths: [\"/repos/x\", \"/orgs/**\", \"/**\"]}]}"},
			[]string{`child.yaml:8:25: spec.egress[0]: rule "a" allows GET "/orgs/**" on host "api.example.net" port 443 that no parent (./base.yaml) allows`}},
		{"path glob not provable", nil, []string{"extends: [./base.yaml]", "egress:",
			"  - {name: a, hosts: [api.example.net], ports: [443], http: [{methods: [POST], paths: [\"/repos/**/issues\"]}]}"},
			[]string{`child.yaml:8:25: spec.egress[0]: rule "a" allows POST "/repos/**/issues" on host "api.example.net" port 443 that no parent (./base.yaml) allows`}},
		{"every method under methods", nil, []string{"extends: [./base.yaml]", "egress:",
			"  - {name: a, hosts: [api.example.net], ports: [443], http: [{paths: [\"/repos/x\"]}]}"},
			[]string{`child.yaml:8:25: spec.egress[0]: rule "a" allows every method on "/repos/x" on host "api.example.net" port 443 that no parent (./base.yaml) allows`}},
		{"no L7 under L7", nil, []string{"extends: [./base.yaml]", "egress:", "  - {name: a, hosts: [api.example.net], ports: [443]}"},
			[]string{`child.yaml:8:25: spec.egress[0]: rule "a" allows every method and path on host "api.example.net" port 443 that no parent (./base.yaml) allows`}},
		{"missing SNI", nil, []string{"extends: [./base.yaml]", "egress:", "  - {name: a, hosts: [www.example.com], ports: [443], allowMissingSNI: true}"},
			[]string{`child.yaml:8:25: spec.egress[0]: rule "a" allows a missing TLS server name (allowMissingSNI) on host "www.example.com" port 443 that no parent (./base.yaml) allows`}},
		{"wider cidr", nil, []string{"extends: [./base.yaml]", "egress:", "  - {name: a, cidrs: [10.0.0.0/8], ports: [5432], protocol: tcp}"},
			[]string{`child.yaml:8:25: spec.egress[0]: rule "a" allows CIDR 10.0.0.0/8 that no parent (./base.yaml) allows`}},
		{"cidr port", nil, []string{"extends: [./base.yaml]", "egress:", "  - {name: a, cidrs: [10.20.1.0/24], ports: [5433], protocol: tcp}"},
			[]string{`child.yaml:8:25: spec.egress[0]: rule "a" allows port 5433 on CIDR 10.20.1.0/24 that no parent (./base.yaml) allows`}},
		{"cidr protocol", nil, []string{"extends: [./base.yaml]", "egress:", "  - {name: a, cidrs: [10.30.1.0/24], ports: [8080], protocol: tcp}"},
			[]string{`child.yaml:8:25: spec.egress[0]: rule "a" allows protocol tcp on CIDR 10.30.1.0/24 port 8080 that no parent (./base.yaml) allows`}},
		{"report under enforce", nil, []string{"extends: [./base.yaml]", "mode: report"},
			[]string{`child.yaml:7:9: spec.mode: mode report under the enforce parent "base" would allow what the parent denies; use enforce or leave mode out`}},
		{"offline parent", nil, []string{"extends: [offline]", "egress:", "  - {name: a, hosts: [example.com]}"},
			[]string{`child.yaml:8:25: spec.egress[0]: rule "a" allows host "example.com" that no parent (offline) allows`}},
		{"cycle", map[string]string{
			"a.yaml": policyYAML("a", "extends: [./b.yaml]"),
			"b.yaml": policyYAML("b", "extends: [./a.yaml]"),
		}, []string{"extends: [./a.yaml]"},
			[]string{
				`a.yaml:6:13: spec.extends[0]: parent "./b.yaml" does not load; fix its errors first`,
				`b.yaml:6:13: spec.extends[0]: extends cycle: a.yaml → b.yaml → a.yaml; remove one of the extends`,
				`child.yaml:6:13: spec.extends[0]: parent "./a.yaml" does not load; fix its errors first`,
			}},
		{"self", nil, []string{"extends: [./child.yaml]"},
			[]string{`child.yaml:6:13: spec.extends[0]: extends cycle: child.yaml → child.yaml; remove one of the extends`}},
		{"missing parent", nil, []string{"extends: [./absent.yaml]"},
			[]string{`child.yaml:6:13: spec.extends[0]: cannot read parent "./absent.yaml": open absent.yaml: no such file or directory`}},
		{"broken parent", map[string]string{"broken.yaml": policyYAML("broken", "mode: loud")}, []string{"extends: [./broken.yaml]"},
			[]string{
				`broken.yaml:6:9: spec.mode: unknown mode "loud"; use "enforce" or "report"`,
				`child.yaml:6:13: spec.extends[0]: parent "./broken.yaml" does not load; fix its errors first`,
			}},
		{"listed twice", nil, []string{"extends: [./base.yaml, ./base.yaml]"},
			[]string{`child.yaml:6:26: spec.extends[1]: "./base.yaml" is listed twice; remove one`}},
		{"llm widening", nil, []string{"extends: [./base.yaml]", "llm:", "  models: [{name: huge, provider: openai}]", "  budget: {usd: 50}"},
			[]string{
				`child.yaml:8:21: spec.llm.models[0].name: model "huge" is not among the parents' models; a child only narrows`,
				`child.yaml:9:19: spec.llm.budget.usd: 50 exceeds the parents' cap of 5; a child only narrows`,
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{"base.yaml": base, "child.yaml": policyYAML("child", tc.spec...)}
			for k, v := range tc.files {
				files[k] = v
			}
			dir := writeFiles(t, files)
			_, err := Load(filepath.Join(dir, "child.yaml"))
			if err == nil {
				t.Fatal("Load succeeded, want errors")
			}
			got := strings.ReplaceAll(err.Error(), dir+string(filepath.Separator), "")
			got = strings.ReplaceAll(got, dir, "DIR")
			if got != strings.Join(tc.want, "\n") {
				t.Errorf("got errors:\n%s\nwant:\n%s", got, strings.Join(tc.want, "\n"))
			}
		})
	}
}
