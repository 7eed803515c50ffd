package policy

import (
	"maps"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// This file checks the parts of a document other than its egress rules: metadata, mode, dns,
// secrets and llm, each field on its own. Cross-references are checked in validate.go.

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// compileMeta checks metadata.name and spec.mode and returns the mode with its default.
func compileMeta(d *decoder, doc *Document) Mode {
	switch name := doc.Metadata.Name; {
	case name == "":
		d.errorf("metadata.name", "required; name the policy, e.g. name: repo-read")
	case !policyNameRE.MatchString(name):
		d.errorf("metadata.name", "invalid name %q; use lower-case letters, digits, \"-\" and \".\", e.g. %q",
			name, "repo-read")
	}
	switch m := doc.Spec.Mode; m {
	case "":
		return ModeEnforce
	case ModeEnforce, ModeReport:
		return m
	default:
		if s := suggest(string(m), []string{string(ModeEnforce), string(ModeReport)}); s != "" {
			d.errorf("spec.mode", "unknown mode %q; did you mean %q?", m, s)
		} else {
			d.errorf("spec.mode", "unknown mode %q; use \"enforce\" or \"report\"", m)
		}
		return ModeEnforce
	}
}

// compileDNS checks spec.dns.
func compileDNS(d *decoder, c DNSConfig) {
	for i, u := range c.Upstreams {
		if msg := checkUpstream(u); msg != "" {
			d.errorf(joinIndex("spec.dns.upstreams", i), "%s", msg)
		}
	}
	switch c.OnDeny {
	case "", OnDenyRefused, OnDenyNXDomain:
	default:
		d.errorf("spec.dns.onDeny", "unknown answer %q; use %q or %q", c.OnDeny, OnDenyRefused, OnDenyNXDomain)
	}
	if c.MinTTL < 0 {
		d.errorf("spec.dns.minTTL", "must not be negative")
	}
	if c.MaxIPsPerName < 0 {
		d.errorf("spec.dns.maxIPsPerName", "must not be negative; leave it out for the default (%d)", DefaultMaxIPsPerName)
	}
	compileDNSBrakes(d, c)
}

// compileSecrets checks spec.secrets.
func compileSecrets(d *decoder, secrets map[string]Secret) {
	for _, name := range slices.Sorted(maps.Keys(secrets)) {
		s, path := secrets[name], joinKey("spec.secrets", name)
		if !ruleNameRE.MatchString(name) {
			d.errorf(path, "invalid secret name %q; use letters, digits, \".\", \"_\" and \"-\" (at most 63)", name)
		}
		var set []string
		if s.Vault != nil {
			set = append(set, "vault")
			checkVault(d, *s.Vault, path+".vault")
		}
		if s.Env != "" {
			set = append(set, "env")
			if !envNameRE.MatchString(s.Env) {
				d.errorf(path+".env", "invalid environment variable name %q", s.Env)
			}
		}
		if s.File != "" {
			set = append(set, "file")
		}
		switch len(set) {
		case 0:
			d.errorf(path, "secret %q has no source; set exactly one of vault, env or file", name)
		case 1:
		default:
			d.errorf(path, "secret %q has %d sources (%s); set exactly one of vault, env or file",
				name, len(set), strings.Join(set, ", "))
		}
	}
}

// checkVault checks a vault source.
func checkVault(d *decoder, v VaultRef, path string) {
	if v.Path == "" {
		d.errorf(path+".path", "required; e.g. path: secret/data/ci/github")
	}
	if v.Version < 0 {
		d.errorf(path+".version", "must not be negative; leave it out for the latest version")
	}
	if v.Dynamic && v.Version != 0 {
		d.errorf(path+".version", "dynamic secrets have no version; remove version or dynamic")
	}
}

// compileLLM checks spec.llm on its own; provider and secret references are in validate.go.
func compileLLM(d *decoder, c LLMConfig) {
	for _, name := range slices.Sorted(maps.Keys(c.Providers)) {
		p, path := c.Providers[name], joinKey("spec.llm.providers", name)
		if !ruleNameRE.MatchString(name) {
			d.errorf(path, "invalid provider name %q; use letters, digits, \".\", \"_\" and \"-\"", name)
		}
		if p.BaseURL == "" {
			d.errorf(path+".baseURL", "required; e.g. baseURL: https://api.openai.com")
		} else if u, err := url.Parse(p.BaseURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") ||
			u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			d.errorf(path+".baseURL", "invalid base URL %q; use an http(s) URL such as \"https://api.openai.com\"", p.BaseURL)
		}
	}
	seen := make(map[string]int)
	for i, m := range c.Models {
		path := joinIndex("spec.llm.models", i)
		switch j, dup := seen[m.Name]; {
		case m.Name == "":
			d.errorf(path+".name", "required; the model name the sandbox sends, e.g. name: gpt-4o-mini")
		case strings.ContainsFunc(m.Name, func(r rune) bool { return r <= ' ' || r == 0x7f }):
			d.errorf(path+".name", "invalid model name %q; remove spaces and control characters", m.Name)
		case dup:
			d.errorf(path+".name", "duplicate model %q (first at spec.llm.models[%d])", m.Name, j)
		default:
			seen[m.Name] = i
		}
		if m.Provider == "" {
			d.errorf(path+".provider", "required; name a provider of spec.llm.providers")
		}
		checkNonNegative(d, path+".price.inputPerMTok", m.Price.InputPerMTok)
		checkNonNegative(d, path+".price.outputPerMTok", m.Price.OutputPerMTok)
	}
	b := c.Budget
	checkNonNegative(d, "spec.llm.budget.tokens", float64(b.Tokens))
	checkNonNegative(d, "spec.llm.budget.usd", b.USD)
	checkNonNegative(d, "spec.llm.budget.requestsPerMinute", float64(b.RequestsPerMinute))
	checkNonNegative(d, "spec.llm.budget.tokensPerMinute", float64(b.TokensPerMinute))
	compileLLMExtras(d, c)
}

// checkNonNegative rejects negative, infinite and NaN numbers.
func checkNonNegative(d *decoder, path string, f float64) {
	if f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		d.errorf(path, "must be a finite number, 0 or more")
	}
}
