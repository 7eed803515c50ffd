package policy

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
)

// inherit merges a policy's parents into it and checks that the child only narrows them, with
// the semantics described under "Inheritance" in the package documentation (doc.go). It
// records errors in d; p.parents must be the loaded parents (nil when one failed to load, so
// that no narrowing noise is reported).
func inherit(d *decoder, p *Policy, doc *Document, own []*rule) {
	spec := doc.Spec
	p.rules, p.dns = own, spec.DNS
	p.secrets = maps.Clone(spec.Secrets)
	p.llm = inheritLLM(d, p.parents, spec.LLM)
	if len(p.parents) == 0 {
		return
	}
	var inherited []*rule
	secrets := make(map[string]Secret)
	var dns DNSConfig
	for _, parent := range p.parents {
		inherited = append(inherited, parent.rules...)
		maps.Copy(secrets, parent.secrets)
		dns = overrideDNS(dns, parent.dns)
	}
	maps.Copy(secrets, spec.Secrets)
	p.secrets, p.dns = secrets, overrideDNS(dns, spec.DNS)
	for _, parent := range p.parents {
		if p.mode == ModeReport && parent.mode == ModeEnforce {
			d.errorf("spec.mode", "mode report under the enforce parent %q would allow what the parent denies; "+
				"use enforce or leave mode out", parent.name)
			break
		}
	}
	if len(own) == 0 {
		p.rules = inherited
		return
	}
	from := strings.Join(spec.Extends, ", ")
	for i, r := range own {
		checkCovered(d, r, joinIndex("spec.egress", i), inherited, from)
	}
}

// overrideDNS returns base with every field child sets replaced.
func overrideDNS(base, child DNSConfig) DNSConfig {
	if len(child.Upstreams) > 0 {
		base.Upstreams = child.Upstreams
	}
	if child.OnDeny != "" {
		base.OnDeny = child.OnDeny
	}
	if child.MinTTL != 0 {
		base.MinTTL = child.MinTTL
	}
	if child.MaxIPsPerName != 0 {
		base.MaxIPsPerName = child.MaxIPsPerName
	}
	if child.Grace != 0 {
		base.Grace = child.Grace
	}
	if child.MaxLabelLength != 0 {
		base.MaxLabelLength = child.MaxLabelLength
	}
	if child.WildcardQueriesPerMinute != 0 {
		base.WildcardQueriesPerMinute = child.WildcardQueriesPerMinute
	}
	return base
}

// checkCovered reports each host and CIDR of child rule r that no parent rule covers. The
// error names the rule's field path and points at the host or CIDR entry.
func checkCovered(d *decoder, r *rule, path string, parents []*rule, from string) {
	for k, h := range r.hosts {
		cands := filterRules(parents, func(pr *rule) bool {
			return slices.ContainsFunc(pr.hosts, func(ph hostPattern) bool { return ph.covers(h) })
		})
		if what := coverage(r, fmt.Sprintf("host %q", h), cands); what != "" {
			d.errorAtf(path, joinIndex(path+".hosts", r.hostIdx[k]), "rule %q allows %s that no parent (%s) allows", r.spec.Name, what, from)
		}
	}
	for k, c := range r.cidrs {
		cands := filterRules(parents, func(pr *rule) bool {
			return slices.ContainsFunc(pr.cidrs, func(pc netip.Prefix) bool {
				return pc.Bits() <= c.Bits() && pc.Contains(c.Addr())
			})
		})
		if what := coverage(r, fmt.Sprintf("CIDR %s", c), cands); what != "" {
			d.errorAtf(path, joinIndex(path+".cidrs", r.cidrIdx[k]), "rule %q allows %s that no parent (%s) allows", r.spec.Name, what, from)
		}
	}
}

// coverage checks child rule r against the parent rules cands that cover one of its
// destinations (dest, e.g. `host "pypi.org"`). It returns "" when covered, else what r
// allows that no candidate does.
func coverage(r *rule, dest string, cands []*rule) string {
	if len(cands) == 0 {
		return dest
	}
	for _, port := range r.ports {
		withPort := filterRules(cands, func(pr *rule) bool { return pr.allowsPort(port) })
		if len(withPort) == 0 {
			return fmt.Sprintf("port %d on %s", port, dest)
		}
		sameProto := filterRules(withPort, func(pr *rule) bool { return pr.tcp == r.tcp })
		if len(sameProto) == 0 {
			return fmt.Sprintf("protocol %s on %s port %d", r.spec.Protocol, dest, port)
		}
		if r.spec.AllowMissingSNI {
			sameProto = filterRules(sameProto, func(pr *rule) bool { return pr.spec.AllowMissingSNI })
			if len(sameProto) == 0 {
				return fmt.Sprintf("a missing TLS server name (allowMissingSNI) on %s port %d", dest, port)
			}
		}
		var uncovered string
		for i, pr := range sameProto {
			what := l7Uncovered(pr, r)
			if what == "" {
				uncovered = ""
				break
			}
			if i == 0 {
				uncovered = what
			}
		}
		if uncovered != "" {
			return fmt.Sprintf("%s on %s port %d", uncovered, dest, port)
		}
	}
	return ""
}

