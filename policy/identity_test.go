package policy

import (
	"slices"
	"strings"
	"testing"
)

// identitiesPolicy is a sandbox policy with two identities: a reviewer that may only read
// the git host and holds no secret, and an author that may push and holds the token.
var identitiesPolicy = policyYAML("two-agents",
	"egress:",
	"  - name: git-api",
	"    hosts: [git.example.com]",
	"    ports: [443]",
	"    http:",
	"      - methods: [GET, HEAD, POST]",
	"        paths: [\"/repos/**\"]",
	"    inject:",
	"      - header: Authorization",
	"        value: 'Bearer {{ secret \"token\" }}'",
	"  - name: pypi",
	"    hosts: [pypi.org]",
	"  - name: ssh",
	"    cidrs: [198.18.7.0/24]",
	"    ports: [22]",
	"    protocol: tcp",
	"secrets:",
	"  token: {env: TOKEN}",
	"  llm-key: {env: LLM_KEY}",
	"llm:",
	"  providers:",
	"    openai: {baseURL: \"https://api.openai.com\", apiKey: {secret: llm-key}}",
	"  models:",
	"    - {name: small, provider: openai, fallbacks: [big]}",
	"    - {name: big, provider: openai}",
	"  budget: {tokens: 1000, usd: 2}",
	"identities:",
	"  reviewer:",
	"    egress:",
	"      - name: git-read",
	"        hosts: [git.example.com]",
	"        ports: [443]",
	"        http:",
	"          - methods: [GET, HEAD]",
	"            paths: [\"/repos/**\"]",
	"    llm:",
	"      models: [small]",
	"      budget: {tokens: 100}",
	"  author:",
	"    secrets: [token]",
)

func TestIdentityDecisions(t *testing.T) {
	p := mustParse(t, identitiesPolicy)
	if got, want := strings.Join(p.IdentityNames(), ","), "author,reviewer"; got != want {
		t.Fatalf("IdentityNames = %q, want %q", got, want)
	}
	reviewer, ok := p.Identity("reviewer")
	if !ok || reviewer.IdentityName() != "reviewer" || reviewer.Name() != "two-agents" {
		t.Fatalf("Identity(reviewer) = %v, %v", reviewer, ok)
	}
	author, _ := p.Identity("author")
	if _, ok := p.Identity("nobody"); ok {
		t.Fatal("Identity(nobody) exists")
	}
	tests := []struct {
		name     string
		pol      *Policy
		method   string
		url      string
		want     Verdict
		rule     string
		secrets  string
		identity string
	}{
		{"reviewer reads", reviewer, "GET", "https://git.example.com/repos/a/b", Allow, "git-read", "", "reviewer"},
		{"reviewer may not push", reviewer, "POST", "https://git.example.com/repos/a/b/git-receive-pack", Deny, "git-read", "", "reviewer"},
		{"reviewer lost pypi", reviewer, "GET", "https://pypi.org/simple/", Deny, "", "", "reviewer"},
		{"author pushes with the token", author, "POST", "https://git.example.com/repos/a/b/git-receive-pack", Allow, "git-api", "token", "author"},
		{"author keeps pypi", author, "GET", "https://pypi.org/simple/", Allow, "pypi", "", "author"},
		{"sandbox keeps everything", p, "POST", "https://git.example.com/repos/a/b", Allow, "git-api", "token", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ex, err := tc.pol.Explain(tc.url, tc.method)
			if err != nil {
				t.Fatal(err)
			}
			if ex.Decision != tc.want.String() || ex.Rule != tc.rule || strings.Join(ex.Secrets, ",") != tc.secrets || ex.Identity != tc.identity {
				t.Errorf("got %s rule %q secrets %v identity %q, want %s rule %q secrets %q identity %q",
					ex.Decision, ex.Rule, ex.Secrets, ex.Identity, tc.want, tc.rule, tc.secrets, tc.identity)
			}
		})
	}
	// The raw TCP rule is the author's (no egress of its own: the sandbox's rules), not the
	// reviewer's (its own rules name none): the kernel enforces each identity's.
	if got := author.CIDRRules(); len(got) != 1 || !got[0].Raw || got[0].Prefix.String() != "198.18.7.0/24" {
		t.Errorf("author: CIDRRules = %v, want the sandbox's one raw rule", got)
	}
	if got := reviewer.CIDRRules(); len(got) != 0 {
		t.Errorf("reviewer: CIDRRules = %v, want none", got)
	}
}

