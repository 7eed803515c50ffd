package llmproxy

import (
	"fmt"
	"net/http"
	"net/netip"
	"sync"

	"github.com/airlock-dev/airlock/policy"
)

// Identities tells which identity of the policy (spec.identities) made the connection a
// call came on, from the kernel's record of the connecting cgroup (internal/sidecar passes
// it in). Nothing the caller sends chooses it.
type Identities interface {
	// Identity returns the identity name of the connection from client ("" for the
	// sandbox's own policy), or an error when it cannot be told.
	Identity(client netip.AddrPort) (string, error)
}

// identityRoutes caches one route table per identity, each rebuilt when its policy changes.
type identityRoutes struct {
	// mu guards byName.
	mu     sync.Mutex
	byName map[string]*routesCache
}

func (c *identityRoutes) get(pol *policy.Policy) *routeTable {
	c.mu.Lock()
	rc := c.byName[pol.IdentityName()]
	if rc == nil {
		if c.byName == nil {
			c.byName = map[string]*routesCache{}
		}
		rc = &routesCache{}
		c.byName[pol.IdentityName()] = rc
	}
	c.mu.Unlock()
	return rc.get(pol)
}

// tableFor returns the routes a call on r's connection gets: its identity's models, or the
// policy's when the policy has no identities (or Config.Identities is nil); and the identity
// name. The budget caps are the sandbox's: an identity's own llm.budget is not enforced
// (yet), but each call's audit event names its identity. An identity that cannot be told
// gets an identity_unknown refusal.
func (p *Proxy) tableFor(r *http.Request) (*routeTable, string, *apiError) {
	pol := p.cfg.Policy.Current()
	base := p.routes.get(pol)
	if p.cfg.Identities == nil || len(pol.IdentityNames()) == 0 {
		return base, "", nil
	}
	unknown := func(format string, args ...any) (*routeTable, string, *apiError) {
		return base, "", &apiError{status: http.StatusForbidden, code: string(policy.ReasonIdentityUnknown), openaiType: "permission_error",
			message: "airlock: " + fmt.Sprintf(format, args...), deny: true, final: true}
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return unknown("the client address %q cannot be read", r.RemoteAddr)
	}
	name, err := p.cfg.Identities.Identity(ap)
	switch {
	case err != nil:
		return unknown("the identity of the connection cannot be told: %v", err)
	case name == "":
		return base, "", nil
	}
	ip, ok := pol.Identity(name)
	if !ok {
		return unknown("the connection's cgroup is identity %q, which policy %q does not define", name, pol.Name())
	}
	t := *p.idRoutes.get(ip)
	t.budget = base.budget
	return &t, name, nil
}