// filterRules returns the rules keep accepts: rules itself (capped, so an append copies)
// when it accepts them all, which allocates nothing on the decision path; a new slice
// otherwise. The result is read, never written.
func filterRules(rules []*rule, keep func(*rule) bool) []*rule {
	for i, r := range rules {
		if keep(r) {
			continue
		}
		out := slices.Clone(rules[:i])
		for _, r := range rules[i+1:] {
			if keep(r) {
				out = append(out, r)
			}
		}
		return out
	}
	return rules[:len(rules):len(rules)]
}

// anyPath is the pattern a child L7 rule without paths stands for.
var anyPath = pathPattern{raw: "/**", segs: []string{"**"}}

// l7Uncovered returns "" when parent rule pr allows every request child rule c allows at L7,
// else the first (method, path) of c that pr does not allow.
func l7Uncovered(pr, c *rule) string {
	if len(pr.http) == 0 {
		return ""
	}
	if len(c.http) == 0 {
		return "every method and path"
	}
	for _, cm := range c.http {
		methods, paths := cm.methods, cm.paths
		if methods == nil {
			methods = []string{""}
		}
		if paths == nil {
			paths = []pathPattern{anyPath}
		}
		for _, m := range methods {
			for _, cp := range paths {
				if !slices.ContainsFunc(pr.http, func(pm httpMatch) bool { return pm.covers(m, cp) }) {
					if m == "" {
						m = "every method on"
					}
					return fmt.Sprintf("%s %q", m, cp.raw)
				}
			}
		}
	}
	return ""
}

// covers reports whether parent L7 rule pm allows method m ("" for every method) on every
// path cp matches.
func (pm httpMatch) covers(m string, cp pathPattern) bool {
	if pm.methods != nil && (m == "" || !slices.Contains(pm.methods, m)) {
		return false
	}
	return pm.paths == nil || slices.ContainsFunc(pm.paths, func(pp pathPattern) bool { return pp.covers(cp) })
}

// inheritLLM merges the parents' llm settings with the child's and checks that the child
// neither adds models the parents do not list nor raises a budget cap.
func inheritLLM(d *decoder, parents []*Policy, own LLMConfig) LLMConfig {
	out := LLMConfig{Providers: make(map[string]Provider), Models: own.Models}
	var parentModels []Model
	var limit Budget
	for _, parent := range parents {
		maps.Copy(out.Providers, parent.llm.Providers)
		parentModels = append(parentModels, parent.llm.Models...)
		limit = tighter(limit, parent.llm.Budget)
		out.LogPrompts = out.LogPrompts || parent.llm.LogPrompts
	}
	out.LogPrompts = out.LogPrompts || own.LogPrompts
	maps.Copy(out.Providers, own.Providers)
	if len(own.Models) == 0 {
		out.Models = parentModels
	} else if len(parentModels) > 0 {
		for i, m := range own.Models {
			if !slices.ContainsFunc(parentModels, func(pm Model) bool { return pm.Name == m.Name }) {
				d.errorf(joinIndex("spec.llm.models", i)+".name", "model %q is not among the parents' models; a child only narrows", m.Name)
			}
		}
	}
	out.Budget = Budget{
		Tokens:            capField(d, "tokens", own.Budget.Tokens, limit.Tokens),
		USD:               capField(d, "usd", own.Budget.USD, limit.USD),
		RequestsPerMinute: capField(d, "requestsPerMinute", own.Budget.RequestsPerMinute, limit.RequestsPerMinute),
		TokensPerMinute:   capField(d, "tokensPerMinute", own.Budget.TokensPerMinute, limit.TokensPerMinute),
	}
	return out
}

// tighter returns, field by field, the lower non-zero cap of a and b.
func tighter(a, b Budget) Budget {
	return Budget{
		Tokens:            lowerCap(a.Tokens, b.Tokens),
		USD:               lowerCap(a.USD, b.USD),
		RequestsPerMinute: lowerCap(a.RequestsPerMinute, b.RequestsPerMinute),
		TokensPerMinute:   lowerCap(a.TokensPerMinute, b.TokensPerMinute),
	}
}

// lowerCap returns the lower of two caps where 0 means "no cap".
func lowerCap[T int | int64 | float64](a, b T) T {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	}
	return min(a, b)
}

// capField returns the child's cap, or the parents' when the child sets none, and rejects a
// child cap above the parents'.
func capField[T int | int64 | float64](d *decoder, field string, own, limit T) T {
	switch {
	case own == 0:
		return limit
	case limit != 0 && own > limit:
		d.errorf("spec.llm.budget."+field, "%v exceeds the parents' cap of %v; a child only narrows", own, limit)
		return limit
	}
	return own
}
