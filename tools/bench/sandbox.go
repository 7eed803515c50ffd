package main

// The sandbox section of `make bench`: how long `airlock sandbox create` and `airlock sandbox
// delete` take, cold (every create builds a new namespace, veth, cgroup, CA, sidecar with its
// kernel programs and OCI container), as wall time of the command a user types, how long
// `sandbox exec NAME true` takes (the price of one more command in a reused sandbox), and
// `sandbox exec --ephemeral NAME -- true` end to end (the per-tool-call mode: create, run,
// delete). It needs root, cgroup v2, bpffs and the OCI runtime (runc); without them it
// reports why and is skipped.
//
// The sandboxes' host side lives in a network namespace the bench creates and removes, so the
// machine's own network is never touched.

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/ebpf"
	"github.com/airlock-dev/airlock/test/imagetest"
)

// sandboxReport holds the sandbox section's figures: of the host's read-only view, and of a
// cached busybox image (img*), with the first create of the image, which unpacks it.
type sandboxReport struct {
	skipped                                     string
	create, del, execute, ephemeral             []time.Duration
	imgUnpack                                   []time.Duration
	imgCreate, imgDel, imgExecute, imgEphemeral []time.Duration
	err                                         error
}

// ephemeralTarget is the median `exec --ephemeral -- true` should stay under on 2 cores.
const ephemeralTarget = 200 * time.Millisecond

