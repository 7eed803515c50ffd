package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// These tests run the sidecar build itself (built once from this package) with a shell script
// playing airlock-kube: the script reports its PID, its arguments and the forwarding mark, and
// exits 7, so a test sees that the process was replaced (same PID), what it was given and that
// the exit code came through.

// leanBinary is this package built without the kube tag, once per test process.
var leanBinary struct {
	once      sync.Once
	dir, path string
	err       error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if leanBinary.dir != "" {
		os.RemoveAll(leanBinary.dir)
	}
	os.Exit(code)
}

func buildLean(t *testing.T) string {
	t.Helper()
	leanBinary.once.Do(func() {
		dir, err := os.MkdirTemp("", "airlock-lean-")
		if err != nil {
			leanBinary.err = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		leanBinary.dir = dir
		leanBinary.path = filepath.Join(dir, "airlock")
		out, err := exec.CommandContext(ctx, "go", "build", "-o", leanBinary.path, ".").CombinedOutput()
		if err != nil {
			leanBinary.err = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if leanBinary.err != nil {
		t.Fatal(leanBinary.err)
	}
	return leanBinary.path
}

// fakeKube is airlock-kube as far as these tests need: it says who it is and what it got.
const fakeKube = `#!/bin/sh
echo "name=` + "%s" + `"
echo "pid=$$"
echo "forwarded=$AIRLOCK_KUBE_FORWARDED"
for a in "$@"; do echo "arg=$a"; done
exit 7
`

// installLean links the sidecar build into a new directory as airlock and returns its path.
func installLean(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "airlock")
	if err := os.Link(buildLean(t), bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// writeFakeKube writes the script as dir/airlock-kube; name tells the copies apart.
func writeFakeKube(t *testing.T, dir, name string) {
	t.Helper()
	script := strings.Replace(fakeKube, "%s", name, 1)
	if err := os.WriteFile(filepath.Join(dir, kubeBinary), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

// forwarded is what a run of the sidecar build showed.
type forwarded struct {
	code           int
	pid            int
	stdout, stderr string
}

// runLean runs bin with args and $PATH set to path.
func runLean(t *testing.T, bin, path string, args ...string) forwarded {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=" + path, "HOME=" + t.TempDir()}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run %s: %v", bin, err)
	}
	return forwarded{code: cmd.ProcessState.ExitCode(), pid: cmd.Process.Pid, stdout: stdout.String(), stderr: stderr.String()}
}

// lines returns the values of the script's "key=value" lines for key.
func (f forwarded) lines(key string) []string {
	var out []string
	for _, l := range strings.Split(f.stdout, "\n") {
		if v, ok := strings.CutPrefix(l, key+"="); ok {
			out = append(out, v)
		}
	}
	return out
}

func TestKubeCommandsExecAirlockKube(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want []string // what airlock-kube is given; nil: args
	}{
		{"webhook", []string{"webhook", "--tls-cert", "c.pem", "--image", "img:1"}, nil},
		{"webhook help", []string{"webhook", "--help"}, nil},
		{"node", []string{"node", "--node-name", "n1"}, nil},
		{"sandbox create", []string{"sandbox", "create", "sb1", "--backend", "kubernetes", "--image", "python:3", "--namespace", "team a", "--wait", "0"},
			[]string{"sandbox", "create", "sb1", "--namespace", "team a", "--image", "python:3", "--wait", "0s"}},
		{"sandbox create with identities", []string{"sandbox", "create", "sb1", "--backend", "kubernetes", "--image", "i", "--containers", "r,w", "--identities", "r=reviewer,w=author", "--wait", "0"},
			[]string{"sandbox", "create", "sb1", "--image", "i", "--containers", "r,w", "--identities", "r=reviewer,w=author", "--wait", "0s"}},
		{"sandbox list", []string{"sandbox", "list", "--backend=kubernetes", "--all-namespaces", "--json"},
			[]string{"sandbox", "list", "--all-namespaces", "--json"}},
		{"sandbox delete", []string{"sandbox", "delete", "-backend", "kubernetes", "--kube-context", "c", "sb1", "sb2"},
			[]string{"sandbox", "delete", "--kube-context", "c", "--", "sb1", "sb2"}},
	}
	bin := installLean(t)
	onPath := t.TempDir()
	writeFakeKube(t, onPath, "path")
	for _, next := range []bool{true, false} {
		for _, tc := range tests {
			t.Run(tc.name+map[bool]string{true: " next to airlock", false: " on PATH"}[next], func(t *testing.T) {
				bin := bin
				want := "path"
				if next {
					bin = installLean(t)
					writeFakeKube(t, filepath.Dir(bin), "next")
					want = "next"
				}
				got := runLean(t, bin, onPath+":/usr/bin:/bin", tc.args...)
				if got.code != 7 {
					t.Fatalf("exit %d, want airlock-kube's 7\nstdout: %s\nstderr: %s", got.code, got.stdout, got.stderr)
				}
				if n := got.lines("name"); !slices.Equal(n, []string{want}) {
					t.Errorf("ran the airlock-kube %v, want the one %s", n, map[bool]string{true: "next to airlock", false: "on PATH"}[next])
				}
				if p := got.lines("pid"); !slices.Equal(p, []string{strconv.Itoa(got.pid)}) {
					t.Errorf("airlock-kube ran as pid %v, want airlock's own %d (the process replaced)", p, got.pid)
				}
				wantArgs := tc.want
				if wantArgs == nil {
					wantArgs = tc.args
				}
				if a := got.lines("arg"); !slices.Equal(a, wantArgs) {
					t.Errorf("airlock-kube got %q, want %q", a, wantArgs)
				}
				if f := got.lines("forwarded"); !slices.Equal(f, []string{"1"}) {
					t.Errorf("%s=%v, want 1", envForwarded, f)
				}
			})
		}
	}
}

func TestKubeCommandsWithoutAirlockKube(t *testing.T) {
	bin := installLean(t)
	for _, args := range [][]string{
		{"webhook", "--help"},
		{"node", "--node-name", "n1"},
		{"sandbox", "list", "--backend", "kubernetes"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			got := runLean(t, bin, t.TempDir(), args...)
			if got.code != 1 {
				t.Fatalf("exit %d, want 1\nstderr: %s", got.code, got.stderr)
			}
			msg := strings.TrimSuffix(got.stderr, "\n")
			for _, want := range []string{args[0] + " needs airlock-kube", "next to " + bin, "$PATH", "make build", "go build -o airlock-kube ./cmd/airlock-kube"} {
				if !strings.Contains(msg, want) {
					t.Errorf("stderr %q lacks %q", msg, want)
				}
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("stderr %q: want one line", msg)
			}
		})
	}
}

func TestKubeForwardRefusesALeanAirlockKube(t *testing.T) {
	bin := installLean(t)
	if err := os.Link(bin, filepath.Join(filepath.Dir(bin), kubeBinary)); err != nil {
		t.Fatal(err)
	}
	got := runLean(t, bin, "/usr/bin:/bin", "node", "--node-name", "n1")
	if got.code != 1 || !strings.Contains(got.stderr, "is not the Kubernetes build") {
		t.Fatalf("exit %d, stderr %q: want 1 and that airlock-kube is not the Kubernetes build", got.code, got.stderr)
	}
}

func TestLocalBackendIsNotForwarded(t *testing.T) {
	bin := installLean(t)
	writeFakeKube(t, filepath.Dir(bin), "next")
	got := runLean(t, bin, "/usr/bin:/bin", "sandbox", "list", "--json", "--state-dir", t.TempDir())
	if got.code != 0 || strings.TrimSpace(got.stdout) != "[]" {
		t.Fatalf("exit %d, stdout %q, stderr %q: want 0 and an empty JSON list from this build", got.code, got.stdout, got.stderr)
	}
	// --identities is a pod's: a local sandbox refuses it rather than run without it.
	got = runLean(t, bin, "/usr/bin:/bin", "sandbox", "create", "sb1", "--profile", "offline", "--identities", "a=b", "--state-dir", t.TempDir())
	if got.code != 1 || !strings.Contains(got.stderr, "--identities and --containers are for --backend kubernetes") {
		t.Fatalf("local sandbox create --identities: exit %d, stderr %q; want 1, refused", got.code, got.stderr)
	}
}

// TestForwardedCommandsReachAirlockKube runs every forwarded command from a real airlock with
// the real airlock-kube beside it: each answer must be airlock-kube's own (its name on the
// error line, its flags in --help), so the two command lines cannot drift apart.
func TestForwardedCommandsReachAirlockKube(t *testing.T) {
	bin := installLean(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	kubeOut := filepath.Join(filepath.Dir(bin), kubeBinary)
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", kubeOut, "../airlock-kube").CombinedOutput(); err != nil {
		t.Fatalf("go build ../airlock-kube: %v\n%s", err, out)
	}
	kc := filepath.Join(t.TempDir(), "no-kubeconfig")
	tests := []struct {
		args   []string
		code   int
		output []string // each must appear in stdout+stderr
	}{
		{[]string{"webhook", "--help"}, 0, []string{"--tls-cert", "--image"}},
		{[]string{"node", "--help"}, 0, []string{"--node-name", "--pin-root"}},
		{[]string{"node"}, 1, []string{"airlock-kube: node: --node-name is required"}},
		{[]string{"sandbox", "create", "sb1", "--backend", "kubernetes", "--image", "i", "--kubeconfig", kc, "--wait", "0"}, 1,
			[]string{"airlock-kube: sandbox create sb1:", kc}},
		{[]string{"sandbox", "create", "sb1", "--backend", "kubernetes", "--kubeconfig", kc}, 1,
			[]string{"airlock-kube: sandbox create sb1 --backend kubernetes: --image is required"}},
		{[]string{"sandbox", "list", "--backend", "kubernetes", "--kubeconfig", kc, "--all-namespaces"}, 1,
			[]string{"airlock-kube: sandbox list:", kc}},
		{[]string{"sandbox", "delete", "--backend", "kubernetes", "--kubeconfig", kc, "sb1"}, 1,
			[]string{"airlock-kube: sandbox delete:", kc}},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args[:min(3, len(tc.args))], " "), func(t *testing.T) {
			got := runLean(t, bin, "/usr/bin:/bin", tc.args...)
			all := got.stdout + got.stderr
			if got.code != tc.code {
				t.Fatalf("airlock %q: exit %d, want %d\n%s", tc.args, got.code, tc.code, all)
			}
			for _, want := range tc.output {
				if !strings.Contains(all, want) {
					t.Errorf("airlock %q: output lacks %q:\n%s", tc.args, want, all)
				}
			}
		})
	}
}
