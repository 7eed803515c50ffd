package approval

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/policy"
)

// Where a miss was seen (Ask.Via).
const (
	ViaHTTP        = "http"        // an absolute-form request through the explicit proxy
	ViaConnect     = "connect"     // a CONNECT tunnel
	ViaTransparent = "transparent" // a redirected connection
	ViaDNS         = "dns"         // a DNS query
)

// outcome is what holding a miss came to.
type outcome struct {
	status Status // "" when the miss was not asked about
	ask    string
	why    string // why not asked, or the denial's detail
	retry  time.Duration
}

// Settle is the approval stage of a proxy decision d on req under pol (from Current). A
// decision a grant allowed is passed on (a once grant is used up by it); a plain miss the
// policy asks about is held up to spec.approval.hold: granted, it is decided again under the
// new effective policy, which it returns; else it becomes a denial with ReasonApprovalPending
// or ReasonApprovalDenied and d.Ask set. Anything else is returned as it is.
func (s *Stage) Settle(ctx context.Context, pol *policy.Policy, req policy.Request, d policy.Decision, via string) (*policy.Policy, policy.Decision) {
	if d.Grant != "" {
		if s.use(d.Grant) {
			return pol, d
		}
		pol = s.currentAs(pol) // a once grant another request used first: decide again
		if d = pol.Decide(req); d.Grant != "" && s.use(d.Grant) {
			return pol, d
		}
	}
	if d.Allowed() || d.Reason != policy.ReasonNoRule {
		return pol, d
	}
	c, _ := pol.Approval()
	a := Ask{Host: d.Host, Port: d.Port, Via: via, Method: req.Method, Path: pathOnly(req.Path), Identity: pol.IdentityName()}
	for range 2 { // a once grant another held request used first: one new ask
		out := s.hold(ctx, pol, d, a, c.Hold)
		if out.status != StatusGranted {
			return pol, s.refusal(d, out)
		}
		np := s.currentAs(pol)
		if nd := np.Decide(req); nd.Grant == "" || s.use(nd.Grant) {
			return np, nd
		}
	}
	return pol, d
}

// currentAs is the effective policy (Current) of pol's identity: the sandbox's own, or the
// identity's with its own grants. An identity a reload removed keeps pol, which has no new
// grant, so the request stays denied.
func (s *Stage) currentAs(pol *policy.Policy) *policy.Policy {
	np := s.Current()
	if name := pol.IdentityName(); name != "" {
		ip, ok := np.Identity(name)
		if !ok {
			return pol
		}
		return ip
	}
	return np
}

// SettleName is Settle for a DNS query name: the hold is capped at
// policy.DNSApprovalHoldCap, the ask (shared by A and AAAA) is for ports 80 and 443, and no
// once grant is used up (the first connection does that).
func (s *Stage) SettleName(ctx context.Context, pol *policy.Policy, nd policy.NameDecision) (*policy.Policy, policy.NameDecision) {
	if nd.Allowed() || nd.Reason != policy.ReasonNoRule {
		return pol, nd
	}
	c, _ := pol.Approval()
	a := Ask{Host: nd.Host, Via: ViaDNS, Identity: pol.IdentityName()}
	out := s.hold(ctx, pol, nd.Decision, a, min(c.Hold, policy.DNSApprovalHoldCap))
	if out.status != StatusGranted {
		nd.Decision = s.refusal(nd.Decision, out)
		return pol, nd
	}
	np := s.currentAs(pol)
	return np, np.DecideName(nd.Host)
}

// refusal turns a miss that was held into its denial.
func (s *Stage) refusal(d policy.Decision, out outcome) policy.Decision {
	switch out.status {
	case StatusPending:
		d.Reason, d.Ask = policy.ReasonApprovalPending, out.ask
		d.Detail = fmt.Sprintf("ask %s: host %q is not named by any egress rule; the operator was asked and has not answered; retry in %ds",
			out.ask, d.Host, RetryAfterSeconds(out.retry))
	case StatusDenied:
		d.Reason, d.Ask = policy.ReasonApprovalDenied, out.ask
		d.Detail = fmt.Sprintf("ask %s: the operator denied %q: %s", out.ask, d.Host, out.why)
	default:
		if out.why != "" {
			d.Detail += "; not asked: " + out.why
		}
	}
	return d
}

// RetryAfterSeconds is the Retry-After of an approval_pending answer: the hold, rounded up,
// at least one second.
func RetryAfterSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}

// maxAskPath bounds the path an ask keeps and sends to the webhook.
const maxAskPath = 512

