package llmproxy

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

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

// identityRoutes caches one route table per identity, each rebuilt when its policy changes,
// and holds each identity's budget.
type identityRoutes struct {
	// mu guards byName and budgets.
	mu      sync.Mutex
	byName  map[string]*routesCache
	budgets map[string]*Budget
}

// budget returns identity name's budget: the usage the ledger held for it when the proxy
// started (restoreBudgets), or an empty one for an identity the ledger has no call of.
func (c *identityRoutes) budget(name string, now func() time.Time) *Budget {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.budgets == nil {
		c.budgets = map[string]*Budget{}
	}
	b := c.budgets[name]
	if b == nil {
		b = NewBudget(now, 0, 0)
		c.budgets[name] = b
	}
	return b
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
// name. Its budget is the sandbox's caps and own the identity's (reserve charges both). An
// identity that cannot be told gets an identity_unknown refusal.
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
	t.own, t.budget = t.budget, base.budget
	return &t, name, nil
}

// reserveIdentity reserves the call of an identity (x.ev.Identity) in the identity's own
// budget too, after the sandbox's (hold): ask with at most the output the sandbox granted,
// first strictly, then (as the sandbox's reserve does) with the input counted (counted) and
// the output lowered to fit. It returns the output limit granted, or false after refusing
// the call (and releasing the sandbox's hold) when the identity's caps refuse it.
func (x *exchange) reserveIdentity(w http.ResponseWriter, ask Ask, hold *Hold, counted func() int64) (int64, bool) {
	name := x.ev.Identity
	if name == "" {
		return hold.Out, true
	}
	x.idBudget = x.p.idRoutes.budget(name, x.p.now)
	ask.Out, ask.Strict = hold.Out, true
	h, err := x.idBudget.Reserve(x.table.own, ask)
	if err != nil {
		ask.Strict, ask.In = false, counted()
		h, err = x.idBudget.Reserve(x.table.own, ask)
	}
	if err != nil {
		x.p.budget.Settle(hold, 0, 0)
		var be *BudgetError
		errors.As(err, &be)
		e, reason := budgetAPIError(be)
		e.message = strings.NewReplacer("the sandbox's", fmt.Sprintf("identity %q's", name),
			"llm.budget.", "spec.identities."+name+".llm.budget.").Replace(e.message)
		x.refuse(w, e, reason)
		return 0, false
	}
	x.idHold = h
	return min(hold.Out, h.Out), true
}
