package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// idleRSSTarget is the bound on airlock's resident memory at idle.
const idleRSSTarget = 20 << 20

// runTLSSection runs and prints the HTTPS section; it returns 1 when a leg failed or was
// invalid (a leg that is only not available, such as h2 before interception speaks it,
// does not count), 130 when interrupted, else 0.
func runTLSSection(ctx context.Context, e *env, root string, w io.Writer, run int, acc *acceptance) int {
	e.progress("HTTPS section")
	te, legs, outs, err := runTLSBench(ctx, e, root, run)
	if ctx.Err() != nil {
		return 130
	}
	if err != nil {
		fmt.Fprintf(w, "\nHTTPS section FAILED: %v\n", err)
		return 1
	}
	printTLSReport(w, e, te, legs, outs)
	acc.addTLS(run, legs, outs, te.rss)
	for _, l := range legs {
		if l.problem != "" {
			return 1
		}
	}
	if te.rss != nil && te.rss.problem != "" {
		return 1
	}
	for _, o := range outs {
		for _, p := range o.problem {
			if !strings.HasPrefix(p, "n/a: ") {
				return 1
			}
		}
	}
	return 0
}

// printTLSReport prints one table per test, the ratios with their targets, and RSS.
func printTLSReport(w io.Writer, e *env, te *tlsEnv, legs []*tlsLeg, outs []*tlsOutcome) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "airlock bench — HTTPS: CONNECT tunnels and interception, policy and audit on")
	fmt.Fprintf(w, "  %-11s Go client in the bench process, %d tunnels/connections, TLS certificates verified, no session resumption;\n",
		"load:", e.cfg.tlsConns)
	fmt.Fprintf(w, "  %-11s %d rounds of %s per leg (bulk: one %d MiB response per round), taking turns, after a %s warm-up\n",
		"", e.cfg.rounds, e.cfg.duration, e.cfg.bulkBytes>>20, e.cfg.warmup)
	fmt.Fprintf(w, "  %-11s Go net/http over TLS in its own process; names resolved by the bench's DNS server (airlock) or hosts_file (Squid)\n", "upstream:")
	if hasBaseline(e.cfg) {
		fmt.Fprintf(w, "  %-11s %s: %s (%s), as airlock: same policy, flags and environment\n", "baseline:", targetBaseline,
			e.cfg.baselineBin, cmdFirstLine(e.cfg.baselineBin, "version"))
	}
	if p, err := findBinary("squid", "squid-openssl"); err == nil && slices.Contains(e.cfg.only, "squid") {
		fmt.Fprintf(w, "  %-11s %s, ssl-bump with security_file_certgen (peek, bump the intercepted host, splice the rest)\n", "squid:", cmdFirstLine(p, "-v"))
	}
	for _, o := range outs {
		printTLSTest(w, o)
	}
	if len(te.squidConf) > 0 {
		// Frozen in the bench (squidBumpConf): one worker (-N), the access log through the
		// logfile daemon, peek at step 1, bump the intercepted host, splice the rest.
		printSquidConf(w, "Squid's configuration in this run (squid -N: one worker; access log through the logfile daemon; ssl-bump: peek at step 1, bump the intercepted host, splice the rest):", te.squidConf)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "DNS queries the bench's DNS server answered (airlock's resolver; Squid reads hosts_file): %d\n", te.dns.queries.Load())
	for _, l := range legs {
		switch {
		case l.problem != "":
			fmt.Fprintf(w, "%s: INVALID: %s\n", l.name, l.problem)
		case l.audit != nil:
			fmt.Fprintf(w, "audit %-8s %d records (%s)\n", l.name+":", l.audit.lines, l.audit.file)
		}
	}
	for _, l := range legs {
		if l.pr == nil || l.idleRSS == 0 {
			continue
		}
		line := fmt.Sprintf("idle RSS %-13s %5.1f MiB (process tree, after start, before load)", l.name+":", mib(l.idleRSS))
		if l.name == targetAirlock {
			verdict := "met"
			if l.idleRSS >= idleRSSTarget {
				verdict = "NOT met"
			}
			line += fmt.Sprintf("; target < %d MiB: %s", idleRSSTarget>>20, verdict)
		}
		fmt.Fprintln(w, line)
	}
	printRSSSamples(w, te.rss)
}

