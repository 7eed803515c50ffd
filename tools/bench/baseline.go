package main

// The baseline of the HTTPS section: with -baseline-bin, an airlock binary built from an
// older commit runs as one more leg, airlock-base, started and configured exactly as the
// airlock leg (same policy, flags and environment), in the tests whose acceptance is "no
// worse than today": new tunnels, one tunnel's bulk, intercepted gRPC streaming and h2
// (h2load). It takes its turn in every round with the other legs, so airlock/airlock-base
// is a ratio of two legs measured back to back, as every other ratio of the bench. Its idle
// RSS is compared from fresh starts of both binaries, taken in alternation.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

const (
	// targetBaseline names the baseline leg.
	targetBaseline = "airlock-base"
	// baselineRatio is the "no worse than today's medians (within 5 %)": airlock's
	// median over the baseline's, paired by round, at least this.
	baselineRatio = 0.95
	// idleRSSSamples is how many fresh starts of each binary the idle RSS comparison takes.
	idleRSSSamples = 9
	// idleRSSTolerance is how much higher airlock's median idle RSS may read than the
	// baseline's and still count as "not higher": the spread of one binary's own idle RSS
	// over fresh starts on this machine (README, "Baseline"), so that the same binary on
	// both legs passes.
	idleRSSTolerance = 512 << 10
)

// hasBaseline reports whether the run measures a baseline: -baseline-bin, beside airlock.
func hasBaseline(cfg config) bool {
	return cfg.baselineBin != "" && slices.Contains(cfg.only, targetAirlock)
}

// checkBaselineBin checks -baseline-bin: empty, or an executable regular file.
func checkBaselineBin(path string) error {
	if path == "" {
		return nil
	}
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return fmt.Errorf("-baseline-bin: %w", err)
	case !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("-baseline-bin %s: not an executable file (build one with: git worktree add /tmp/base COMMIT && cd /tmp/base && CGO_ENABLED=0 go build -o /tmp/airlock-base ./cmd/airlock)", path)
	}
	return nil
}

// rssSamples are the idle RSS figures (bytes, process tree) of fresh starts of airlock and
// of the baseline.
type rssSamples struct {
	air, base []int64
	problem   string // non-empty: a start failed, and why
}

// sampleIdleRSS starts each binary idleRSSSamples times, alternating which goes first, and
// reads its idle RSS as startLeg does (after it settled, before any load), each start in a
// fresh state directory, as a sidecar starts.
func (te *tlsEnv) sampleIdleRSS(ctx context.Context) *rssSamples {
	s := &rssSamples{}
	for i := range idleRSSSamples {
		order := []string{targetAirlock, targetBaseline}
		if i%2 == 1 {
			order = []string{targetBaseline, targetAirlock}
		}
		for _, name := range order {
			l := &tlsLeg{name: name}
			err := te.startLegIn(ctx, l, filepath.Join(te.dir, "idle-rss", fmt.Sprintf("%s-%d", name, i+1)))
			if l.pr != nil {
				l.pr.p.stop()
			}
			if err == nil && l.idleRSS == 0 {
				err = fmt.Errorf("no RSS read for %s", name)
			}
			if err != nil {
				s.problem = fmt.Sprintf("idle RSS: start %d of %s: %v", i+1, name, err)
				te.e.progress("https %s", s.problem)
				return s
			}
			if name == targetAirlock {
				s.air = append(s.air, l.idleRSS)
			} else {
				s.base = append(s.base, l.idleRSS)
			}
		}
	}
	te.e.progress("https idle RSS: airlock %.1f MiB, %s %.1f MiB (medians of %d fresh starts each)",
		mib(s.median(s.air)), targetBaseline, mib(s.median(s.base)), idleRSSSamples)
	return s
}

// median is the median of xs in bytes.
func (s *rssSamples) median(xs []int64) int64 {
	var f []float64
	for _, x := range xs {
		f = append(f, float64(x))
	}
	return int64(median(f))
}

// delta is airlock's median idle RSS minus the baseline's, in bytes.
func (s *rssSamples) delta() int64 { return s.median(s.air) - s.median(s.base) }

// valid reports whether both binaries have samples and none failed.
func (s *rssSamples) valid() bool {
	return s != nil && s.problem == "" && len(s.air) > 0 && len(s.base) > 0
}

// baselineVerdict judges a median airlock/baseline ratio by the 5 % rule.
func baselineVerdict(ratio float64) string {
	if ratio >= baselineRatio {
		return "PASS"
	}
	return "FAIL"
}

// rssVerdict judges airlock's idle RSS minus the baseline's by "not higher", within the
// tolerance.
func rssVerdict(delta int64) string {
	if delta <= idleRSSTolerance {
		return "PASS"
	}
	return "FAIL"
}

// spread is max − min of xs.
func spread(xs []int64) int64 {
	if len(xs) == 0 {
		return 0
	}
	return slices.Max(xs) - slices.Min(xs)
}