// An identity may list protocol: tcp rules inside the sandbox's: they are its only raw TCP.
func TestIdentityTCPRules(t *testing.T) {
	p := mustParse(t, strings.Replace(identitiesPolicy, "    secrets: [token]", strings.Join([]string{
		"    egress:",
		"      - {name: one-host, cidrs: [198.18.7.5/32], ports: [22], protocol: tcp}",
	}, "\n"), 1))
	author, _ := p.Identity("author")
	got := author.CIDRRules()
	if len(got) != 1 || !got[0].Raw || got[0].Prefix.String() != "198.18.7.5/32" || len(got[0].Ports) != 1 || got[0].Ports[0] != 22 {
		t.Fatalf("author: CIDRRules = %+v, want only 198.18.7.5/32 port 22, raw", got)
	}
	if got := p.CIDRRules(); len(got) != 1 || got[0].Prefix.String() != "198.18.7.0/24" {
		t.Errorf("the sandbox's CIDRRules = %+v, want its own /24", got)
	}
}

func TestIdentityWithoutSecretsInjectsNothing(t *testing.T) {
	p := mustParse(t, strings.Replace(identitiesPolicy, "    secrets: [token]", "    llm: {models: [big]}", 1))
	author, _ := p.Identity("author")
	ex, err := author.Explain("https://git.example.com/repos/a/b", "POST")
	if err != nil {
		t.Fatal(err)
	}
	if ex.Decision != "allow" || len(ex.Secrets) != 0 {
		t.Fatalf("got %s secrets %v, want allow without secrets", ex.Decision, ex.Secrets)
	}
	r, _ := author.Rule("git-api")
	if len(r.Inject) != 0 {
		t.Errorf("author's git-api still injects %v", r.Inject)
	}
	if r, _ := p.Rule("git-api"); len(r.Inject) != 1 {
		t.Errorf("the sandbox's git-api lost its inject entry: %v", r.Inject)
	}
	if _, ok := author.Secrets()["token"]; ok {
		t.Error("author's Secrets() holds token")
	}
	if _, ok := author.Secrets()["llm-key"]; !ok {
		t.Error("author's Secrets() lacks the provider key its model needs")
	}
}

func TestIdentityLLM(t *testing.T) {
	p := mustParse(t, identitiesPolicy)
	reviewer, _ := p.Identity("reviewer")
	llm := reviewer.LLM()
	if len(llm.Models) != 1 || llm.Models[0].Name != "small" || len(llm.Models[0].Fallbacks) != 0 {
		t.Errorf("reviewer models = %+v, want small without the fallback to big", llm.Models)
	}
	if llm.Budget != (Budget{Tokens: 100}) {
		t.Errorf("reviewer budget = %+v, want its own {Tokens: 100}", llm.Budget)
	}
	author, _ := p.Identity("author")
	if got := len(author.LLM().Models); got != 2 {
		t.Errorf("author has %d models, want the sandbox's 2", got)
	}
	if p.LLM().Models[0].Fallbacks[0] != "big" {
		t.Error("narrowing the reviewer changed the sandbox's fallbacks")
	}
}

