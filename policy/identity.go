package policy

import (
	"fmt"
	"maps"
	"slices"
)

// This file compiles spec.identities: one policy per identity, derived from the sandbox's
// effective policy (parents and all) and only ever narrower, by the rules of extends.

// Identity is one profile of spec.identities: what the processes of that identity (its own
// cgroup in the sandbox, `airlock sandbox exec --as NAME`) may do. It only narrows the
// sandbox's policy; everything it does not say is the sandbox's.
type Identity struct {
	// Egress are the identity's rules, each covered by the sandbox's effective rules exactly
	// as a child's rules are by its parents' under extends (hosts, ports, methods, paths;
	// a protocol: tcp rule's ranges and ports by the sandbox's protocol: tcp rules). The
	// kernel enforces an identity's protocol: tcp rules on its own cgroup (see
	// docs/kernel.md). Empty means the sandbox's rules, raw TCP ones included.
	Egress []Rule `yaml:"egress"`
	// Secrets names the secrets of the sandbox's spec.secrets that may be injected into this
	// identity's requests: the inject entries of the sandbox's rules that use any other
	// secret are removed from the identity's copy of those rules, and the identity's own
	// inject entries may use only these. Empty means none: the identity's requests carry
	// no credential.
	Secrets []string `yaml:"secrets"`
	// LLM narrows the local model endpoint for this identity. Zero means the sandbox's
	// models and no budget of its own.
	LLM IdentityLLM `yaml:"llm"`
}

// IdentityLLM narrows spec.llm for one identity.
type IdentityLLM struct {
	// Models names the models of the sandbox's spec.llm.models this identity may call (a
	// kept model's fallbacks are kept only when listed too). Empty means all of them.
	Models []string `yaml:"models"`
	// Budget caps this identity's own usage; each cap must be at most the sandbox's. Every
	// call counts against both this budget and the sandbox's. Zero fields mean no cap of
	// its own (the sandbox's still applies).
	Budget Budget `yaml:"budget"`
}

// IdentityCgroupDir is the name of identity name's cgroup directory below the sandbox's
// cgroup, in every hierarchy: `airlock sandbox exec --as NAME` makes it and runs the command
// there, and the sidecar maps its cgroup id to the identity.
func IdentityCgroupDir(name string) string { return "airlock-id-" + name }

// identityNameRE: identity names become cgroup directory names and audit fields.
var identityNameRE = nameMatcher{max: 32, inner: "-"}

// Identity returns the policy of identity name of spec.identities, and whether there is
// one. The identity's policy has the sandbox policy's name, mode, DNS and approval
// settings; IdentityName reports name.
func (p *Policy) Identity(name string) (*Policy, bool) {
	ip, ok := p.identities[name]
	return ip, ok
}

// IdentityNames returns the names of spec.identities, sorted; nil when there are none.
func (p *Policy) IdentityNames() []string {
	if len(p.identities) == 0 {
		return nil
	}
	return slices.Sorted(maps.Keys(p.identities))
}

// IdentityName returns the identity this policy is for: a name of spec.identities, or ""
// for the sandbox's own policy.
func (p *Policy) IdentityName() string { return p.identity }

// compileIdentities derives each identity's policy from p (the sandbox's effective policy,
// whose rules, secrets and llm must already be merged) and records what an identity would
// widen as errors. own are the identities as written.
func compileIdentities(d *decoder, p *Policy, own map[string]Identity) {
	if len(own) == 0 {
		return
	}
	p.identities = make(map[string]*Policy, len(own))
	for _, name := range slices.Sorted(maps.Keys(own)) {
		path := joinKey("spec.identities", name)
		if !identityNameRE.MatchString(name) {
			d.errorf(path, "invalid identity name %q; use lower-case letters, digits and \"-\" (at most 32), e.g. reviewer", name)
			continue
		}
		p.identities[name] = compileIdentity(d, p, name, own[name], path)
	}
}

// compileIdentity builds the policy of one identity.
func compileIdentity(d *decoder, base *Policy, name string, id Identity, path string) *Policy {
	q := *base
	q.identity, q.identities, q.parents = name, nil, nil
	held := identitySecrets(d, base, id.Secrets, path+".secrets")
	if len(id.Egress) == 0 {
		q.rules = make([]*rule, 0, len(base.rules))
		for _, r := range base.rules {
			q.rules = append(q.rules, withSecretsOnly(r, held))
		}
	} else {
		q.rules = identityRules(d, base, name, id.Egress, held, path+".egress")
	}
	q.llm = identityLLM(d, base.llm, id.LLM, path+".llm")
	q.secrets = make(map[string]Secret)
	for _, s := range held {
		q.secrets[s] = base.secrets[s]
	}
	for _, m := range q.llm.Models { // the model API needs its providers' keys
		if k := q.llm.Providers[m.Provider].APIKey.Secret; k != "" {
			q.secrets[k] = base.secrets[k]
		}
	}
	return &q
}

