package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// outcome builds a test's outcome from per-leg rates, one round each (0 = no round).
func outcome(t *tlsTest, rates map[string]int64, problem map[string]string) *tlsOutcome {
	o := &tlsOutcome{test: t, rounds: map[string][]tlsRound{}, problem: map[string]string{}}
	for name, r := range rates {
		if r > 0 {
			o.rounds[name] = []tlsRound{{n: 0, res: tlsResult{ops: r, elapsed: time.Second}}}
		}
	}
	for name, p := range problem {
		o.problem[name] = p
	}
	return o
}

func TestAccRowJudge(t *testing.T) {
	ok := func(v float64) accCell { return accCell{set: true, value: v} }
	bad := accCell{set: true, problem: "INVALID"}
	na := accCell{set: true, problem: "n/a"}
	tests := []struct {
		name string
		kind accKind
		runs []accCell
		want string
	}{
		{"baseline within 5 %", accBaseline, []accCell{ok(0.94), ok(0.96), ok(1.2)}, "PASS"},
		{"baseline exactly 0.95", accBaseline, []accCell{ok(0.95)}, "PASS"},
		{"baseline 6 % slower", accBaseline, []accCell{ok(0.94), ok(0.93), ok(1.5)}, "FAIL"},
		{"an invalid run is never fast", accBaseline, []accCell{ok(2), bad, ok(2)}, "INVALID"},
		{"a run that did not measure it", accBaseline, []accCell{ok(2), {}, ok(2)}, "INVALID"},
		{"not available", accBaseline, []accCell{na, na}, "n/a"},
		{"squid at 2×", accSquid, []accCell{ok(1.9), ok(2.0), ok(2.4)}, "met"},
		{"squid at 1.6× every run", accSquid, []accCell{ok(1.6), ok(1.7), ok(1.9)}, "met at ≥ 1.6× in every run (if the note shows the profile)"},
		{"squid under 1.6× once", accSquid, []accCell{ok(1.5), ok(1.7), ok(1.9)}, "NOT met"},
		{"RSS lower", accRSS, []accCell{ok(-1 << 20)}, "PASS"},
		{"RSS within the tolerance", accRSS, []accCell{ok(idleRSSTolerance)}, "PASS"},
		{"RSS above the tolerance", accRSS, []accCell{ok(idleRSSTolerance + 1), ok(idleRSSTolerance + 4096), ok(0)}, "FAIL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &accRow{name: tc.name, kind: tc.kind, runs: tc.runs}
			if _, got := r.judge(); got != tc.want {
				t.Errorf("verdict %q, want %q", got, tc.want)
			}
		})
	}
}

func TestAcceptanceAddTLS(t *testing.T) {
	tests := map[string]*tlsTest{}
	for _, tt := range tlsTests(config{}) {
		tests[tt.key] = tt
	}
	legs := []*tlsLeg{{name: targetDirect}, {name: targetAirlock}, {name: targetBaseline}, {name: "squid"}}
	outs := []*tlsOutcome{
		outcome(tests["tunnels"], map[string]int64{targetDirect: 100, targetAirlock: 96, targetBaseline: 100, "squid": 50}, nil),
		outcome(tests["keepalive"], map[string]int64{targetDirect: 100, targetAirlock: 90, "squid": 60}, nil),
		outcome(tests["grpc"], map[string]int64{targetDirect: 100, targetAirlock: 99, targetBaseline: 100},
			map[string]string{targetBaseline: "invalid: round 1: gRPC receive: EOF"}),
		outcome(tests["h2"], nil, map[string]string{targetAirlock: "n/a: h2load not found", targetBaseline: "n/a: h2load not found"}),
	}
	a := &acceptance{runs: 2}
	a.addTLS(0, legs, outs, &rssSamples{air: []int64{20 << 20, 21 << 20, 20 << 20}, base: []int64{20 << 20, 20 << 20, 22 << 20}})
	want := map[string]string{
		"new tunnels airlock/airlock-base":                "0.960×",
		"new tunnels airlock/squid":                       "", // not a Squid test: no row
		"intercepted keep-alive airlock/squid":            "1.50×",
		"intercepted gRPC streaming airlock/airlock-base": "INVALID",
		"intercepted h2 (h2load) airlock/airlock-base":    "n/a",
		"idle RSS airlock − airlock-base":                 "+0.00 MiB",
	}
	for name, cell := range want {
		var row *accRow
		for _, r := range a.rows {
			if r.name == name {
				row = r
			}
		}
		switch {
		case cell == "" && row != nil:
			t.Errorf("%s: a row, want none", name)
		case cell == "":
		case row == nil:
			t.Errorf("%s: no row", name)
		case row.runs[0].problem != "" && row.runs[0].problem != cell:
			t.Errorf("%s: %s, want %s", name, row.runs[0].problem, cell)
		case row.runs[0].problem == "" && row.cell(row.runs[0].value) != cell:
			t.Errorf("%s: %s, want %s", name, row.cell(row.runs[0].value), cell)
		}
	}
	// Run 2 never ran: every comparison is invalid, whatever run 1 said.
	for _, r := range a.rows {
		if _, v := r.judge(); v != "INVALID" && v != "n/a" {
			t.Errorf("%s with a missing run: %s, want INVALID", r.name, v)
		}
	}
}

