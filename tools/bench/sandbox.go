package main

// The sandbox section of `make bench`: how long `airlock sandbox create` and `airlock sandbox
// delete` take, cold (every create builds a new namespace, veth, cgroup, CA, sidecar with its
// kernel programs and OCI container), as wall time of the command a user types, how long
// `sandbox exec NAME true` takes (the price of one more command in a reused sandbox), and
// `sandbox exec --ephemeral NAME -- true` end to end (the per-tool-call mode: create, run,
// delete). It needs root, cgroup v2, bpffs and the OCI runtime (runc); without them it
// reports why and is skipped. Then the same with --disk 32M (what the sandbox's own ext4
// disk adds: reserving the image, mkfs, a loop device and the mount, and their release), and
// with --runtime runsc (gVisor) when it is installed.
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

// sandboxReport holds the sandbox section's figures: those of --sandbox-runtime, then the
// variants (--disk, runsc).
type sandboxReport struct {
	skipped                         string
	create, del, execute, ephemeral []time.Duration
	variants                        []sandboxVariant
	err                             error
}

// sandboxVariant is the figures of sandboxes created with extra flags. unpack is the first
// create of an image (--image), target the ephemeral median's target (0: none).
type sandboxVariant struct {
	label                           string
	create, del, execute, ephemeral []time.Duration
	unpack                          []time.Duration
	target                          time.Duration
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
	e.progress("sandbox (%s): %d cold create/exec/delete cycles, %d exec --ephemeral", e.cfg.sandboxRT, cycles, cycles)
	for i := range cycles {
		name := fmt.Sprintf("bench%d", i)
		d, err := airlock(append([]string{"create", name}, create...)...)
		if err != nil {
			r.err = err
			_, _ = airlock("delete", name, "--state-dir", stateDir)
			return r
		}
		r.create = append(r.create, d)
		if d, err = airlock("exec", "--state-dir", stateDir, name, "true"); err != nil {
			r.err = err
		} else {
			r.execute = append(r.execute, d)
		}
		d, err = airlock("delete", name, "--state-dir", stateDir)
		if err != nil {
			r.err = err
			return r
		}
		r.del = append(r.del, d)
	}
	for i := range cycles {
		name := fmt.Sprintf("bencheph%d", i)
		args := append(append([]string{"exec", "--ephemeral"}, create...), name, "--", "true")
		d, err := airlock(args...)
		if err != nil {
			r.err = err
			_, _ = airlock("delete", name, "--state-dir", stateDir)
			return r
		}
		r.ephemeral = append(r.ephemeral, d)
	}
	variants := []struct {
		label string
		extra []string
	}{{"--disk 32M", []string{"--disk", "32M"}}}
	if _, err := exec.LookPath("runsc"); err == nil && filepath.Base(e.cfg.sandboxRT) != "runsc" {
		variants = append(variants, struct {
			label string
			extra []string
		}{"runsc", []string{"--runtime", "runsc"}})
	}
	for i, v := range variants {
		e.progress("sandbox %s: %d cold create/exec/delete cycles, %d exec --ephemeral", v.label, cycles, cycles)
		got, err := sandboxCycles(airlock, append(slices.Clone(create), v.extra...), fmt.Sprintf("benchv%d-", i), stateDir, cycles)
		got.label = v.label
		r.variants = append(r.variants, got)
		if err != nil {
			r.err = err
			return r
		}
	}
	e.progress("sandbox --image: the first create of the busybox image, %d cold create/exec/delete cycles, %d exec --ephemeral", cycles, cycles)
	v, err := imageVariant(airlock, create, root, stateDir, cycles)
	r.variants = append(r.variants, v)
	r.err = err
	return r
}

// imageEphemeralTarget is the median `exec --ephemeral --image -- true` of a cached image
// should stay under on 2 cores (issue 33).
const imageEphemeralTarget = 250 * time.Millisecond