func runSandboxBench(ctx context.Context, e *env, root string) sandboxReport {
	if os.Geteuid() != 0 {
		return sandboxReport{skipped: "not root"}
	}
	if err := ebpf.Probe(); err != nil {
		return sandboxReport{skipped: err.Error()}
	}
	cgRoot, err := ebpf.Cgroup2Root()
	if err != nil {
		return sandboxReport{skipped: err.Error()}
	}
	bin, err := e.airlock(ctx, root)
	if err != nil {
		return sandboxReport{err: err}
	}
	hostNs := fmt.Sprintf("al-bench-%d", os.Getpid())
	if out, err := exec.CommandContext(ctx, "ip", "netns", "add", hostNs).CombinedOutput(); err != nil {
		return sandboxReport{err: fmt.Errorf("ip netns add: %v: %s", err, out)}
	}
	defer exec.Command("ip", "netns", "del", hostNs).Run()
	_ = exec.CommandContext(ctx, "ip", "-n", hostNs, "link", "set", "lo", "up").Run()
	cgParent := filepath.Join(cgRoot, hostNs)
	defer os.Remove(cgParent)
	stateDir := filepath.Join(root, "sandbox-state")

	airlock := func(args ...string) (time.Duration, error) {
		full := append([]string{"--net=/run/netns/" + hostNs, "--", bin, "sandbox"}, args...)
		cmd := exec.CommandContext(ctx, "nsenter", full...)
		began := time.Now()
		out, err := cmd.CombinedOutput()
		d := time.Since(began)
		if err != nil {
			return d, fmt.Errorf("airlock sandbox %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return d, nil
	}
	create := []string{"--profile", "offline", "--state-dir", stateDir, "--subnet", "198.19.200.0/24",
		"--cgroup-parent", cgParent, "--upstream-dns", "127.0.0.1:1", "--runtime", e.cfg.sandboxRT}
	var r sandboxReport
	cycles := max(e.cfg.sandboxRuns, 1)
	e.progress("sandbox (%s): %d cold create/exec/delete cycles, %d exec --ephemeral; the same with --image", e.cfg.sandboxRT, cycles, cycles)
	if err := sandboxCycles(airlock, create, stateDir, "bench", cycles, &r.create, &r.execute, &r.del, &r.ephemeral); err != nil {
		r.err = err
		return r
	}
	r.err = imageCycles(airlock, create, root, stateDir, cycles, &r)
	return r
}

// sandboxCycles measures cycles create/exec/delete of sandboxes made with create, then cycles
// `exec --ephemeral -- true`.
func sandboxCycles(airlock func(...string) (time.Duration, error), create []string, stateDir, prefix string, cycles int,
	creates, execs, dels, ephemerals *[]time.Duration) error {
	for i := range cycles {
		name := fmt.Sprintf("%s%d", prefix, i)
		d, err := airlock(append([]string{"create", name}, create...)...)
		if err != nil {
			_, _ = airlock("delete", name, "--state-dir", stateDir)
			return err
		}
		*creates = append(*creates, d)
		if d, err = airlock("exec", "--state-dir", stateDir, name, "true"); err != nil {
			_, _ = airlock("delete", name, "--state-dir", stateDir)
			return err
		}
		*execs = append(*execs, d)
		if d, err = airlock("delete", name, "--state-dir", stateDir); err != nil {
			return err
		}
		*dels = append(*dels, d)
	}
	for i := range cycles {
		name := fmt.Sprintf("%seph%d", prefix, i)
		args := append(append([]string{"exec", "--ephemeral"}, create...), name, "--", "true")
		d, err := airlock(args...)
		if err != nil {
			_, _ = airlock("delete", name, "--state-dir", stateDir)
			return err
		}
		*ephemerals = append(*ephemerals, d)
	}
	return nil
}

// imageCycles measures sandboxes of the busybox test image (an OCI layout): the first create,
// which unpacks its layers (a sandbox that keeps them pinned, deleted at the end, then makes
// every other create one of a cached image), then the cycles of sandboxCycles.
func imageCycles(airlock func(...string) (time.Duration, error), create []string, root, stateDir string, cycles int, r *sandboxReport) error {
	var b benchTB
	ref := filepath.Join(root, "busybox-layout")
	if err := b.run(func() { imagetest.WriteLayout(&b, imagetest.Busybox(&b), ref) }); err != nil {
		return fmt.Errorf("build the busybox image: %w", err)
	}
	create = append(slices.Clone(create), "--image", ref)
	d, err := airlock(append([]string{"create", "benchimgpin"}, create...)...)
	if err != nil {
		return err
	}
	defer airlock("delete", "benchimgpin", "--state-dir", stateDir) //nolint:errcheck
	r.imgUnpack = append(r.imgUnpack, d)
	return sandboxCycles(airlock, create, stateDir, "benchimg", cycles, &r.imgCreate, &r.imgExecute, &r.imgDel, &r.imgEphemeral)
}

// benchTB is imagetest.TB outside a test: Fatal ends run with the message as its error.
type benchTB struct{ msg string }

type benchFatal struct{}

func (*benchTB) Helper()             {}
func (b *benchTB) Fatal(args ...any) { b.msg = fmt.Sprint(args...); panic(benchFatal{}) }
func (b *benchTB) Fatalf(format string, args ...any) {
	b.msg = fmt.Sprintf(format, args...)
	panic(benchFatal{})
}

// run calls f and turns a Fatal inside it into an error.
func (b *benchTB) run(f func()) (err error) {
	defer func() {
		if p := recover(); p != nil {
			if _, ok := p.(benchFatal); !ok {
				panic(p)
			}
			err = fmt.Errorf("%s", b.msg)
		}
	}()
	f()
	return nil
}

func printSandboxReport(w io.Writer, r sandboxReport) {
	fmt.Fprintln(w, "\nLocal sandboxes (airlock sandbox create/exec/delete and exec --ephemeral -- true, wall time of the command, cold: new netns, veth, cgroup, CA, sidecar, eBPF and OCI container each time)")
	switch {
	case r.skipped != "":
		fmt.Fprintf(w, "  skipped: %s\n", r.skipped)
		return
	case r.err != nil:
		fmt.Fprintf(w, "  FAILED: %v\n", r.err)
		if len(r.create) == 0 {
			return
		}
	}
	row := func(what string, ds []time.Duration, target string) {
		if len(ds) == 0 {
			return
		}
		s := slices.Clone(ds)
		slices.Sort(s)
		fmt.Fprintf(w, "  %-9s n=%-3d min %7s  median %7s  max %7s%s\n", what, len(s),
			s[0].Round(time.Millisecond/10), s[len(s)/2].Round(time.Millisecond/10), s[len(s)-1].Round(time.Millisecond/10), target)
	}
	row("create", r.create, "")
	row("exec", r.execute, "")
	row("delete", r.del, "")
	row("ephemeral", r.ephemeral, targetMet(r.ephemeral, ephemeralTarget))
	if len(r.imgUnpack) == 0 {
		return
	}
	fmt.Fprintln(w, "  with --image (the busybox test image, an OCI layout; cached unless said otherwise)")
	row("unpack", r.imgUnpack, "   (the first create of the image: verify and unpack its layers)")
	row("create", r.imgCreate, "")
	row("exec", r.imgExecute, "")
	row("delete", r.imgDel, "")
	row("ephemeral", r.imgEphemeral, targetMet(r.imgEphemeral, imageEphemeralTarget))
}

// imageEphemeralTarget is the median `exec --ephemeral --image -- true` of a cached image
// should stay under on 2 cores (issue 33).
const imageEphemeralTarget = 250 * time.Millisecond

// targetMet says whether the median of ds is under target.
func targetMet(ds []time.Duration, target time.Duration) string {
	if len(ds) == 0 {
		return ""
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	if s[len(s)/2] >= target {
		return fmt.Sprintf("   target < %s: NOT met (median)", target)
	}
	return fmt.Sprintf("   target < %s: met (median)", target)
}

// airlock returns the airlock binary the bench runs, building it into dir if no leg has yet.
func (e *env) airlock(ctx context.Context, dir string) (string, error) {
	if e.airlockBin != "" {
		return e.airlockBin, nil
	}
	bin, err := airlockBinary(ctx, e, dir)
	if err != nil {
		return "", err
	}
	e.airlockBin = bin
	return bin, nil
}
