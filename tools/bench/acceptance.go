package main

// The acceptance summary, printed after the last of -runs runs: the comparisons issue 29's
// acceptance names, one column per run, their median over the runs and a verdict. A run's
// figure is the one its own report prints: the median of the per-round ratios of two legs
// measured back to back. airlock against Squid: plain HTTP keep-alive and every HTTPS test
// Squid runs; airlock against the baseline (-baseline-bin): the HTTPS tests both run, and
// idle RSS. A run in which either leg was invalid, or which did not measure the comparison
// at all, makes the comparison INVALID: an error is never read as a speed.

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// accKind is what a comparison is judged by.
type accKind int

const (
	accSquid    accKind = iota // airlock/squid ≥ squidTargetRatio, or ≥ squidEveryRunRatio in every run
	accBaseline                // airlock/airlock-base ≥ baselineRatio
	accRSS                     // idle RSS airlock − airlock-base ≤ idleRSSTolerance (bytes)
)

// squidEveryRunRatio is the fallback for the Squid targets: met at ≥ 1.6× in each
// run if the closing note shows the profile and names what stands in the way of 2×.
const squidEveryRunRatio = 1.6

// accCell is one comparison in one run.
type accCell struct {
	set     bool    // the run measured it
	value   float64 // the run's median ratio; bytes for accRSS
	problem string  // "INVALID", or "n/a" when the test was not available
}

// accRow is one comparison across the runs.
type accRow struct {
	name string
	kind accKind
	runs []accCell // by run
}

// acceptance collects the comparisons of every run.
type acceptance struct {
	runs int
	rows []*accRow
}

// set records comparison name of run i.
func (a *acceptance) set(run int, name string, kind accKind, c accCell) {
	c.set = true
	i := slices.IndexFunc(a.rows, func(r *accRow) bool { return r.name == name })
	if i < 0 {
		a.rows = append(a.rows, &accRow{name: name, kind: kind, runs: make([]accCell, a.runs)})
		i = len(a.rows) - 1
	}
	a.rows[i].runs[run] = c
}

// addHTTP records run i's plain HTTP keep-alive airlock/squid.
func (a *acceptance) addHTTP(run int, legs []*leg) {
	var air, sq *leg
	for _, l := range legs {
		switch l.name {
		case targetAirlock:
			air = l
		case "squid":
			sq = l
		}
	}
	if air == nil || sq == nil {
		return
	}
	c := accCell{problem: "INVALID"}
	if rs := validRatios(air, sq); len(rs) > 0 {
		c = accCell{value: median(rs)}
	}
	a.set(run, "plain HTTP keep-alive airlock/squid", accSquid, c)
}

// addTLS records run i's HTTPS comparisons: airlock/squid for each test against Squid,
// airlock/airlock-base for each test the baseline ran, and the idle RSS.
func (a *acceptance) addTLS(run int, legs []*tlsLeg, outs []*tlsOutcome, rss *rssSamples) {
	problem := map[string]string{} // leg → its problem; a leg absent from the run is not a key
	for _, l := range legs {
		problem[l.name] = l.problem
	}
	_, haveAir := problem[targetAirlock]
	for _, o := range outs {
		for _, other := range []string{"squid", targetBaseline} {
			_, haveOther := problem[other]
			if !haveAir || !haveOther || !slices.Contains(o.test.legs, other) || (other == "squid" && o.test.other != "squid") {
				continue
			}
			kind := accSquid
			if other == targetBaseline {
				kind = accBaseline
			}
			c := tlsCell(o, other)
			if problem[targetAirlock] != "" || problem[other] != "" {
				c = accCell{problem: "INVALID"} // e.g. its audit trail, read after the tests
			}
			a.set(run, o.test.name+" airlock/"+other, kind, c)
		}
	}
	if rss != nil {
		c := accCell{problem: "INVALID"}
		if rss.valid() {
			c = accCell{value: float64(rss.delta())}
		}
		a.set(run, "idle RSS airlock − "+targetBaseline, accRSS, c)
	}
}

// tlsCell is airlock/other in one HTTPS test.
func tlsCell(o *tlsOutcome, other string) accCell {
	for _, name := range []string{targetAirlock, other} {
		if p := o.problem[name]; strings.HasPrefix(p, "n/a: ") {
			return accCell{problem: "n/a"}
		} else if p != "" {
			return accCell{problem: "INVALID"}
		}
	}
	rs := tlsRatios(o, targetAirlock, other)
	if len(rs) == 0 {
		return accCell{problem: "INVALID"}
	}
	return accCell{value: median(rs)}
}

// judge returns the median over the runs and the verdict: INVALID when a run was invalid or
// missing, n/a when the test was not available, else by the row's kind.
func (r *accRow) judge() (float64, string) {
	var vs []float64
	for _, c := range r.runs {
		switch {
		case !c.set || c.problem == "INVALID":
			return 0, "INVALID"
		case c.problem != "":
			return 0, c.problem
		}
		vs = append(vs, c.value)
	}
	m := median(vs)
	switch r.kind {
	case accBaseline:
		return m, baselineVerdict(m)
	case accRSS:
		return m, rssVerdict(int64(m))
	}
	switch {
	case m >= squidTargetRatio:
		return m, "met"
	case slices.Min(vs) >= squidEveryRunRatio:
		return m, fmt.Sprintf("met at ≥ %g× in every run (if the note shows the profile)", squidEveryRunRatio)
	}
	return m, "NOT met"
}

// cell renders a figure of the row.
func (r *accRow) cell(v float64) string {
	switch r.kind {
	case accRSS:
		return fmt.Sprintf("%+.2f MiB", mib(int64(v)))
	case accBaseline:
		// Three places, so that 0.949 (FAIL) does not read as 0.95.
		return fmt.Sprintf("%.3f×", v)
	}
	return fmt.Sprintf("%.2f×", v)
}

// goal renders the row's goal.
func (r *accRow) goal() string {
	switch r.kind {
	case accBaseline:
		return fmt.Sprintf("≥ %g×", baselineRatio)
	case accRSS:
		return fmt.Sprintf("≤ %+.2f MiB", mib(idleRSSTolerance))
	}
	return fmt.Sprintf("≥ %g× (%g× each run)", squidTargetRatio, squidEveryRunRatio)
}

// print prints the summary; nothing when no comparison was measured.
func (a *acceptance) print(w io.Writer) {
	if len(a.rows) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Acceptance (issue 29), %d run(s) in this command: a run's figure is the median of its per-round ratios (legs back to back);\n", a.runs)
	fmt.Fprintln(w, "the median is over the runs, and the verdict judges it; idle RSS is airlock's median over fresh starts minus the baseline's")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "comparison\t"
	for i := range a.runs {
		head += fmt.Sprintf("run %d\t", i+1)
	}
	fmt.Fprintln(tw, head+"median\tgoal\tverdict\t")
	for _, r := range a.rows {
		line := r.name + "\t"
		for _, c := range r.runs {
			switch {
			case !c.set:
				line += "-\t"
			case c.problem != "":
				line += c.problem + "\t"
			default:
				line += r.cell(c.value) + "\t"
			}
		}
		m, verdict := r.judge()
		med := "-"
		if verdict != "INVALID" && verdict != "n/a" {
			med = r.cell(m)
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t\n", line, med, r.goal(), verdict)
	}
	tw.Flush()
}