func TestIdentityErrors(t *testing.T) {
	sandbox := []string{
		"egress:",
		"  - name: git-api",
		"    hosts: [git.example.com]",
		"    ports: [443]",
		"    http:",
		"      - methods: [GET]",
		"  - name: ssh",
		"    cidrs: [198.18.7.0/24]",
		"    ports: [22]",
		"    protocol: tcp",
		"secrets:",
		"  token: {env: TOKEN}",
		"llm:",
		"  providers:",
		"    openai: {baseURL: \"https://api.openai.com\"}",
		"  models: [{name: small, provider: openai}]",
		"  budget: {tokens: 1000}",
		"identities:",
	}
	tests := []struct {
		name string
		spec []string
		want string
	}{
		{"wider host", []string{"  a:", "    egress:", "      - {name: x, hosts: [other.example.com], ports: [443]}"},
			`test.yaml:26:29: spec.identities.a.egress[0]: rule "x" allows host "other.example.com" that no parent (the sandbox policy "p") allows`},
		{"wider method", []string{"  a:", "    egress:", "      - {name: x, hosts: [git.example.com], ports: [443], http: [{methods: [POST]}]}"},
			`spec.identities.a.egress[0]: rule "x" allows POST "/**" on host "git.example.com" port 443 that no parent`},
		{"wider port", []string{"  a:", "    egress:", "      - {name: x, hosts: [git.example.com], ports: [8443], http: [{methods: [GET]}]}"},
			`allows port 8443 on host "git.example.com"`},
		{"wider tcp range", []string{"  a:", "    egress:", "      - {name: x, cidrs: [198.18.0.0/16], ports: [22], protocol: tcp}"},
			`test.yaml:26:29: spec.identities.a.egress[0]: rule "x" allows CIDR 198.18.0.0/16 that no parent (the sandbox policy "p") allows`},
		{"tcp port", []string{"  a:", "    egress:", "      - {name: x, cidrs: [198.18.7.0/24], ports: [2222], protocol: tcp}"},
			`spec.identities.a.egress[0]: rule "x" allows port 2222 on CIDR 198.18.7.0/24 that no parent`},
		{"tcp where the sandbox proxies", []string{"  a:", "    egress:", "      - {name: x, cidrs: [198.18.7.0/24], ports: [22], protocol: http}"},
			`spec.identities.a.egress[0]: rule "x" allows protocol http on CIDR 198.18.7.0/24 port 22 that no parent`},
		{"undefined secret", []string{"  a:", "    secrets: [tokn]"},
			`test.yaml:25:17: spec.identities.a.secrets[0]: secret "tokn" is not defined in spec.secrets; did you mean "token"?`},
		{"inject a secret not held", []string{"  a:", "    egress:", "      - name: x", "        hosts: [git.example.com]", "        ports: [443]",
			"        http: [{methods: [GET]}]", "        inject: [{header: X-T, value: '{{ secret \"token\" }}'}]"},
			`spec.identities.a.egress[0].inject[0].value: identity "a" does not hold secret "token"; add it to spec.identities.a.secrets`},
		{"unknown model", []string{"  a:", "    llm: {models: [big]}"},
			`spec.identities.a.llm.models[0]: model "big" is not among the sandbox's models`},
		{"budget above the sandbox's", []string{"  a:", "    llm: {budget: {tokens: 2000}}"},
			`spec.identities.a.llm.budget.tokens: 2000 exceeds the sandbox's cap of 1000; an identity only narrows`},
		{"bad name", []string{"  Bad_Name: {}"},
			`spec.identities.Bad_Name: invalid identity name "Bad_Name"`},
		{"unknown field", []string{"  a:", "    hosts: [x]"},
			`spec.identities.a.hosts: unknown field`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("test.yaml", []byte(policyYAML("p", append(slices.Clone(sandbox), tc.spec...)...)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestIdentityGrants(t *testing.T) {
	p := mustParse(t, identitiesPolicy)
	g := p.WithGrants([]GrantRule{
		{ID: "g1", Host: "grant.example.com", Ports: []int{443}, Identity: "author"},
		{ID: "g2", Host: "sandbox.example.com", Ports: []int{443}},
	})
	author, _ := g.Identity("author")
	reviewer, _ := g.Identity("reviewer")
	for _, tc := range []struct {
		pol  *Policy
		host string
		want Verdict
	}{
		{author, "grant.example.com", Allow},
		{reviewer, "grant.example.com", Deny},
		{g, "grant.example.com", Deny},
		{g, "sandbox.example.com", Allow},
		{author, "sandbox.example.com", Deny},
	} {
		d := tc.pol.Decide(Request{Scheme: "https", Host: tc.host})
		if d.Verdict != tc.want {
			t.Errorf("%q deciding %s: got %v, want %v", tc.pol.IdentityName(), tc.host, d.Verdict, tc.want)
		}
	}
}

func TestIdentityCases(t *testing.T) {
	p := mustParse(t, identitiesPolicy)
	tests := []struct {
		tc   TestCase
		want string
	}{
		{TestCase{URL: "https://git.example.com/repos/a", Method: "POST", Expect: "deny", Identity: "reviewer"}, ""},
		{TestCase{URL: "https://git.example.com/repos/a", Method: "POST", Expect: "allow", Identity: "reviewer"},
			`POST https://git.example.com/repos/a as reviewer: got deny`},
		{TestCase{URL: "https://git.example.com/repos/a", Expect: "allow", Identity: "ghost"},
			`identity "ghost" is not in spec.identities`},
	}
	for _, tt := range tests {
		got := p.Check(tt.tc)
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("Check(%+v) = %q, want %q", tt.tc, got, tt.want)
		}
	}
}
