package main

// The baseline of the HTTPS section: with -baseline-bin, an airlock binary built from an
// older commit runs as one more leg, airlock-base, started and configured exactly as the
// airlock leg (same policy, flags and environment), in every test of the section: the
// acceptance's "no worse than today" names new tunnels, one tunnel's bulk, intercepted gRPC
// streaming and h2 (h2load), and running the others too gives both processes the same
// history. It runs back to back with airlock in every round (roundOrder), so
// airlock/airlock-base is a ratio of two legs measured under the same conditions. Its idle
// RSS is compared from fresh starts of both binaries, taken in alternation.

import (
	"context"
	"fmt"
	"io"
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

// copyBinaries copies airlock (built first if need be) and the baseline into the section's
// directory, the same way one after the other, and has the section run the copies. About 17 of
// airlock's ≈ 20.5 MiB of idle RSS are file-backed pages of its binary, and how many of them a
// start maps depends on how the file entered the page cache: one run measured a binary
// linked seconds before 1.5 MiB above an identical older file. Two copies made alike compare
// the programs, not their files' history.
func (te *tlsEnv) copyBinaries(ctx context.Context) error {
	air := te.e.airlockBin
	if air == "" {
		var err error
		if air, err = airlockBinary(ctx, te.e, te.dir); err != nil {
			return err
		}
		te.e.airlockBin = air
	}
	dir := filepath.Join(te.dir, "bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	te.airBin, te.baseBin = filepath.Join(dir, targetAirlock), filepath.Join(dir, targetBaseline)
	if err := copyExecutable(air, te.airBin); err != nil {
		return err
	}
	return copyExecutable(te.e.cfg.baselineBin, te.baseBin)
}

// copyExecutable copies src to a new executable dst and syncs it to disk.
func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("copy binary: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return fmt.Errorf("copy binary: %w", err)
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return nil
}

// rssSamples are the idle RSS figures (bytes, process tree) of fresh starts of airlock and
// of the baseline.
type rssSamples struct {
	air, base         []int64
	airFile, baseFile []int64 // of it, file-backed (RssFile: the binary's pages, mostly)
	problem           string  // non-empty: a start failed, and why
}

// sampleIdleRSS starts each binary idleRSSSamples times, alternating which goes first (and
// which goes first in the first pair, run by run), and
// reads its idle RSS as startLeg does (after it settled, before any load), each start in a
// fresh state directory, as a sidecar starts.
func (te *tlsEnv) sampleIdleRSS(ctx context.Context) *rssSamples {
	s := &rssSamples{}
	// Each start adds its interception CA to the client's roots: keep the legs' pool as it was.
	roots := te.roots.Clone()
	defer func() { te.roots = roots }()
	for i := range idleRSSSamples {
		order := []string{targetAirlock, targetBaseline}
		if (i+te.run)%2 == 1 {
			order = []string{targetBaseline, targetAirlock}
		}
		for _, name := range order {
			l := &tlsLeg{name: name}
			err := te.startLegIn(ctx, l, filepath.Join(te.dir, "idle-rss", fmt.Sprintf("%s-%d", name, i+1)))
			var file int64
			if l.pr != nil {
				file = procStatusBytes(l.pr.p.cmd.Process.Pid, "RssFile:")
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
				s.air, s.airFile = append(s.air, l.idleRSS), append(s.airFile, file)
			} else {
				s.base, s.baseFile = append(s.base, l.idleRSS), append(s.baseFile, file)
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
