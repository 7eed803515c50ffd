package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
)

// The audit-cost section measures what the tamper-evident audit trail costs a proxied request:
// proxy's BenchmarkProxyAudit serves the same allowed plain-HTTP request through the proxy with
// the audit trail off and with it on as the sidecar runs it (hash-chained file, signed
// checkpoints, the decision event written before the request goes upstream). The sidecar
// itself has no "audit off", so the comparison runs in process, the variants taking turns.
// Any failed or non-200 request fails the benchmark, which makes the section invalid.

// auditCostReport is the section's result: nanoseconds per request by variant, one per round.
type auditCostReport struct {
	nsPerOp map[string][]float64
	err     error
}

// auditBenchLine matches one result line of go test -bench, e.g.
// "BenchmarkProxyAudit/chained-file-2   12345   81234 ns/op".
var auditBenchLine = regexp.MustCompile(`^BenchmarkProxyAudit/([a-z-]+?)(?:-\d+)?\s+\d+\s+([0-9.]+) ns/op`)

// runAuditCostBench builds proxy's test binary once and runs BenchmarkProxyAudit in
// cfg.rounds separate runs, so the variants take turns (go test -count would run every round
// of one variant before the other's).
func runAuditCostBench(ctx context.Context, e *env, root string) auditCostReport {
	e.progress("audit cost: BenchmarkProxyAudit of ./proxy, %d rounds", e.cfg.rounds)
	bin := filepath.Join(root, "proxy.test")
	if out, err := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, "./proxy/").CombinedOutput(); err != nil {
		return auditCostReport{err: fmt.Errorf("go test -c ./proxy: %w\n%s", err, out)}
	}
	var all bytes.Buffer
	for range e.cfg.rounds {
		cmd := exec.CommandContext(ctx, bin, "-test.run", "^$", "-test.bench", "^BenchmarkProxyAudit$",
			"-test.benchtime", e.cfg.duration.String())
		cmd.Dir = "proxy" // the package's directory, as go test runs it
		out, err := cmd.CombinedOutput()
		if err != nil {
			return auditCostReport{err: fmt.Errorf("BenchmarkProxyAudit: %w\n%s", err, out)}
		}
		all.Write(out)
	}
	return parseAuditCost(&all)
}

// parseAuditCost reads go test -bench output; both variants must have the same number of
// rounds, at least one.
func parseAuditCost(r io.Reader) auditCostReport {
	rep := auditCostReport{nsPerOp: map[string][]float64{}}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := auditBenchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		ns, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return auditCostReport{err: fmt.Errorf("parse %q: %w", sc.Text(), err)}
		}
		rep.nsPerOp[m[1]] = append(rep.nsPerOp[m[1]], ns)
	}
	off, on := rep.nsPerOp["off"], rep.nsPerOp["chained-file"]
	if len(off) == 0 || len(off) != len(on) {
		rep.err = errors.New("BenchmarkProxyAudit printed no complete rounds (want off and chained-file each round)")
	}
	return rep
}

// printAuditCostReport prints the medians, the per-round ratio and the added time.
func printAuditCostReport(w io.Writer, rep auditCostReport) {
	fmt.Fprintln(w, "\naudit cost (proxy.BenchmarkProxyAudit: allowed plain-HTTP requests, 8 parallel clients, in process)")
	if rep.err != nil {
		fmt.Fprintf(w, "  INVALID: %v\n", rep.err)
		return
	}
	off, on := rep.nsPerOp["off"], rep.nsPerOp["chained-file"]
	var ratios []float64
	for i := range off {
		ratios = append(ratios, off[i]/on[i])
	}
	fmt.Fprintf(w, "  %-34s %8.1f µs/request\n", "audit off", median(off)/1e3)
	fmt.Fprintf(w, "  %-34s %8.1f µs/request\n", "chained file, write-before-respond", median(on)/1e3)
	fmt.Fprintf(w, "  throughput with the audit trail on: %.2f× of off (rounds: %s); added %.1f µs/request\n",
		median(ratios), roundList(ratios), (median(on)-median(off))/1e3)
}

// roundList formats per-round ratios as "0.91, 0.93".
func roundList(xs []float64) string {
	var b bytes.Buffer
	for i, x := range xs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%.2f", x)
	}
	return b.String()
}