// printRSSSamples prints the idle RSS of fresh starts of airlock and the baseline, and the
// verdict "not higher" within idleRSSTolerance.
func printRSSSamples(w io.Writer, s *rssSamples) {
	switch {
	case s == nil:
		return
	case s.problem != "":
		fmt.Fprintf(w, "idle RSS airlock vs %s: INVALID: %s\n", targetBaseline, s.problem)
		return
	}
	for _, l := range []struct {
		name      string
		xs, files []int64
	}{{targetAirlock, s.air, s.airFile}, {targetBaseline, s.base, s.baseFile}} {
		var each []string
		for _, x := range l.xs {
			each = append(each, fmt.Sprintf("%.2f", mib(x)))
		}
		fmt.Fprintf(w, "idle RSS of %d fresh starts, %-13s median %.2f MiB (file-backed %.2f), spread %.2f MiB (%s)\n", len(l.xs), l.name+":",
			mib(s.median(l.xs)), mib(s.median(l.files)), mib(spread(l.xs)), strings.Join(each, ", "))
	}
	fmt.Fprintf(w, "idle RSS airlock − %s: %+.2f MiB  not higher (tolerance +%.2f MiB): %s\n", targetBaseline,
		mib(s.delta()), mib(idleRSSTolerance), rssVerdict(s.delta()))
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// printTLSTest prints one test's table and ratios.
func printTLSTest(w io.Writer, o *tlsOutcome) {
	t := o.test
	fmt.Fprintf(w, "\n%s\n", t.name)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "leg\t%s\tmin–max\tvs direct\tproxy CPU/op\tproxy RSS\t\n", t.unit)
	for _, name := range t.legs {
		rs, problem := o.rounds[name], o.problem[name]
		if len(rs) == 0 && problem == "" {
			continue
		}
		if problem != "" {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t\n", name, shortProblem(problem))
			continue
		}
		rates := tlsRates(rs, t.bytes)
		cpu, rss := "-", "-"
		if name != targetDirect {
			cpu, rss = cpuPerOp(rs), fmt.Sprintf("%.1f MiB", mib(maxRSS(rs)))
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f–%.1f\t%s\t%s\t%s\t\n", name, median(rates), slices.Min(rates), slices.Max(rates),
			tlsRatio(o, name, targetDirect, false), cpu, rss)
	}
	tw.Flush()
	for name, p := range o.problem {
		fmt.Fprintf(w, "note: %s: %s\n", name, p)
	}
	for _, other := range t.legs {
		if other == targetAirlock || o.rounds[targetAirlock] == nil {
			continue
		}
		line := fmt.Sprintf("airlock/%-12s %s", other, tlsRatio(o, targetAirlock, other, true))
		if other == t.other {
			line += fmt.Sprintf("  target ≥ %g×: %s", t.ratio, tlsVerdict(o, other))
		}
		if other == targetBaseline {
			line += fmt.Sprintf("  no worse than the baseline (≥ %g×): %s", baselineRatio, tlsBaselineVerdict(o))
		}
		fmt.Fprintln(w, line)
	}
}

func shortProblem(p string) string {
	if strings.HasPrefix(p, "n/a: ") {
		return "not available"
	}
	return "INVALID"
}

func tlsRates(rs []tlsRound, bytes bool) []float64 {
	var out []float64
	for _, r := range rs {
		out = append(out, r.res.rate(bytes))
	}
	return out
}

// cpuPerOp is the proxy's CPU time per operation over every round.
func cpuPerOp(rs []tlsRound) string {
	var cpu time.Duration
	var ops int64
	for _, r := range rs {
		cpu += r.cpu
		ops += r.res.ops
	}
	if ops == 0 {
		return "-"
	}
	per := cpu / time.Duration(ops)
	if per >= time.Millisecond {
		return fmt.Sprintf("%.2f ms", float64(per)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.0f µs", float64(per)/float64(time.Microsecond))
}

func maxRSS(rs []tlsRound) int64 {
	var m int64
	for _, r := range rs {
		m = max(m, r.rss)
	}
	return m
}

// tlsRatios returns a's rate over b's for each round both measured.
func tlsRatios(o *tlsOutcome, a, b string) []float64 {
	var out []float64
	for _, ra := range o.rounds[a] {
		for _, rb := range o.rounds[b] {
			if ra.n == rb.n && rb.res.rate(o.test.bytes) > 0 {
				out = append(out, ra.res.rate(o.test.bytes)/rb.res.rate(o.test.bytes))
			}
		}
	}
	return out
}

func tlsRatio(o *tlsOutcome, a, b string, perRound bool) string {
	if a == b {
		return "-"
	}
	if o.problem[a] != "" || o.problem[b] != "" {
		return "n/a"
	}
	rs := tlsRatios(o, a, b)
	if len(rs) == 0 {
		return "n/a"
	}
	s := fmt.Sprintf("%.2f×", median(rs))
	if perRound && len(rs) > 1 {
		var each []string
		for _, r := range rs {
			each = append(each, fmt.Sprintf("%.2f", r))
		}
		s += " (rounds: " + strings.Join(each, ", ") + ")"
	}
	return s
}

// tlsBaselineVerdict judges airlock/airlock-base by the 5 % rule: INVALID when either leg did
// not measure validly, n/a when the test was not available.
func tlsBaselineVerdict(o *tlsOutcome) string {
	for _, name := range []string{targetAirlock, targetBaseline} {
		if p := o.problem[name]; strings.HasPrefix(p, "n/a: ") {
			return "n/a"
		} else if p != "" {
			return "INVALID"
		}
	}
	rs := tlsRatios(o, targetAirlock, targetBaseline)
	if len(rs) == 0 {
		return "INVALID"
	}
	return fmt.Sprintf("%s (%.3f×)", baselineVerdict(median(rs)), median(rs))
}

func tlsVerdict(o *tlsOutcome, other string) string {
	if o.problem[targetAirlock] != "" || o.problem[other] != "" {
		return "n/a"
	}
	rs := tlsRatios(o, targetAirlock, other)
	if len(rs) == 0 {
		return "n/a"
	}
	if median(rs) >= o.test.ratio {
		return "met"
	}
	return "NOT met"
}
