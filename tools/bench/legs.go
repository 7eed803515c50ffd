package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// leg is one target across the whole bench: direct, or one proxy.
type leg struct {
	name    string
	load    load
	pr      *proxyRun // nil for direct
	closes  bool      // the target ends the client connection after each response
	rounds  []round   // valid measured rounds, in order
	audit   *auditStats
	problem string // non-empty: the leg failed or is invalid, and why
}

// round is one measured run of one target.
type round struct {
	n      int // round number, from 0
	res    result
	served int64   // upstream responses during the run
	cpu    float64 // cores the proxy's process group used during the run; 0 for direct
	// reconnects are read errors taken out of res.errs because the target closed the
	// connection after a response (leg.closes); each cost the generator a wasted attempt.
	reconnects int64
}

// runLegs starts every target, measures them in rounds, stops them and checks their audit
// trails. The targets take turns (round r starts at the r-th target), so a slow drift in the
// machine's speed — this is often a shared VM — lands on every target alike instead of on
// whichever ran last. An idle proxy waiting for its turn costs next to nothing. Each target
// keeps its configuration and logs in its own directory under root.
func runLegs(ctx context.Context, e *env, gen generator, root string) []*leg {
	var legs []*leg
	defer func() {
		for _, lg := range legs {
			if lg.pr != nil {
				lg.pr.p.stop()
			}
		}
	}()
	for _, name := range e.cfg.only {
		lg := &leg{name: name}
		legs = append(legs, lg)
		setUp(ctx, e, lg, filepath.Join(root, name))
		if ctx.Err() != nil {
			return legs
		}
	}
	for r := range e.cfg.rounds {
		for i := range legs {
			lg := legs[(i+r)%len(legs)]
			if lg.problem != "" {
				continue
			}
			measure(ctx, e, gen, lg, r, filepath.Join(root, lg.name))
			if ctx.Err() != nil {
				return legs
			}
		}
	}
	for _, lg := range legs {
		finish(lg, e)
	}
	return legs
}

func (lg *leg) fail(e *env, format string, a ...any) {
	lg.problem = fmt.Sprintf(format, a...)
	e.progress("%s: %s", lg.name, lg.problem)
}

// setUp starts the target (nothing for direct) and sends it two requests by hand, which
// explains a misconfiguration far better than an error count would.
func setUp(ctx context.Context, e *env, lg *leg, dir string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		lg.fail(e, "%v", err)
		return
	}
	lg.load = load{connect: e.upstream.addr, upstream: e.upstream.addr, threads: e.cfg.threads,
		connections: e.cfg.connections, duration: e.cfg.duration, timeout: e.cfg.timeout}
	if lg.name != targetDirect {
		i := slices.IndexFunc(proxies(), func(p proxy) bool { return p.name == lg.name })
		e.progress("%s: starting", lg.name)
		pr, err := proxies()[i].start(ctx, e, dir)
		if err != nil {
			lg.fail(e, "start: %v", err)
			return
		}
		lg.pr = pr
		lg.load.connect, lg.load.proxied = pr.addr, true
	}
	closes, err := preflight(lg.load)
	if err != nil {
		lg.fail(e, "first requests through %s: %v", lg.load.connect, err)
		return
	}
	lg.closes = closes
}

// measure runs one round (after the warm-up, in the first round) and validates it: a round
// with any error, or with a response the upstream did not serve, makes the leg invalid.
func measure(ctx context.Context, e *env, gen generator, lg *leg, n int, dir string) {
	if n == 0 && e.cfg.warmup > 0 {
		w := lg.load
		w.duration = e.cfg.warmup
		if _, err := gen.run(ctx, w, dir); err != nil {
			lg.fail(e, "warm-up: %v", err)
			return
		}
	}
	served0, err := e.upstream.served()
	if err != nil {
		lg.fail(e, "%v", err)
		return
	}
	var cpu0 time.Duration
	if lg.pr != nil {
		cpu0 = treeCPU(lg.pr.p.cmd.Process.Pid)
	}
	res, err := gen.run(ctx, lg.load, dir)
	if err != nil {
		lg.fail(e, "round %d: %v", n+1, err)
		return
	}
	rd := round{n: n, res: res}
	if lg.pr != nil {
		rd.cpu = (treeCPU(lg.pr.p.cmd.Process.Pid) - cpu0).Seconds() / res.elapsed.Seconds()
		if done, err := lg.pr.p.exited(); done {
			lg.fail(e, "exited during round %d (%s); last log lines:\n%s", n+1, exitStatus(err), indent(lg.pr.p.logTail(15)))
			return
		}
	}
	served1, err := e.upstream.served()
	if err != nil {
		lg.fail(e, "%v", err)
		return
	}
	rd.served = served1 - served0
	if lg.closes {
		// A target that ends the connection after each response without "Connection: close"
		// (tinyproxy 1.11; RFC 9112 §9.6 says it must send it) makes the generator try the
		// next request on the dead connection: one read error, then a reconnect. At most one
		// such error per response (plus one per connection) is that, not a failure.
		rd.reconnects = min(rd.res.errs.read, rd.res.requests+int64(lg.load.connections))
		rd.res.errs.read -= rd.reconnects
	}
	e.progress("round %d/%d: %-10s %8.0f req/s  p50 %s  p99 %s  errors %d",
		n+1, e.cfg.rounds, lg.name, rd.res.rps(), ms(rd.res.p50), ms(rd.res.p99), rd.res.errs.total())
	switch {
	case rd.res.requests == 0:
		lg.fail(e, "round %d: no request completed", n+1)
	case rd.res.errs.total() > 0:
		lg.fail(e, "invalid: round %d had %d errors (%s)", n+1, rd.res.errs.total(), rd.res.errs)
	case rd.served < rd.res.requests:
		lg.fail(e, "invalid: in round %d the upstream served %d of %d responses; the rest did not come from it",
			n+1, rd.served, rd.res.requests)
	default:
		lg.rounds = append(lg.rounds, rd)
	}
}

// finish stops the proxy — its audit trail is complete only then (Squid's log daemon,
// airlock's file) — and checks that audit was on and that the bench's requests were allowed.
// A reference leg (go-nethttp) has no audit trail and skips that check.
func finish(lg *leg, e *env) {
	if lg.pr == nil {
		return
	}
	lg.pr.p.stop()
	if len(lg.rounds) == 0 || isReference(lg.name) || lg.pr.audit == nil {
		return
	}
	st, err := lg.pr.audit()
	lg.audit = &st
	if err != nil && lg.problem == "" {
		lg.fail(e, "audit: %v", err)
	}
}

// median returns the median of xs (the mean of the middle two for an even count).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// rps returns the per-round request rates.
func (lg *leg) rps() []float64 {
	var out []float64
	for _, r := range lg.rounds {
		out = append(out, r.res.rps())
	}
	return out
}

// medianRound is the round whose rate is the (upper) median: its latencies are reported.
func (lg *leg) medianRound() round {
	s := slices.Clone(lg.rounds)
	slices.SortFunc(s, func(a, b round) int {
		switch {
		case a.res.rps() < b.res.rps():
			return -1
		case a.res.rps() > b.res.rps():
			return 1
		}
		return 0
	})
	return s[len(s)/2]
}

// ratios returns a's rate over b's for every round both measured validly: the two ran back
// to back, under the same machine conditions.
func ratios(a, b *leg) []float64 {
	var out []float64
	for _, ra := range a.rounds {
		for _, rb := range b.rounds {
			if ra.n == rb.n && rb.res.rps() > 0 {
				out = append(out, ra.res.rps()/rb.res.rps())
			}
		}
	}
	return out
}
