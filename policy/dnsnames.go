package policy

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// This file is what the DNS filter asks of a policy: may this name be answered, on which
// ports, and is it allowed only through a wildcard (so the exfiltration brakes apply). It
// also checks the spec.dns fields that configure those brakes.

// NameDecision is the decision on a DNS query name (DecideName).
type NameDecision struct {
	// Decision is the verdict on the name; Port is always 0. Reason is ReasonRuleMatched,
	// ReasonNoRule (no rule's hosts name it), ReasonInvalidHost or ReasonOffline. In report
	// mode a deny is an Allow with WouldDeny set, as with Decide.
	Decision
	// Ports are the sorted ports the rules naming the name allow (HostPorts); nil when no rule
	// names it.
	Ports []int
	// Wildcard is the most specific wildcard host ("*.example.com", normalised) naming the
	// name when no exact host does; empty when an exact host names it or none does. The DNS
	// filter's exfiltration brakes apply to names allowed only through a wildcard.
	Wildcard string
}

// Zone returns the domain of Wildcard ("example.com" for "*.example.com"), or "".
func (n NameDecision) Zone() string { return strings.TrimPrefix(n.Wildcard, "*.") }

// DecideName decides whether the DNS filter may answer a query for name: it may when a rule
// (of any protocol) names it in its hosts, exactly or by wildcard. CIDR-only rules never make
// a name answerable. IP literals and names that do not normalise are denied with
// ReasonInvalidHost. It never does I/O.
func (p *Policy) DecideName(name string) NameDecision {
	return p.decideName(name, true)
}

func (p *Policy) decideName(name string, withMode bool) NameDecision {
	var nd NameDecision
	h, err := NormalizeHost(name)
	nd.Host = h.Name
	switch {
	case err != nil:
		nd.Decision = deny(nd.Decision, ReasonInvalidHost, nil, "%v", err)
	case h.IsIP():
		nd.Decision = deny(nd.Decision, ReasonInvalidHost, nil, "%q is an IP address, not a name to resolve", name)
	case len(p.rules) == 0:
		nd.Decision = deny(nd.Decision, ReasonOffline, nil, "policy %q allows no egress", p.name)
	default:
		nd = p.matchName(nd, h.Name)
	}
	if withMode {
		nd.Decision = p.applyMode(nd.Decision)
	}
	return nd
}

// matchName fills nd for a normalised name.
func (p *Policy) matchName(nd NameDecision, name string) NameDecision {
	rules := p.rulesForHost(Host{Name: name})
	if len(rules) == 0 {
		return NameDecision{Decision: deny(nd.Decision, ReasonNoRule, nil, "host %q is not named by any egress rule", name)}
	}
	exact := false
	for _, r := range rules {
		nd.Ports = append(nd.Ports, r.ports...)
		for _, hp := range r.hosts {
			switch {
			case !hp.match(name):
			case !hp.wildcard:
				exact = true
			case len(hp.name) > len(nd.Zone()):
				nd.Wildcard = hp.String()
			}
		}
	}
	if exact {
		nd.Wildcard = ""
	}
	slices.Sort(nd.Ports)
	nd.Ports = slices.Compact(nd.Ports)
	nd.Decision = allow(nd.Decision, rules[0], fmt.Sprintf("host %q is named by rule %q", name, rules[0].spec.Name))
	nd.Host = name
	return nd
}

// compileDNSBrakes checks the spec.dns fields of the DNS filter's exfiltration brakes and
// address lifetime.
func compileDNSBrakes(d *decoder, c DNSConfig) {
	switch {
	case c.Grace < 0:
		d.errorf("spec.dns.grace", "must not be negative; leave it out for the default (%s)", DefaultGrace)
	case c.Grace > time.Hour:
		d.errorf("spec.dns.grace", "%s is longer than an hour; addresses would stay reachable long after their answer expired; use at most \"1h\"", c.Grace)
	}
	if c.MaxLabelLength < 0 || c.MaxLabelLength > 63 {
		d.errorf("spec.dns.maxLabelLength", "%d is out of range; use 1-63 (a DNS label has at most 63 bytes), or leave it out for the default (%d)",
			c.MaxLabelLength, DefaultMaxLabelLength)
	}
	if c.WildcardQueriesPerMinute < 0 {
		d.errorf("spec.dns.wildcardQueriesPerMinute", "must not be negative; leave it out for the default (%d)",
			DefaultWildcardQueriesPerMinute)
	}
}
