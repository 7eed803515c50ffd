package policy

import (
	"maps"
	"slices"
)

// Policy is a compiled, validated, immutable policy (a document with its parents merged in).
// It is safe for concurrent use. The accessors return copies; changing them changes nothing.
type Policy struct {
	name   string
	mode   Mode
	source string
	// interceptAll is spec.report.interceptAll (report mode only): every connection-level
	// decision says Intercept.
	interceptAll bool
	rules        []*rule           // effective rules, in order
	secrets      map[string]Secret // effective secrets, parents' merged under the child's
	dns          DNSConfig         // effective dns settings, without defaults applied
	llm          LLMConfig         // effective llm settings
	// approval is the effective spec.approval (parents merged, never filled in), nil when no
	// policy of the chain has the section; never is its compiled never list.
	approval *ApprovalConfig
	// usage is the effective spec.usage (parents merged, the interval's default not
	// applied).
	usage   UsageConfig
	never   []hostPattern
	parents []*Policy
}

// Name returns metadata.name.
func (p *Policy) Name() string { return p.name }

// Mode returns the policy's mode.
func (p *Policy) Mode() Mode { return p.mode }

// InterceptAll reports whether the policy is in report mode with spec.report.interceptAll:
// every connection is intercepted so that its requests are recorded.
func (p *Policy) InterceptAll() bool { return p.interceptAll }

// Source returns where the policy was read from: the path given to Load, the filename given
// to Parse, or "builtin:NAME" for a built-in profile.
func (p *Policy) Source() string { return p.source }

// Parents returns the policies of spec.extends, in order, each with its own parents merged in.
func (p *Policy) Parents() []*Policy { return slices.Clone(p.parents) }

// Rules returns the effective egress rules in decision order, with defaults applied (ports,
// protocol) and hosts in normalised form ("*.example.com", punycode, lower case).
func (p *Policy) Rules() []Rule {
	out := make([]Rule, len(p.rules))
	for i, r := range p.rules {
		out[i] = cloneRule(r.spec)
	}
	return out
}

// Rule returns the effective rule with this name; with several of that name (inherited from
// different parents), the first, which is the one Decide reports.
func (p *Policy) Rule(name string) (Rule, bool) {
	for _, r := range p.rules {
		if r.spec.Name == name {
			return cloneRule(r.spec), true
		}
	}
	return Rule{}, false
}

// Secrets returns the effective secrets: the parents' merged in extends order, overridden by
// the policy's own.
func (p *Policy) Secrets() map[string]Secret {
	out := make(map[string]Secret, len(p.secrets))
	for name, s := range p.secrets {
		if s.Vault != nil {
			v := *s.Vault
			s.Vault = &v
		}
		out[name] = s
	}
	return out
}

// DNS returns the effective DNS settings with defaults applied: OnDeny is never empty, and
// MaxIPsPerName, Grace, MaxLabelLength and WildcardQueriesPerMinute are never zero.
func (p *Policy) DNS() DNSConfig {
	c := p.dns
	c.Upstreams = slices.Clone(c.Upstreams)
	if c.OnDeny == "" {
		c.OnDeny = OnDenyRefused
	}
	if c.MaxIPsPerName == 0 {
		c.MaxIPsPerName = DefaultMaxIPsPerName
	}
	if c.Grace == 0 {
		c.Grace = DefaultGrace
	}
	if c.MaxLabelLength == 0 {
		c.MaxLabelLength = DefaultMaxLabelLength
	}
	if c.WildcardQueriesPerMinute == 0 {
		c.WildcardQueriesPerMinute = DefaultWildcardQueriesPerMinute
	}
	return c
}

// LLM returns the effective model settings.
func (p *Policy) LLM() LLMConfig {
	return LLMConfig{
		Providers:  maps.Clone(p.llm.Providers),
		Models:     slices.Clone(p.llm.Models),
		Budget:     p.llm.Budget,
		LogPrompts: p.llm.LogPrompts,
	}
}

// HostPorts returns the sorted ports the effective rules allow for host (any protocol): by
// hosts for a name, by cidrs for an IP literal. It returns nil when no rule names the host or
// the host is invalid. The DNS filter answers a name only when this is non-empty, and the
// kernel allow map takes these ports for the addresses of the answer.
func (p *Policy) HostPorts(host string) []int {
	h, err := NormalizeHost(host)
	if err != nil {
		return nil
	}
	var ports []int
	for _, r := range p.rulesForHost(h) {
		ports = append(ports, r.ports...)
	}
	slices.Sort(ports)
	return slices.Compact(ports)
}

// cloneRule deep-copies a schema rule.
func cloneRule(r Rule) Rule {
	r.Hosts = slices.Clone(r.Hosts)
	r.CIDRs = slices.Clone(r.CIDRs)
	r.Ports = slices.Clone(r.Ports)
	r.Inject = slices.Clone(r.Inject)
	r.PlaceholderIn = slices.Clone(r.PlaceholderIn)
	r.HTTP = slices.Clone(r.HTTP)
	for i, m := range r.HTTP {
		r.HTTP[i] = HTTPMatch{Methods: slices.Clone(m.Methods), Paths: slices.Clone(m.Paths)}
	}
	return r
}
