package approval

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/airlock-dev/airlock/policy"
)

// DefaultClusterDomain is the Kubernetes cluster domain assumed when Config.ClusterDomain is
// empty.
const DefaultClusterDomain = "cluster.local"

// internalSuffixes are name suffixes that only exist inside a machine, cluster or cloud:
// never asked about (a grant would open a door to internal services by name).
var internalSuffixes = []string{".svc", ".internal", ".local", ".localhost", ".localdomain", ".home.arpa", ".arpa"}

// Eligible says why a decision may not be asked about, or "" when it may: only a plain miss
// (ReasonNoRule) on a DNS name, in a policy that asks, that is not under never, not an IP
// literal, not a single label, not internal to a cluster or machine (the cluster domain and
// what ends in it, .svc, .internal, .local, ...), and not a resolver search-list expansion
// of a name a rule names ("pypi.org.ns.svc.cluster.local", "pypi.org.corp.example"). It
// never does I/O; the address checks follow in Stage (checkAddrs).
func Eligible(pol *policy.Policy, d policy.Decision, clusterDomain string) string {
	if clusterDomain == "" {
		clusterDomain = DefaultClusterDomain
	}
	h, err := policy.NormalizeHost(d.Host)
	switch {
	case !pol.Asks():
		return "the policy does not ask (no spec.approval, mode off, or report mode)"
	case d.Allowed():
		return "the request is allowed"
	case d.Reason != policy.ReasonNoRule:
		return fmt.Sprintf("%s is not a plain miss; only no_rule is asked about", d.Reason)
	case err != nil:
		return "the host is not valid"
	case h.IsIP():
		return "IP literals are never asked about; name the host"
	case !strings.Contains(h.Name, "."):
		return "single-label names are never asked about"
	case h.Name == clusterDomain || strings.HasSuffix(h.Name, "."+clusterDomain):
		return "names in the cluster domain are never asked about"
	case pol.NeverAsk(h.Name):
		return "the host is listed under spec.approval.never"
	}
	for _, s := range internalSuffixes {
		if strings.HasSuffix(h.Name, s) {
			return fmt.Sprintf("names under %s are internal and never asked about", s)
		}
	}
	if prefix := searchExpansion(pol, h.Name); prefix != "" {
		return fmt.Sprintf("the name looks like a resolver search-list expansion of %q, which a rule names", prefix)
	}
	return ""
}

// searchExpansion returns the leading part of name that a rule names when name is that part
// with more labels appended (a stub resolver trying its search list), else "".
func searchExpansion(pol *policy.Policy, name string) string {
	for i := len(name) - 1; i > 0; i-- {
		if name[i] != '.' {
			continue
		}
		prefix := name[:i]
		if strings.Contains(prefix, ".") && len(pol.HostPorts(prefix)) > 0 {
			return prefix
		}
	}
	return ""
}

// Resolver resolves a name for the address checks (the sidecar's caching resolver).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// SelfAddrs reports the sidecar's own listeners (egress.SelfAddrs).
type SelfAddrs interface {
	Contains(ap netip.AddrPort) bool
}

// checkAddrs resolves host and says why it may not be asked about ("" when it may): it does
// not resolve, or one of its addresses is not public (what the SSRF guard refuses, a mixed
// answer included) or is one of the sidecar's own listeners. ports are the ports a grant
// would open.
func checkAddrs(ctx context.Context, r Resolver, self SelfAddrs, host string, ports []int) string {
	if r == nil {
		return ""
	}
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return "the name does not resolve"
	}
	for _, a := range addrs {
		a = a.Unmap().WithZone("")
		if c := policy.ClassifyAddr(a); c != policy.AddrPublic {
			return fmt.Sprintf("the name resolves to %s (%s), which the SSRF guard refuses", a, c)
		}
		for _, p := range ports {
			if self != nil && self.Contains(netip.AddrPortFrom(a, uint16(p))) {
				return fmt.Sprintf("the name resolves to the sidecar's own listener %s", netip.AddrPortFrom(a, uint16(p)))
			}
		}
	}
	return ""
}
