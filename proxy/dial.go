package proxy

// The SSRF guard is egress.Guard (one for the whole sidecar, passed in as Config.Guard): it
// resolves a name once, refuses an answer with any internal address no rule names by CIDR
// and the sidecar's own listeners, and dials only checked addresses. This file holds the
// proxy's side: which rules it checks against (the request's policy), the timeouts, and how
// a refusal becomes a deny decision.

import (
	"context"
	"errors"
	"net"
	"net/netip"

	"github.com/airlock-dev/airlock/egress"
	"github.com/airlock-dev/airlock/policy"
)

// resolve resolves host once under pol and checks every address (egress.Guard.Resolve).
// When want is valid (transparent mode) the target then holds want alone, which must be
// among the name's addresses (and, with Config.NameAddrs, one the DNS filter answered).
// Errors: *egress.Denial, or one wrapping egress.ErrResolve (timeouts included).
func (p *Proxy) resolve(ctx context.Context, pol *policy.Policy, host string, port int, want netip.Addr) (egress.Target, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	defer cancel()
	t, err := p.guard.Resolve(ctx, host, port, pol)
	if err != nil || !want.IsValid() {
		return t, err
	}
	var names egress.NameAddrs
	if p.cfg.NameAddrs != nil {
		names = p.cfg.NameAddrs
	}
	return t.Pin(want, names)
}

// connect dials the target's checked addresses within DialTimeout and returns the
// connection and the address dialled.
func (p *Proxy) connect(ctx context.Context, t egress.Target) (net.Conn, netip.AddrPort, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	defer cancel()
	return p.guard.Dial(ctx, t)
}

// asDenial returns the decision of a refused destination, naming rule as the closest rule
// when the refusal names none: the name was allowed by rule, one of its addresses was not
// (the contract's deny names the closest rule).
func asDenial(err error, rule string) (policy.Decision, bool) {
	var den *egress.Denial
	if !errors.As(err, &den) {
		return policy.Decision{}, false
	}
	d := den.Decision
	if d.Rule == "" {
		d.Rule = rule
	}
	return d, true
}

// isTimeout reports whether err is a deadline being exceeded (504 rather than 502).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