// pathOnly drops the query of a request path (asks and audit events never carry it) and
// cuts it to maxAskPath bytes.
func pathOnly(p string) string {
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	if len(p) > maxAskPath {
		p = strings.ToValidUTF8(p[:maxAskPath], "") + "..."
	}
	return p
}

// hold asks about the miss d (unless it may not be asked about) and waits up to wait for an
// answer. Repeated misses of one (host, port) share one ask.
func (s *Stage) hold(ctx context.Context, pol *policy.Policy, d policy.Decision, a Ask, wait time.Duration) outcome {
	if why := Eligible(pol, d, s.cfg.ClusterDomain); why != "" {
		s.metrics.notAsked.WithLabelValues("ineligible").Inc()
		return outcome{why: why}
	}
	ask, out := s.lookupOrAdmit(a)
	if ask == nil && out.why != "" {
		return out
	}
	if ask == nil {
		if why := checkAddrs(ctx, s.cfg.Resolver, s.cfg.Self, a.Host, a.Ports()); why != "" {
			s.metrics.notAsked.WithLabelValues("address").Inc()
			return outcome{why: why}
		}
		ask = s.open(pol, a)
	}
	return s.wait(ctx, ask, wait)
}

// lookupOrAdmit returns the live ask for a's (host, port), counting one more miss on it;
// or, when there is none, nil and an empty outcome if a new ask may be made (its slot is
// taken), or the outcome of a miss beyond the bound.
func (s *Stage) lookupOrAdmit(a Ask) (*Ask, outcome) {
	now := s.cfg.Now()
	s.mu.Lock()
	k := key{a.Host, a.Port, a.Identity}
	if old := s.byKey[k]; old != nil && now.Before(old.Expires) {
		old.Misses++
		joined := *old
		s.mu.Unlock()
		if s.onJoin != nil {
			s.onJoin(joined)
		}
		return old, outcome{}
	}
	if s.admitLocked(now) {
		s.mu.Unlock()
		return nil, outcome{}
	}
	s.dropped++
	first := s.dropped == 1
	summary := s.summaryLocked(now, false)
	s.mu.Unlock()
	s.metrics.notAsked.WithLabelValues("bound").Inc()
	s.logSummary(summary)
	if first && summary.count == 0 {
		s.rearm() // the summary is due within summaryInterval, even if the misses stop now
	}
	return nil, outcome{why: fmt.Sprintf("too many asks are open or were made this minute (at most %d open, %d a minute); ask again later",
		s.cfg.MaxOpenAsks, s.cfg.AsksPerMinute)}
}

// admitLocked takes a slot for a new ask at now, or reports there is none.
func (s *Stage) admitLocked(now time.Time) bool {
	cut := 0
	for cut < len(s.window) && now.Sub(s.window[cut]) >= time.Minute {
		cut++
	}
	s.window = s.window[cut:]
	if len(s.asks) >= s.cfg.MaxOpenAsks || len(s.window) >= s.cfg.AsksPerMinute {
		return false
	}
	s.window = append(s.window, now)
	return true
}

// open makes a new ask for a (or joins one made meanwhile for its key), audits it and
// hands it to the approvers.
func (s *Stage) open(pol *policy.Policy, a Ask) *Ask {
	c, _ := pol.Approval()
	now := s.cfg.Now()
	s.mu.Lock()
	k := key{a.Host, a.Port, a.Identity}
	if old := s.byKey[k]; old != nil && now.Before(old.Expires) {
		old.Misses++
		s.mu.Unlock()
		return old
	}
	a.ID, a.Sandbox, a.Policy = newID(), s.cfg.Sandbox, pol.Name()
	a.Created, a.Expires, a.Status, a.Misses = now, now.Add(c.AskTTL), StatusPending, 1
	a.done = make(chan struct{})
	ask := &a
	s.asks[a.ID], s.byKey[k] = ask, ask
	s.mu.Unlock()
	s.metrics.asks.Inc()
	s.metrics.open.Inc()
	s.auditAsk(*ask)
	if s.onAsk != nil {
		s.onAsk(*ask)
	}
	if w := c.Approvers.Webhook; w != nil && s.ctx.Err() == nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.runWebhook(*w, *ask)
		}()
	}
	s.rearm() // for the ask's expiry
	return ask
}

// wait waits up to d for ask's answer; with MaxWaiting requests held already, it does not
// wait.
func (s *Stage) wait(ctx context.Context, ask *Ask, d time.Duration) outcome {
	select {
	case s.waiting <- struct{}{}:
		defer func() { <-s.waiting }()
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ask.done:
		case <-t.C:
		case <-ctx.Done():
		}
	default:
		s.metrics.notHeld.Inc()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return outcome{status: ask.Status, ask: ask.ID, why: ask.Detail, retry: d}
}