func TestAcceptanceLegProblemInvalidates(t *testing.T) {
	tt := tlsTests(config{})[0] // new tunnels
	// The rounds were fine, but the audit trail read after the tests was not.
	legs := []*tlsLeg{{name: targetAirlock, problem: "audit: audit log is empty: audit was not on"}, {name: targetBaseline}}
	a := &acceptance{runs: 1}
	a.addTLS(0, legs, []*tlsOutcome{outcome(tt, map[string]int64{targetAirlock: 200, targetBaseline: 100}, nil)}, nil)
	if len(a.rows) != 1 || a.rows[0].runs[0].problem != "INVALID" {
		t.Fatalf("rows %+v, want one INVALID", a.rows)
	}
	if _, v := a.rows[0].judge(); v != "INVALID" {
		t.Errorf("verdict %s, want INVALID", v)
	}
}

func TestAcceptancePrint(t *testing.T) {
	a := &acceptance{runs: 3}
	for i, v := range []float64{0.97, 0.93, 1.01} {
		a.set(i, "new tunnels airlock/airlock-base", accBaseline, accCell{value: v})
	}
	var b strings.Builder
	a.print(&b)
	out := b.String()
	for _, want := range []string{"run 1", "run 3", "0.930×", "0.970×", "≥ 0.95×", "PASS"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	(&acceptance{runs: 1}).print(&b)
	if b.Len() != 0 {
		t.Errorf("empty summary printed %q", b.String())
	}
}

func TestTLSBaselineVerdict(t *testing.T) {
	tt := tlsTests(config{})[0]
	for _, tc := range []struct {
		rates   map[string]int64
		problem map[string]string
		want    string
	}{
		{map[string]int64{targetAirlock: 95, targetBaseline: 100}, nil, "PASS (0.950×)"},
		{map[string]int64{targetAirlock: 949, targetBaseline: 1000}, nil, "FAIL (0.949×)"},
		{map[string]int64{targetAirlock: 200}, map[string]string{targetBaseline: "invalid: round 1: status 403 Forbidden"}, "INVALID"},
		{nil, map[string]string{targetAirlock: "n/a: h2load not found"}, "n/a"},
	} {
		if got := tlsBaselineVerdict(outcome(tt, tc.rates, tc.problem)); got != tc.want {
			t.Errorf("%v %v: %s, want %s", tc.rates, tc.problem, got, tc.want)
		}
	}
}

func TestBaselineFlags(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "airlock-base")
	plain := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"-baseline-bin", exe, "-runs", "3"}, ""},
		{[]string{"-baseline-bin", filepath.Join(dir, "missing")}, "-baseline-bin"},
		{[]string{"-baseline-bin", plain}, "not an executable file"},
		{[]string{"-baseline-bin", dir}, "not an executable file"},
		{[]string{"-runs", "0"}, "-runs 0"},
		{[]string{"-runs", "11"}, "-runs 11"},
	} {
		c, err := parseFlags(tc.args, io.Discard)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%v: error %v, want one containing %q", tc.args, err, tc.wantErr)
		case tc.wantErr == "" && (c.baselineBin != exe || c.runs != 3 || !hasBaseline(c)):
			t.Errorf("%v: parsed %q, runs %d, hasBaseline %v", tc.args, c.baselineBin, c.runs, hasBaseline(c))
		}
	}
	c, err := parseFlags([]string{"-baseline-bin", exe, "-only", "direct,squid"}, io.Discard)
	if err != nil || hasBaseline(c) {
		t.Errorf("a baseline without the airlock leg: err %v, hasBaseline %v; want no baseline leg", err, hasBaseline(c))
	}
	if c, err := parseFlags(nil, io.Discard); err != nil || !c.sections || c.runs != 1 || c.baselineBin != "" {
		t.Errorf("defaults: %+v, %v; want every section, one run, no baseline", c, err)
	}
	if c, err := parseFlags([]string{"-sections=false"}, io.Discard); err != nil || c.sections {
		t.Errorf("-sections=false: sections %v, %v", c.sections, err)
	}
}

