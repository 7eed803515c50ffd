package proxy

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/airlock-dev/airlock/policy"
)

// Identities tells which identity of the policy (spec.identities) made a connection the
// proxy accepted, from the kernel's record of the cgroup of the sandbox process that
// connected (internal/sidecar passes the kernel's lookup in). Nothing the client sends,
// no header, environment variable or token, chooses it.
type Identities interface {
	// Identity returns the identity name of the connection whose client (peer) address is
	// client: "" for the sandbox's own policy. An error means it cannot be told; the
	// connection's requests are then refused with identity_unknown.
	Identity(client netip.AddrPort) (string, error)
}

// policyFor returns the policy the requests of the connection from client are decided by:
// the identity's, when the policy has identities and Config.Identities names one, else the
// policy in force. unknown is the denial (identity_unknown) every request of the
// connection gets when its identity cannot be told; nil otherwise.
func (p *Proxy) policyFor(client string) (pol *policy.Policy, unknown *policy.Decision) {
	pol = p.cfg.Policy.Current()
	if p.cfg.Identities == nil || len(pol.IdentityNames()) == 0 {
		return pol, nil
	}
	refuse := func(format string, args ...any) (*policy.Policy, *policy.Decision) {
		return pol, &policy.Decision{Reason: policy.ReasonIdentityUnknown, Detail: fmt.Sprintf(format, args...)}
	}
	ap, err := netip.ParseAddrPort(client)
	if err != nil {
		return refuse("the client address %q cannot be read", client)
	}
	name, err := p.cfg.Identities.Identity(ap)
	switch {
	case err != nil:
		return refuse("the identity of the connection from %s cannot be told: %v", client, err)
	case name == "":
		return pol, nil
	}
	ip, ok := pol.Identity(name)
	if !ok {
		return refuse("the connection's cgroup is identity %q, which policy %q does not define", name, pol.Name())
	}
	return ip, nil
}

// decide decides req with pol and has the approval stage settle a miss; a connection whose
// identity cannot be told (unknown) is refused with that instead.
func (p *Proxy) decide(ctx context.Context, pol *policy.Policy, unknown *policy.Decision, req policy.Request, via string) (*policy.Policy, policy.Decision) {
	if unknown != nil {
		d := *unknown
		d.Host, d.Port = req.Host, req.Port
		return pol, d
	}
	return p.settle(ctx, pol, req, pol.Decide(req), via)
}
