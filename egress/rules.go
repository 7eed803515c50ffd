package egress

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/airlock-dev/airlock/policy"
)

// Rules says which addresses of an answer may be dialled: Allow for a public address (per
// policy.ClassifyAddr) or an internal one the caller's configuration names by CIDR, Deny
// (reason policy.ReasonInternalAddress) otherwise. A Decision with WouldDeny set (report
// mode) is a refusal too: report mode trials rules on names, but the guard never dials an
// internal address no rule names.
//
// *policy.Policy satisfies it: an internal address is allowed when a rule names it in its
// cidrs with the port (the proxy passes the policy that decided the request). Ranges
// satisfies it for callers whose configuration lists ranges (the model API's providers).
type Rules interface {
	CheckAddr(host string, port int, addr netip.Addr) policy.Decision
}

var (
	_ Rules = (*policy.Policy)(nil)
	_ Rules = Ranges(nil)
)

// Ranges are the internal ranges a caller's configuration names; public addresses are always
// allowed. Nil allows public addresses only; AllRanges allows every address (the sidecar's
// own listeners are still refused).
type Ranges []netip.Prefix

// AllRanges names every IPv4 and IPv6 address.
func AllRanges() Ranges {
	return Ranges{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}
}

// CheckAddr allows addr when it is public or in one of the ranges (an IPv4-mapped addr is
// unmapped first); else it denies with policy.ReasonInternalAddress.
func (r Ranges) CheckAddr(host string, port int, addr netip.Addr) policy.Decision {
	d := policy.Decision{Host: host, Port: port}
	a := addr.Unmap().WithZone("")
	class := policy.ClassifyAddr(a)
	switch {
	case !a.IsValid():
		d.Reason, d.Detail = policy.ReasonInternalAddress, fmt.Sprintf("no address to check for %q", host)
	case class == policy.AddrPublic:
		d.Verdict, d.Reason, d.Detail = policy.Allow, policy.ReasonPublicAddress, fmt.Sprintf("address %s of %q is public", a, host)
	case slices.ContainsFunc(r, func(p netip.Prefix) bool { return p.Contains(a) }):
		d.Verdict, d.Reason, d.Detail = policy.Allow, policy.ReasonRuleMatched, fmt.Sprintf("address %s of %q is %s and in an allowed range", a, host, class)
	default:
		d.Reason, d.Detail = policy.ReasonInternalAddress, fmt.Sprintf("address %s of %q is %s and no allowed range names it", a, host, class)
	}
	return d
}
