package approval

import (
	"fmt"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// The decision values of approval events (audit kind "approval"). Decision says what
// happened; RequestID holds the ask ID (which is also the grant's), Rule "grant:ID" on
// grant events, Detail the approver and scope.
const (
	EventAsk     = "ask"     // a miss was held and the operator asked
	EventGrant   = "grant"   // an approver granted an ask
	EventDeny    = "deny"    // an approver denied an ask, or the webhook failed closed
	EventExpire  = "expire"  // a grant or a pending ask ended by time, or a once grant was used
	EventRevoke  = "revoke"  // the operator, or a policy reload, ended a grant
	EventSummary = "summary" // misses not asked about because the asks were at their bound (Count)
)

func (s *Stage) event(decision string, a Ask) audit.Event {
	return audit.Event{Time: s.cfg.Now(), Sandbox: a.Sandbox, Kind: audit.KindApproval, Decision: decision,
		Destination: a.Destination(), Method: a.Method, Path: a.Path, Policy: a.Policy, Identity: a.Identity, RequestID: a.ID}
}

func (s *Stage) auditAsk(a Ask) {
	ev := s.event(EventAsk, a)
	ev.Reason = string(policy.ReasonApprovalPending)
	ev.Detail = fmt.Sprintf("asked via %s; open until %s", a.Via, a.Expires.UTC().Format(time.RFC3339))
	s.cfg.Audit.Log(ev)
}

func (s *Stage) auditAskExpired(a Ask) {
	ev := s.event(EventExpire, a)
	ev.Reason = string(policy.ReasonApprovalPending)
	ev.Detail = fmt.Sprintf("ask expired unanswered after %d misses", a.Misses)
	s.cfg.Audit.Log(ev)
}

func (s *Stage) auditDeny(a Ask) {
	ev := s.event(EventDeny, a)
	ev.Reason = string(policy.ReasonApprovalDenied)
	ev.Detail = fmt.Sprintf("approver=%s: %s", a.Approver, a.Detail)
	s.cfg.Audit.Log(ev)
}

func (s *Stage) grantEvent(decision string, g Grant) audit.Event {
	return audit.Event{Time: s.cfg.Now(), Sandbox: g.Sandbox, Kind: audit.KindApproval, Decision: decision,
		Destination: destination(g.Host, g.Ports), Policy: g.Policy, Identity: g.Identity, RequestID: g.ID, Rule: policy.GrantRulePrefix + g.ID}
}

func (s *Stage) auditGrant(g Grant) {
	ev := s.grantEvent(EventGrant, g)
	ev.Detail = fmt.Sprintf("approver=%s scope=%s", g.Approver, g.Scope)
	if g.Scope == ScopeDuration {
		ev.Detail += " until=" + g.Until.UTC().Format(time.RFC3339)
	}
	s.cfg.Audit.Log(ev)
}

func (s *Stage) auditEnd(g Grant, decision, why string) {
	ev := s.grantEvent(decision, g)
	ev.Detail = fmt.Sprintf("approver=%s scope=%s: %s", g.Approver, g.Scope, why)
	s.cfg.Audit.Log(ev)
}

func (s *Stage) auditSummary(sm summary) {
	s.cfg.Audit.Log(audit.Event{Time: sm.at, Sandbox: s.cfg.Sandbox, Kind: audit.KindApproval, Decision: EventSummary,
		Reason: string(policy.ReasonNoRule), Count: sm.count,
		Detail: fmt.Sprintf("%d misses were not asked about: at most %d asks open and %d new a minute", sm.count, s.cfg.MaxOpenAsks, s.cfg.AsksPerMinute)})
}