func TestCopyExecutable(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	body := []byte("#!/bin/sh\necho baseline\n")
	if err := os.WriteFile(src, body, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := copyExecutable(src, dst); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dst)
	if err != nil || string(got) != string(body) {
		t.Fatalf("copy reads %q, %v; want %q", got, err, body)
	}
	if fi, _ := os.Stat(dst); fi.Mode().Perm()&0o111 == 0 {
		t.Errorf("copy mode %v, want executable", fi.Mode())
	}
	// A copy never overwrites a file already there (each run copies into its own directory).
	if err := copyExecutable(src, dst); err == nil {
		t.Error("second copy onto the same path: no error")
	}
}

func TestRoundOrder(t *testing.T) {
	names := func(ls []*tlsLeg) string {
		var out []string
		for _, l := range ls {
			out = append(out, l.name)
		}
		return strings.Join(out, ",")
	}
	legs := func(ns ...string) []*tlsLeg {
		var out []*tlsLeg
		for _, n := range ns {
			out = append(out, &tlsLeg{name: n})
		}
		return out
	}
	// Without a baseline: the plain rotation, as before.
	three := legs(targetDirect, targetAirlock, "squid")
	for r, want := range []string{"direct,airlock,squid", "airlock,squid,direct", "squid,direct,airlock"} {
		if got := names(roundOrder(three, r, 0)); got != want {
			t.Errorf("round %d: %s, want %s", r, got, want)
		}
	}
	// With one: airlock and the baseline back to back, swapping places every round and run.
	four := legs(targetDirect, targetAirlock, targetBaseline, "squid")
	for _, tc := range []struct {
		r, run int
		want   string
	}{
		{0, 0, "direct,airlock,airlock-base,squid"},
		{1, 0, "airlock-base,airlock,squid,direct"},
		{2, 0, "squid,direct,airlock,airlock-base"},
		{3, 0, "direct,airlock-base,airlock,squid"},
		{0, 1, "direct,airlock-base,airlock,squid"},
	} {
		if got := names(roundOrder(four, tc.r, tc.run)); got != tc.want {
			t.Errorf("round %d of run %d: %s, want %s", tc.r, tc.run, got, tc.want)
		}
	}
	// Over an even number of rounds each goes first as often as the other.
	first := map[string]int{}
	for r := range 4 {
		for _, l := range roundOrder(four, r, 0) {
			if l.name == targetAirlock || l.name == targetBaseline {
				first[l.name]++
				break
			}
		}
	}
	if first[targetAirlock] != 2 || first[targetBaseline] != 2 {
		t.Errorf("first of the pair over 4 rounds: %v, want 2 each", first)
	}
}
