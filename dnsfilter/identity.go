package dnsfilter

import (
	"fmt"
	"net/netip"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/policy"
)

// Identities in the DNS filter (spec.identities). The kernel tells which cgroup's task sent
// each query (Config.Identities asks it; nothing in the query chooses): the query is decided
// by that identity's policy, its audit event names the identity, and a query whose identity
// cannot be told is refused (identity_unknown), as is every query of a policy with identities
// when there is no kernel to ask.
//
// What an allowed answer opens: the kernel allow map is the sandbox's, and only the sandbox's
// own tasks may use it (an identity's task connects only to the sidecar, through the
// transparent redirect, and to its own protocol tcp ranges: DenyIdentity in package ebpf),
// since the sidecar alone applies an identity's rules. So an answer to an identity opens
// nothing in the kernel: its addresses go to idBook, which has no AllowMap and serves only
// Resolved (the transparent listener's check that a connection's original destination is an
// address of its name) and the brakes. An answer to the sandbox's own tasks is recorded in book
// and opened in the allow map, as without identities.

// policyFor sets q's policy and book from the identity that sent it: the sandbox's own policy
// and book when the policy has no identities, no lookup is configured or the sender is the
// sandbox's own; the identity's policy and idBook otherwise. It refuses the query
// (identity_unknown) and returns false when the identity cannot be told.
func (f *Filter) policyFor(q *query) (*policy.Policy, bool) {
	pol := f.cfg.Policy.Current()
	q.book = f.book
	if f.cfg.Identities == nil || len(pol.IdentityNames()) == 0 {
		return pol, true
	}
	refuse := func(format string, args ...any) (*policy.Policy, bool) {
		return pol, f.reject(q, dns.RcodeRefused, policy.ReasonIdentityUnknown, fmt.Sprintf(format, args...))
	}
	client, err := netip.ParseAddrPort(q.w.RemoteAddr().String())
	if err != nil {
		return refuse("the client address %q cannot be read", q.w.RemoteAddr())
	}
	client = netip.AddrPortFrom(client.Addr().Unmap(), client.Port())
	name, err := f.cfg.Identities.QueryIdentity(client, q.req.Id, q.tcp)
	switch {
	case err != nil:
		return refuse("the identity of the query from %s cannot be told: %v", client, err)
	case name == "":
		return pol, true
	}
	ip, ok := pol.Identity(name)
	if !ok {
		return refuse("the query's cgroup is identity %q, which policy %q does not define", name, pol.Name())
	}
	q.ev.Identity, q.book = name, f.idBook
	return ip, true
}

// decisionsOf returns the decision cache of pol's identity ("" for the sandbox's own): one
// per identity, so queries of several identities do not keep replacing one another's.
func (f *Filter) decisionsOf(pol *policy.Policy) *decisions {
	name := pol.IdentityName()
	if name == "" {
		return &f.decided
	}
	d, _ := f.idDecided.LoadOrStore(name, &decisions{})
	return d.(*decisions)
}
