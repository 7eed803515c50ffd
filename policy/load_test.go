package policy

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// header is the first five lines of every test policy; the body starts on line 6.
const header = "apiVersion: airlock/v1\nkind: EgressPolicy\nmetadata:\n  name: t\nspec:\n"

// errorLines returns the lines of err's text, or nil for no error.
func errorLines(err error) []string {
	if err == nil {
		return nil
	}
	return strings.Split(err.Error(), "\n")
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{
			name: "unknown field",
			yaml: header + "  egress:\n    - name: a\n      hosts: [example.com]\n      prots: [443]\n",
			want: []string{`t.yaml:9:7: spec.egress[0].prots: unknown field "prots"; did you mean "ports"?`},
		},
		{
			name: "unknown field without suggestion",
			yaml: header + "  colour: red\n",
			want: []string{`t.yaml:6:3: spec.colour: unknown field "colour"; known fields: extends, mode, dns, egress, secrets, llm, report, approval, usage`},
		},
		{
			name: "unknown top-level field",
			yaml: "apiVersion: airlock/v1\nkind: EgressPolicy\nmetadata:\n  name: t\nsepc: {}\n",
			want: []string{`t.yaml:5:1: sepc: unknown field "sepc"; did you mean "spec"?`},
		},
		{
			name: "wrong type list",
			yaml: header + "  egress:\n    - name: a\n      hosts: example.com\n",
			want: []string{`t.yaml:8:14: spec.egress[0].hosts: want a list, got a string ("example.com"); write a list: [example.com]`},
		},
		{
			name: "wrong type port",
			yaml: header + "  egress:\n    - name: a\n      hosts: [example.com]\n      ports: [https]\n",
			want: []string{`t.yaml:9:15: spec.egress[0].ports[0]: want an integer, got a string ("https")`},
		},
		{
			name: "wrong type string",
			yaml: header + "  mode: [enforce]\n",
			want: []string{`t.yaml:6:9: spec.mode: want a string, got a list`},
		},
		{
			name: "wrong type mapping",
			yaml: header + "  dns: refused\n",
			want: []string{`t.yaml:6:8: spec.dns: want a mapping, got a string ("refused")`},
		},
		{
			name: "wrong type number for name",
			yaml: "apiVersion: airlock/v1\nkind: EgressPolicy\nmetadata:\n  name: 2024\n",
			want: []string{`t.yaml:4:9: metadata.name: want a string, got an integer (2024); quote it: "2024"`},
		},
		{
			name: "duration without unit",
			yaml: header + "  dns:\n    minTTL: 5\n",
			want: []string{`t.yaml:7:13: spec.dns.minTTL: a duration needs a unit; use "5s"`},
		},
		{
			name: "duplicate key",
			yaml: header + "  egress:\n    - name: a\n      hosts: [example.com]\n      hosts: [example.org]\n",
			want: []string{`t.yaml:9:7: spec.egress[0].hosts: duplicate key "hosts" (first at line 8); remove one`},
		},
		{
			name: "second document",
			yaml: header + "  mode: enforce\n---\napiVersion: airlock/v1\n",
			want: []string{`t.yaml:7:1: a second YAML document starts here; a policy file holds exactly one (remove the "---")`},
		},
		{
			name: "syntax error",
			yaml: header + "  egress: [\n",
			want: []string{`t.yaml:6: invalid YAML: did not find expected node content`},
		},
		{
			name: "empty",
			yaml: "# nothing\n",
			want: []string{`t.yaml:1:1: empty policy; a policy starts with apiVersion: airlock/v1`},
		},
		{
			name: "not a mapping",
			yaml: "- a\n",
			want: []string{`t.yaml:1:1: a policy is a mapping that starts with apiVersion: airlock/v1, not a list`},
		},
		{
			name: "alias",
			yaml: header + "  extends: &p [repo-read]\n  egress: *p\n",
			want: []string{`t.yaml:7:11: spec.egress: aliases (*p) are not supported in a policy; write the value out`},
		},
		{
			name: "wrong apiVersion",
			yaml: "apiVersion: airlock/v2\nkind: EgressPolicy\nmetadata:\n  name: t\n",
			want: []string{`t.yaml:1:13: apiVersion: unsupported apiVersion "airlock/v2"; use "airlock/v1"`},
		},
		{
			name: "missing apiVersion and wrong kind",
			yaml: "kind: Policy\nmetadata:\n  name: t\n",
			want: []string{
				`t.yaml:1:1: apiVersion: required; add apiVersion: airlock/v1`,
				`t.yaml:1:7: kind: unsupported kind "Policy"; use "EgressPolicy"`,
			},
		},
		{
			name: "missing name",
			yaml: "apiVersion: airlock/v1\nkind: EgressPolicy\nmetadata: {}\n",
			want: []string{`t.yaml:3:1: metadata.name: required; name the policy, e.g. name: repo-read`},
		},
		{
			name: "bad mode",
			yaml: header + "  mode: enforced\n",
			want: []string{`t.yaml:6:9: spec.mode: unknown mode "enforced"; did you mean "enforce"?`},
		},
		{
			name: "bad host globs",
			yaml: header + "  egress:\n    - name: a\n      hosts:\n        - \"a.*.example.com\"\n        - \"*\"\n        - \"foo*.example.com\"\n        - \".example.com\"\n        - \"a..example.com\"\n        - \"bad_host.example.com\"\n",
			want: []string{
				`t.yaml:9:11: spec.egress[0].hosts[0]: "*" is allowed only as the whole first label; use "*.example.com"`,
				`t.yaml:10:11: spec.egress[0].hosts[1]: "*" would allow every host; name the hosts, or use "*.example.com" for subdomains`,
				`t.yaml:11:11: spec.egress[0].hosts[2]: "*" is allowed only as the whole first label; use "*.example.com"`,
				`t.yaml:12:11: spec.egress[0].hosts[3]: a leading dot is not a wildcard; use "*.example.com" for subdomains and "example.com" for the domain itself`,
				`t.yaml:13:11: spec.egress[0].hosts[4]: invalid host "a..example.com": empty label`,
				`t.yaml:14:11: spec.egress[0].hosts[5]: invalid host "bad_host.example.com": not a valid host name (disallowed rune U+005F)`,
			},
		},
		{
			name: "ip literal in hosts",
			yaml: header + "  egress:\n    - name: a\n      hosts: [\"10.1.2.3\", \"[fd00::1]\"]\n",
			want: []string{
				`t.yaml:8:15: spec.egress[0].hosts[0]: IP addresses go in cidrs, not hosts; use cidrs: ["10.1.2.3/32"]`,
				`t.yaml:8:27: spec.egress[0].hosts[1]: IP addresses go in cidrs, not hosts; use cidrs: ["fd00::1/128"]`,
			},
		},
		{
			name: "public suffix wildcards",
			yaml: header + "  egress:\n    - name: a\n      hosts: [\"*.com\", \"*.co.uk\", \"*.github.io\"]\n",
			want: []string{
				`t.yaml:8:15: spec.egress[0].hosts[0]: "*.com" would match every domain under the public suffix "com"; name a registrable domain, e.g. "*.example.com"`,
				`t.yaml:8:24: spec.egress[0].hosts[1]: "*.co.uk" would match every domain under the public suffix "co.uk"; name a registrable domain, e.g. "*.example.co.uk"`,
				`t.yaml:8:35: spec.egress[0].hosts[2]: "*.github.io" would match every domain under the public suffix "github.io"; name a registrable domain, e.g. "*.example.github.io"`,
			},
		},
		{
			name: "bad cidrs",
			yaml: header + "  egress:\n    - name: a\n      cidrs: [10.0.0.1/8, 10.0.0.1, nope, \"::ffff:10.0.0.0/104\", 10.0.0.0/33]\n",
			want: []string{
				`t.yaml:8:15: spec.egress[0].cidrs[0]: "10.0.0.1/8" has bits set past the prefix length; use "10.0.0.0/8"`,
				`t.yaml:8:27: spec.egress[0].cidrs[1]: a CIDR needs a prefix length; use "10.0.0.1/32"`,
				`t.yaml:8:37: spec.egress[0].cidrs[2]: invalid CIDR "nope"; use an address range such as "10.20.0.0/16"`,
				`t.yaml:8:43: spec.egress[0].cidrs[3]: write IPv4-mapped ranges in IPv4 form; use "10.0.0.0/8"`,
				`t.yaml:8:66: spec.egress[0].cidrs[4]: invalid CIDR "10.0.0.0/33"; use an address range such as "10.20.0.0/16"`,
			},
		},
		{
			name: "bad ports",
			yaml: header + "  egress:\n    - name: a\n      hosts: [example.com]\n      ports: [0, 65536, 443, 443, -1]\n",
			want: []string{
				`t.yaml:9:15: spec.egress[0].ports[0]: port 0 is out of range; use 1-65535`,
				`t.yaml:9:18: spec.egress[0].ports[1]: port 65536 is out of range; use 1-65535`,
				`t.yaml:9:30: spec.egress[0].ports[3]: port 443 is listed twice; remove one`,
				`t.yaml:9:35: spec.egress[0].ports[4]: port -1 is out of range; use 1-65535`,
			},
		},
		{
			name: "non-integer port",
			yaml: header + "  egress:\n    - name: a\n      hosts: [example.com]\n      ports: [44.3]\n",
			want: []string{`t.yaml:9:15: spec.egress[0].ports[0]: want an integer, got a number (44.3)`},
		},
		{
			name: "duplicate rule name",
			yaml: header + "  egress:\n    - name: a\n      hosts: [a.example]\n    - name: a\n      hosts: [b.example]\n",
			want: []string{`t.yaml:9:13: spec.egress[1].name: duplicate rule name "a" (first at spec.egress[0]); rule names must be unique`},
		},
		{
			name: "rule without destination",
			yaml: header + "  egress:\n    - name: a\n      ports: [443]\n",
			want: []string{`t.yaml:7:7: spec.egress[0]: rule "a" names no destination; add hosts (names) or cidrs (address ranges)`},
		},
		{
			name: "rule without name",
			yaml: header + "  egress:\n    - hosts: [example.com]\n",
			want: []string{`t.yaml:7:7: spec.egress[0].name: required; every rule needs a name, e.g. name: github-api`},
		},
		{
			name: "decode error hides its noise",
			yaml: header + "  egress:\n    - name: a\n      hots: [example.com]\n",
			want: []string{`t.yaml:8:7: spec.egress[0].hots: unknown field "hots"; did you mean "hosts"?`},
		},
		{
			name: "inject undefined secret and bad template",
			yaml: header + "  egress:\n    - name: a\n      hosts: [example.com]\n      inject:\n" +
				"        - {header: Authorization, value: 'Bearer {{ secret \"tokn\" }}'}\n" +
				"        - {header: X-A, value: '{{ env \"HOME\" }}'}\n" +
				"        - {header: X-B, value: 'a {{ secret \"token\" '}\n" +
				"        - {header: Host, value: x}\n" +
				"  secrets:\n    token: {env: TOKEN}\n",
			want: []string{
				`t.yaml:10:42: spec.egress[0].inject[0].value: secret "tokn" is not defined in spec.secrets; did you mean "token"?`,
				`t.yaml:11:32: spec.egress[0].inject[1].value: unknown template syntax "{{ env "HOME" }}"; use {{ secret "name" }}`,
				`t.yaml:12:32: spec.egress[0].inject[2].value: "{{" without "}}"; a placeholder is {{ secret "name" }}`,
				`t.yaml:13:20: spec.egress[0].inject[3].header: header Host frames the request and cannot be injected`,
			},
		},
		{
			name: "llm references",
			yaml: header + "  llm:\n    providers:\n      openai: {baseURL: \"https://api.openai.com\", apiKey: {secret: openai-key}}\n" +
				"      local: {baseURL: \"ftp://x\"}\n    models:\n      - {name: m, provider: opneai}\n      - {name: m, provider: local}\n" +
				"    budget: {usd: -1}\n",
			want: []string{
				`t.yaml:8:68: spec.llm.providers.openai.apiKey.secret: secret "openai-key" is not defined in spec.secrets; define it there`,
				`t.yaml:9:24: spec.llm.providers.local.baseURL: invalid base URL "ftp://x"; use an http(s) URL such as "https://api.openai.com"`,
				`t.yaml:11:29: spec.llm.models[0].provider: provider "opneai" is not defined in spec.llm.providers; did you mean "openai"?`,
				`t.yaml:12:16: spec.llm.models[1].name: duplicate model "m" (first at spec.llm.models[0])`,
				`t.yaml:13:19: spec.llm.budget.usd: must be a finite number, 0 or more`,
			},
		},
		{
			name: "methods and paths",
			yaml: header + "  egress:\n    - name: a\n      hosts: [example.com]\n      http:\n" +
				"        - methods: [GTE, get, GET, CONNECT]\n          paths: [\"repos/**\", \"/a/**b\"]\n",
			want: []string{
				`t.yaml:10:21: spec.egress[0].http[0].methods[0]: unknown method "GTE"; did you mean "GET"?`,
				`t.yaml:10:31: spec.egress[0].http[0].methods[2]: method GET is listed twice; remove one`,
				`t.yaml:10:36: spec.egress[0].http[0].methods[3]: CONNECT is decided at connection level; list the methods used inside the tunnel`,
				`t.yaml:11:19: spec.egress[0].http[0].paths[0]: path patterns start with "/"; use "/repos/**"`,
				`t.yaml:11:31: spec.egress[0].http[0].paths[1]: "**" must be a whole segment, e.g. "/repos/**"`,
			},
		},
		{
			name: "unknown profile",
			yaml: header + "  extends: [repo-reed, nothing]\n",
			want: []string{
				`t.yaml:6:13: spec.extends[0]: unknown profile "repo-reed"; did you mean "repo-read"?`,
				`t.yaml:6:24: spec.extends[1]: unknown profile "nothing"; use one of offline, repo-read, repo-write, deployment, or a file path such as "./base.yaml"`,
			},
		},
		{
			name: "secret sources",
			yaml: header + "  secrets:\n    none: {}\n    both: {env: X, file: /x}\n    vault-bad:\n      vault: {version: 2, dynamic: true}\n    bad-env: {env: \"1X\"}\n",
			want: []string{
				`t.yaml:7:5: spec.secrets.none: secret "none" has no source; set exactly one of vault, env or file`,
				`t.yaml:8:5: spec.secrets.both: secret "both" has 2 sources (env, file); set exactly one of vault, env or file`,
				`t.yaml:10:7: spec.secrets.vault-bad.vault.path: required; e.g. path: secret/data/ci/github`,
				`t.yaml:10:24: spec.secrets.vault-bad.vault.version: dynamic secrets have no version; remove version or dynamic`,
				`t.yaml:11:20: spec.secrets.bad-env.env: invalid environment variable name "1X"`,
			},
		},
		{
			name: "http and inject on tcp",
			yaml: header + "  egress:\n    - name: db\n      cidrs: [10.20.0.0/16]\n      ports: [5432]\n      protocol: tcp\n" +
				"      http: [{methods: [GET]}]\n      inject: [{header: X, value: y}]\n    - name: db2\n      cidrs: [10.21.0.0/16]\n      protocol: udp\n",
			want: []string{
				`t.yaml:11:7: spec.egress[0].http: protocol: tcp rules are not proxied, so http rules cannot apply; remove http or use protocol: http`,
				`t.yaml:12:7: spec.egress[0].inject: protocol: tcp rules are not proxied, so nothing can be injected; remove inject or use protocol: http`,
				`t.yaml:15:17: spec.egress[1].protocol: unknown protocol "udp"; use "http" or "tcp"`,
			},
		},
		{
			name: "tcp needs ports",
			yaml: header + "  egress:\n    - name: db\n      cidrs: [10.20.0.0/16]\n      protocol: tcp\n",
			want: []string{`t.yaml:7:7: spec.egress[0].ports: required for protocol: tcp; name the ports, e.g. ports: [5432]`},
		},
		{
			name: "dns",
			yaml: header + "  dns:\n    upstreams: [\"10.96.0.10\", \"dns.example:53\", \"10.0.0.1:99999\"]\n    onDeny: drop\n    maxIPsPerName: -1\n",
			want: []string{
				`t.yaml:7:17: spec.dns.upstreams[0]: add the port; use "10.96.0.10:53"`,
				`t.yaml:7:31: spec.dns.upstreams[1]: resolver "dns.example" must be an IP address (a name would need a resolver); e.g. "10.96.0.10:53"`,
				`t.yaml:7:49: spec.dns.upstreams[2]: invalid port "99999"; use 1-65535, usually 53`,
				`t.yaml:8:13: spec.dns.onDeny: unknown answer "drop"; use "refused" or "nxdomain"`,
				`t.yaml:9:20: spec.dns.maxIPsPerName: must not be negative; leave it out for the default (64)`,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse("t.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatalf("Parse succeeded (%q), want errors", p.Name())
			}
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Errorf("error does not wrap ErrInvalidPolicy: %v", err)
			}
			got := errorLines(err)
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("got errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestLoadErrorFields(t *testing.T) {
	_, err := Parse("t.yaml", []byte(header+"  egress:\n    - name: a\n      hosts: [example.com]\n      ports: [0]\n"))
	var le *LoadError
	if !errors.As(err, &le) {
		t.Fatalf("got %T, want *LoadError", err)
	}
	want := LoadError{File: "t.yaml", Line: 9, Col: 15, Field: "spec.egress[0].ports[0]",
		Message: "port 0 is out of range; use 1-65535", Err: ErrInvalidPolicy}
	if *le != want {
		t.Errorf("got %+v, want %+v", *le, want)
	}
}

func TestLoadErrorString(t *testing.T) {
	tests := []struct {
		name string
		err  LoadError
		want string
	}{
		{"full", LoadError{File: "a.yaml", Line: 3, Col: 5, Field: "spec.mode", Message: "bad"}, "a.yaml:3:5: spec.mode: bad"},
		{"no column", LoadError{File: "a.yaml", Line: 3, Field: "spec", Message: "bad"}, "a.yaml:3: spec: bad"},
		{"no position", LoadError{File: "a.yaml", Message: "bad"}, "a.yaml: bad"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "absent.yaml"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("got %v, want an error matching fs.ErrNotExist", err)
	}
	if errors.Is(err, ErrInvalidPolicy) {
		t.Errorf("absent file reported as invalid: %v", err)
	}
}

func TestLoadTooLarge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(path, []byte(header+strings.Repeat("# padding\n", maxFileSize/10+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); !errors.Is(err, ErrInvalidPolicy) {
		t.Errorf("got %v, want an error wrapping ErrInvalidPolicy", err)
	}
}

func TestLoadDefaults(t *testing.T) {
	p, err := Parse("t.yaml", []byte(header+"  egress:\n    - name: a\n      hosts: [\"Example.COM.\", \"*.B\u00fccher.example\"]\n"+
		"      http: [{methods: [get]}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	rules := p.Rules()
	if len(rules) != 1 {
		t.Fatalf("got %d rules, want 1", len(rules))
	}
	r := rules[0]
	checks := []struct {
		name      string
		got, want any
	}{
		{"mode", p.Mode(), ModeEnforce},
		{"ports", formatPorts(r.Ports), "[80, 443]"},
		{"protocol", r.Protocol, ProtocolHTTP},
		{"hosts", strings.Join(r.Hosts, ","), "example.com,*.xn--bcher-kva.example"},
		{"methods", strings.Join(r.HTTP[0].Methods, ","), "GET"},
		{"dns onDeny", p.DNS().OnDeny, OnDenyRefused},
		{"dns maxIPsPerName", p.DNS().MaxIPsPerName, DefaultMaxIPsPerName},
		{"source", p.Source(), "t.yaml"},
		{"name", p.Name(), "t"},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if c.got != c.want {
				t.Errorf("got %v, want %v", c.got, c.want)
			}
		})
	}
}

func TestAccessorsReturnCopies(t *testing.T) {
	p, err := Parse("t.yaml", []byte(header+"  egress:\n    - name: a\n      hosts: [example.com]\n"+
		"      http: [{methods: [GET], paths: [\"/a\"]}]\n  secrets:\n    s: {vault: {path: x}}\n"+
		"  dns: {upstreams: [\"10.0.0.1:53\"]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := p.Rules()
	r[0].Hosts[0], r[0].Ports[0], r[0].HTTP[0].Methods[0] = "evil.com", 1, "DELETE"
	p.Secrets()["s"].Vault.Path = "changed"
	p.DNS().Upstreams[0] = "changed"
	if got := p.Decide(Request{Host: "example.com", Method: "GET", Path: "/a"}); !got.Allowed() {
		t.Errorf("policy changed through an accessor: %+v", got)
	}
	if got := p.Secrets()["s"].Vault.Path; got != "x" {
		t.Errorf("got %q, want %q", got, "x")
	}
	if got := p.DNS().Upstreams[0]; got != "10.0.0.1:53" {
		t.Errorf("got %q, want %q", got, "10.0.0.1:53")
	}
}