// identitySecrets checks an identity's secrets list against the sandbox's secrets and
// returns it sorted, each once.
func identitySecrets(d *decoder, base *Policy, names []string, path string) []string {
	defined := slices.Sorted(maps.Keys(base.secrets))
	var held []string
	for i, s := range names {
		switch _, ok := base.secrets[s]; {
		case !ok:
			d.errorf(joinIndex(path, i), "%s", undefinedSecret(s, defined))
		case slices.Contains(held, s):
			d.errorf(joinIndex(path, i), "secret %q is listed twice; remove one", s)
		default:
			held = append(held, s)
		}
	}
	slices.Sort(held)
	return held
}

// withSecretsOnly returns r, or a copy of r without the inject entries that use a secret
// outside held.
func withSecretsOnly(r *rule, held []string) *rule {
	if !slices.ContainsFunc(r.secrets, func(s string) bool { return !slices.Contains(held, s) }) {
		return r
	}
	c := *r
	c.spec = cloneRule(r.spec)
	c.spec.Inject = slices.DeleteFunc(c.spec.Inject, func(in Injection) bool {
		return slices.ContainsFunc(in.Secrets(), func(s string) bool { return !slices.Contains(held, s) })
	})
	c.secrets = slices.DeleteFunc(slices.Clone(r.secrets), func(s string) bool { return !slices.Contains(held, s) })
	if len(c.spec.Inject) == 0 {
		c.spec.PlaceholderIn, c.spec.AllowCleartext = nil, false
	}
	return &c
}

// identityRules compiles an identity's own egress rules and checks each is covered by the
// sandbox's (a protocol: tcp rule by the sandbox's protocol: tcp rules) and injects only
// held secrets. The sandbox's protocol: tcp rules are not the identity's unless it lists
// them: the kernel enforces each identity's own (CIDRRules of its policy).
func identityRules(d *decoder, base *Policy, name string, egress []Rule, held []string, path string) []*rule {
	own := compileRulesAt(d, egress, base.name, path)
	from := fmt.Sprintf("the sandbox policy %q", base.name)
	for i, r := range own {
		rpath := joinIndex(path, i)
		checkCovered(d, r, rpath, base.rules, from)
		for j, in := range egress[i].Inject {
			for _, s := range in.Secrets() {
				if !slices.Contains(held, s) {
					d.errorf(fmt.Sprintf("%s.inject[%d].value", rpath, j),
						"identity %q does not hold secret %q; add it to %s.secrets or remove this entry",
						name, s, joinKey("spec.identities", name))
				}
			}
		}
	}
	return own
}

// identityLLM narrows the sandbox's llm settings to an identity's models and checks its
// budget against the sandbox's.
func identityLLM(d *decoder, base LLMConfig, own IdentityLLM, path string) LLMConfig {
	out := LLMConfig{Providers: base.Providers, Models: base.Models, LogPrompts: base.LogPrompts}
	if len(own.Models) > 0 {
		out.Models = nil
		for i, name := range own.Models {
			k := slices.IndexFunc(base.Models, func(m Model) bool { return m.Name == name })
			switch {
			case k < 0:
				d.errorf(joinIndex(path+".models", i), "model %q is not among the sandbox's models (spec.llm.models); an identity only narrows", name)
			case slices.ContainsFunc(out.Models, func(m Model) bool { return m.Name == name }):
				d.errorf(joinIndex(path+".models", i), "model %q is listed twice; remove one", name)
			default:
				out.Models = append(out.Models, base.Models[k])
			}
		}
		for i, m := range out.Models {
			m.Fallbacks = slices.DeleteFunc(slices.Clone(m.Fallbacks), func(f string) bool { return !slices.Contains(own.Models, f) })
			out.Models[i] = m
		}
	}
	b, limit := own.Budget, base.Budget
	bpath := path + ".budget"
	checkNonNegative(d, bpath+".tokens", float64(b.Tokens))
	checkNonNegative(d, bpath+".usd", b.USD)
	checkNonNegative(d, bpath+".requestsPerMinute", float64(b.RequestsPerMinute))
	checkNonNegative(d, bpath+".tokensPerMinute", float64(b.TokensPerMinute))
	identityCap(d, bpath+".tokens", b.Tokens, limit.Tokens)
	identityCap(d, bpath+".usd", b.USD, limit.USD)
	identityCap(d, bpath+".requestsPerMinute", b.RequestsPerMinute, limit.RequestsPerMinute)
	identityCap(d, bpath+".tokensPerMinute", b.TokensPerMinute, limit.TokensPerMinute)
	out.Budget = b
	return out
}

// identityCap rejects an identity cap above the sandbox's.
func identityCap[T int | int64 | float64](d *decoder, path string, own, limit T) {
	if own > 0 && limit != 0 && own > limit {
		d.errorf(path, "%v exceeds the sandbox's cap of %v; an identity only narrows", own, limit)
	}
}
