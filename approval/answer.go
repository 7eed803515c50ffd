package approval

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Answer answers the pending ask id: a grant (stored, then audited, then served) or a
// denial. Errors: ErrNotFound, ErrAnswered, ErrScope, or a failure to keep the grant in
// the state directory (nothing is granted then).
func (s *Stage) Answer(id string, ans Answer) (Grant, error) {
	pol := s.cfg.Policy.Current()
	c, _ := pol.Approval()
	now := s.cfg.Now()
	s.mu.Lock()
	a := s.asks[id]
	switch {
	case a == nil:
		s.mu.Unlock()
		return Grant{}, fmt.Errorf("answer ask %s: %w", id, ErrNotFound)
	case a.Status != StatusPending:
		s.mu.Unlock()
		return Grant{}, fmt.Errorf("answer ask %s: it was %s: %w", id, a.Status, ErrAnswered)
	}
	if !ans.Grant {
		a.Status, a.Approver, a.Detail = StatusDenied, ans.Approver, cmp.Or(ans.Detail, "denied by "+ans.Approver)
		deny := *a
		s.mu.Unlock()
		s.metrics.denials.Inc()
		s.metrics.open.Dec()
		s.auditDeny(deny) // the trail holds the denial before the held request is answered
		close(a.done)
		return Grant{}, nil
	}
	g := Grant{ID: a.ID, Sandbox: a.Sandbox, Policy: a.Policy, Host: a.Host, Ports: a.Ports(), Identity: a.Identity,
		Scope: cmp.Or(ans.Scope, ScopeOnce), Granted: now, Approver: ans.Approver}
	if err := checkScope(&g, ans.For, c.MaxGrant, c.AskTTL, c.SandboxGrants); err != nil {
		s.mu.Unlock()
		return Grant{}, fmt.Errorf("answer ask %s: %w", id, err)
	}
	s.grants[g.ID] = g
	if err := s.saveLocked(); err != nil {
		delete(s.grants, g.ID)
		s.mu.Unlock()
		return Grant{}, fmt.Errorf("answer ask %s: %w", id, err)
	}
	a.Status, a.Approver = StatusGranted, ans.Approver
	delete(s.asks, a.ID)
	delete(s.byKey, key{a.Host, a.Port, a.Identity})
	s.invalidateLocked()
	s.mu.Unlock()
	s.metrics.grants.WithLabelValues(string(g.Scope)).Inc()
	s.metrics.open.Dec()
	s.auditGrant(g)
	s.changed() // the effective policy holds the grant before the held request goes on
	close(a.done)
	return g, nil
}

// checkScope fills in g's end and checks the scope against the policy. A once grant not used
// within askTTL ends then (a client that resolved the name but never connects through the
// proxy must not keep it open).
func checkScope(g *Grant, d, maxGrant, askTTL time.Duration, sandboxGrants bool) error {
	switch g.Scope {
	case ScopeOnce:
		g.Until = g.Granted.Add(askTTL)
	case ScopeDuration:
		if d <= 0 || d > maxGrant {
			return fmt.Errorf("a grant for %s: use a duration above 0 and at most spec.approval.maxGrant (%s): %w", d, maxGrant, ErrScope)
		}
		g.Until = g.Granted.Add(d)
	case ScopeSandbox:
		if !sandboxGrants {
			return fmt.Errorf("sandbox-life grants need spec.approval.sandboxGrants: %w", ErrScope)
		}
	default:
		return fmt.Errorf("unknown scope %q; use once, duration or sandbox: %w", g.Scope, ErrScope)
	}
	return nil
}

// Revoke ends grant id at once (its kernel allow-map addresses go with it); a pending ask
// of that ID is denied instead. Errors: ErrNotFound.
func (s *Stage) Revoke(id, approver string) error {
	s.mu.Lock()
	_, isGrant := s.grants[id]
	a := s.asks[id]
	s.mu.Unlock()
	if !isGrant {
		if a != nil {
			_, err := s.Answer(id, Answer{Approver: approver, Detail: "revoked by " + approver})
			return err
		}
		return fmt.Errorf("revoke %s: %w", id, ErrNotFound)
	}
	if !s.end(id, "revoke", "revoked by "+approver) {
		return fmt.Errorf("revoke %s: %w", id, ErrNotFound)
	}
	return nil
}

// use records that a decision was allowed by grant id; a once grant ends with it. It
// reports false when the grant is gone (another request used a once grant first).
func (s *Stage) use(id string) bool {
	s.mu.Lock()
	g, ok := s.grants[id]
	s.mu.Unlock()
	switch {
	case !ok:
		return false
	case g.Scope != ScopeOnce:
		return true
	}
	return s.endAfter(id, "expire", "used once", OnceGrace)
}

// OnceGrace is how long after a once grant is used its addresses stay in the kernel allow
// map: the connection that used it is checked against the DNS filter's answers (the
// transparent proxy's original-destination check) after its decision. No new request or
// query is allowed by the grant meanwhile: it is gone from the effective policy at once.
const OnceGrace = time.Second

// end removes grant id, keeps the store, audits why (kind "expire" or "revoke") and tells
// the wiring. It reports whether the grant was there.
func (s *Stage) end(id, decision, why string) bool {
	return s.endAfter(id, decision, why, 0)
}

// endAfter is end telling the wiring only after delay (the kernel allow map then keeps the
// grant's addresses that long).
func (s *Stage) endAfter(id, decision, why string, delay time.Duration) bool {
	s.mu.Lock()
	g, ok := s.grants[id]
	if !ok {
		s.mu.Unlock()
		return false
	}
	delete(s.grants, id)
	if err := s.saveLocked(); err != nil {
		s.cfg.Logger.WithError(err).Error("approval: grants file not updated; the ended grant is gone from memory, and would come back after a restart until it expires")
	}
	s.invalidateLocked()
	s.mu.Unlock()
	if decision == "revoke" {
		s.metrics.revocations.Inc()
	} else {
		s.metrics.expiries.Inc()
	}
	s.auditEnd(g, decision, why)
	if delay > 0 {
		s.wg.Add(1)
		time.AfterFunc(delay, func() {
			defer s.wg.Done()
			s.changed()
		})
	} else {
		s.changed()
	}
	return true
}

// List returns the open asks (pending, and denied ones until they expire) and the live
// grants, each sorted by creation.
func (s *Stage) List() ([]Ask, []Grant) {
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var asks []Ask
	for _, a := range s.asks {
		if now.Before(a.Expires) {
			asks = append(asks, *a)
		}
	}
	slices.SortFunc(asks, func(a, b Ask) int { return a.Created.Compare(b.Created) })
	var grants []Grant
	for _, g := range sortedGrants(s.grants) {
		if g.live(now) {
			grants = append(grants, g)
		}
	}
	return asks, grants
}

// sortedGrants returns the grants sorted by when they were granted, then ID.
func sortedGrants(m map[string]Grant) []Grant {
	gs := slices.Collect(maps.Values(m))
	slices.SortFunc(gs, func(a, b Grant) int {
		return cmp.Or(a.Granted.Compare(b.Granted), cmp.Compare(a.ID, b.ID))
	})
	return gs
}