// imageVariant measures sandboxes of the busybox test image (an OCI layout): the first
// create, which unpacks its layers (that sandbox keeps them pinned until the end: the layers
// outlive their sandboxes anyway until a reap, the pin makes sure no reap meets them unused),
// then the cycles of sandboxCycles.
func imageVariant(airlock func(...string) (time.Duration, error), create []string, root, stateDir string, cycles int) (sandboxVariant, error) {
	v := sandboxVariant{label: "--image (the busybox test image, an OCI layout, cached)", target: imageEphemeralTarget}
	var b benchTB
	ref := filepath.Join(root, "busybox-layout")
	if err := b.run(func() { imagetest.WriteLayout(&b, imagetest.Busybox(&b), ref) }); err != nil {
		return v, fmt.Errorf("build the busybox image: %w", err)
	}
	create = append(slices.Clone(create), "--image", ref)
	d, err := airlock(append([]string{"create", "benchimgpin"}, create...)...)
	if err != nil {
		_, _ = airlock("delete", "benchimgpin", "--state-dir", stateDir)
		return v, err
	}
	defer airlock("delete", "benchimgpin", "--state-dir", stateDir) //nolint:errcheck
	v.unpack = append(v.unpack, d)
	got, err := sandboxCycles(airlock, create, "benchimg", stateDir, cycles)
	got.label, got.unpack, got.target = v.label, v.unpack, v.target
	return got, err
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

// targetMet says whether the median of ds is under target ("" without a target).
func targetMet(ds []time.Duration, target time.Duration) string {
	if len(ds) == 0 || target == 0 {
		return ""
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	if s[len(s)/2] >= target {
		return fmt.Sprintf("   target < %s: NOT met (median)", target)
	}
	return fmt.Sprintf("   target < %s: met (median)", target)
}

// sandboxCycles measures cycles of create, exec true and delete, then cycles of exec
// --ephemeral -- true, with the create flags create (the last runtime flag wins).
func sandboxCycles(airlock func(...string) (time.Duration, error), create []string, prefix, stateDir string, cycles int) (sandboxVariant, error) {
	var v sandboxVariant
	step := func(into *[]time.Duration, args ...string) error {
		d, err := airlock(args...)
		if err == nil {
			*into = append(*into, d)
		}
		return err
	}
	for i := range cycles {
		name := fmt.Sprintf("%s%d", prefix, i)
		err := step(&v.create, append([]string{"create", name}, create...)...)
		if err == nil {
			err = step(&v.execute, "exec", "--state-dir", stateDir, name, "true")
		}
		if derr := step(&v.del, "delete", name, "--state-dir", stateDir); err == nil {
			err = derr
		}
		if err != nil {
			return v, err
		}
	}
	for i := range cycles {
		name := fmt.Sprintf("%seph%d", prefix, i)
		if err := step(&v.ephemeral, append(append([]string{"exec", "--ephemeral"}, create...), name, "--", "true")...); err != nil {
			_, _ = airlock("delete", name, "--state-dir", stateDir)
			return v, err
		}
	}
	return v, nil
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
	met := ""
	if len(r.ephemeral) > 0 {
		s := slices.Clone(r.ephemeral)
		slices.Sort(s)
		met = fmt.Sprintf("   target < %s: met (median)", ephemeralTarget)
		if s[len(s)/2] >= ephemeralTarget {
			met = fmt.Sprintf("   target < %s: NOT met (median)", ephemeralTarget)
		}
	}
	row("ephemeral", r.ephemeral, met)
	for _, v := range r.variants {
		fmt.Fprintf(w, "  with %s:\n", v.label)
		row("unpack", v.unpack, "   (the first create of the image: verify and unpack its layers)")
		row("create", v.create, "")
		row("exec", v.execute, "")
		row("delete", v.del, "")
		row("ephemeral", v.ephemeral, targetMet(v.ephemeral, v.target))
	}
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
