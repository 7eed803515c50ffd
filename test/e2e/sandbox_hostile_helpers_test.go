//go:build linux

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/test/imagetest"
	"github.com/airlock-dev/airlock/test/privtest"
)

// Fixture of the adversarial sandbox tests (sandbox_hostile_test.go): a sandbox created with
// no isolation flag (only --runtime, and the probe mounted read-only), scripts that try by
// class what an agent inside might, and helpers that read their NAME=RESULT lines.

// hostileRuntimes are the OCI runtimes every adversarial test runs on (issue 27).
var hostileRuntimes = []string{"runc", "crun"}

// hostileProbeMount is where the probe's host directory is mounted inside a sandbox.
const hostileProbeMount = "/hostileprobe"

// hostile is one runtime's view of the shared sandbox fixture.
type hostile struct {
	*sbEnv
	rt       string // OCI runtime: runc or crun
	probeDir string // host directory holding the static hostileprobe binary
	probe    string // the probe's path inside a sandbox
	// image is the --image of every create (the busybox test image), or "" for the host's
	// read-only view.
	image string
}

// runHostile builds one world and the probe, then runs f once per runtime.
func runHostile(t *testing.T, f func(t *testing.T, h *hostile)) {
	t.Helper()
	runHostileOn(t, hostileRuntimes, f)
}

// runHostileOn is runHostile on the runtimes rts.
func runHostileOn(t *testing.T, rts []string, f func(t *testing.T, h *hostile)) {
	t.Helper()
	runHostileVariants(t, rts, false, f)
}

// runHostileVariants is runHostileOn, and with withImage once more on runc with every sandbox
// made from the busybox image (create --image; issue 33): the same attacks must fail from a
// root filesystem the sandbox may write.
func runHostileVariants(t *testing.T, rts []string, withImage bool, f func(t *testing.T, h *hostile)) {
	t.Helper()
	runHostileIn(t, newSandboxEnv(t), rts, withImage, f)
}

// runHostileLong is runHostile for one of the longest sandbox tests (newLongSandboxEnv).
func runHostileLong(t *testing.T, f func(t *testing.T, h *hostile)) {
	t.Helper()
	runHostileIn(t, newLongSandboxEnv(t), hostileRuntimes, false, f)
}

// runHostileIn is runHostileVariants in the fixture e.
func runHostileIn(t *testing.T, e *sbEnv, rts []string, withImage bool, f func(t *testing.T, h *hostile)) {
	t.Helper()
	dir := buildHostileProbe(t)
	for _, rt := range rts {
		t.Run(rt, func(t *testing.T) {
			privtest.Require(t, rt)
			f(t, &hostile{sbEnv: e, rt: rt, probeDir: dir, probe: hostileProbeMount + "/hostileprobe"})
		})
	}
	if withImage {
		t.Run("runc-image", func(t *testing.T) {
			privtest.Require(t, "runc")
			ref := imagetest.WriteLayout(t, imagetest.Busybox(t), filepath.Join(t.TempDir(), "busybox"))
			f(t, &hostile{sbEnv: e, rt: "runc", probeDir: dir, probe: hostileProbeMount + "/hostileprobe", image: ref})
		})
	}
}

// ownRoot marks the attempts names of r, writes into the sandbox's own root filesystem, as
// "own-root" when the sandbox is of an image: its root is its own overlay, writable by it,
// and what it writes there must only stay off the host (each test checks the host's paths).
func (h *hostile) ownRoot(t *testing.T, r cliResult, names ...string) cliResult {
	t.Helper()
	if h.image == "" {
		return r
	}
	lines := strings.Split(r.Stdout, "\n")
	for i, l := range lines {
		n, res, ok := strings.Cut(l, "=")
		if ok && slices.Contains(names, n) && strings.HasPrefix(res, "ok") {
			lines[i] = n + "=own-root:" + res
		}
	}
	r.Stdout = strings.Join(lines, "\n")
	return r
}

// hostileProbe is the static hostileprobe binary's directory, built once per test process
// (TestMain removes it): every adversarial test mounts the same one read-only.
var hostileProbe struct {
	once sync.Once
	dir  string
	err  error
}

// buildHostileProbe links ./test/hostileprobe, built static in the cache (cachedBinary), into a
// directory everyone may reach and read (the sandbox's root maps to an unprivileged uid
// outside, and runsc opens its mounts as that uid) and returns the directory; the first call
// makes it, the others reuse it.
func buildHostileProbe(t *testing.T) string {
	t.Helper()
	hostileProbe.once.Do(func() {
		hostileProbe.dir, hostileProbe.err = os.MkdirTemp("", "airlock-e2e-hostileprobe-")
		if hostileProbe.err != nil {
			return
		}
		if hostileProbe.err = os.Chmod(hostileProbe.dir, 0o755); hostileProbe.err != nil {
			return
		}
		var cached string
		if cached, hostileProbe.err = cachedBinary("./test/hostileprobe", "CGO_ENABLED=0"); hostileProbe.err != nil {
			return
		}
		hostileProbe.err = linkBinary(cached, filepath.Join(hostileProbe.dir, "hostileprobe"))
	})
	if hostileProbe.err != nil {
		t.Fatalf("build the hostile probe: %v", hostileProbe.err)
	}
	return hostileProbe.dir
}

// flags are what every hostile create gets: the runtime and the probe, read-only. Nothing
// else: the isolation under test must hold without flags.
func (h *hostile) flags(extra ...string) []string {
	flags := []string{"--runtime", h.rt, "--mount", h.probeDir + ":" + hostileProbeMount + ":ro"}
	if h.image != "" {
		flags = append(flags, "--image", h.image)
	}
	return append(flags, extra...)
}

// create creates a sandbox named after what with h.flags and extra, deleted when t ends.
func (h *hostile) create(t *testing.T, what string, extra ...string) (string, sandboxInfo) {
	t.Helper()
	name := h.name(what)
	return name, h.sbEnv.create(t, name, h.flags(extra...)...)
}

// createOut is create that also returns create's output and does not insist on a sidecar
// (a --network none sandbox has none).
func (h *hostile) createOut(t *testing.T, what string, extra ...string) (string, sandboxInfo, cliResult) {
	t.Helper()
	name := h.name(what)
	h.cleanupSandbox(t, name)
	r := h.run(t, nil, createEnv(), append([]string{"sandbox", "create", name}, h.createArgs(h.flags(extra...)...)...)...)
	if r.Code != 0 {
		t.Fatalf("sandbox create %s %v: %s\nsidecar log:\n%s", name, extra, r, h.sidecarLog(name))
	}
	info, ok := h.info(t, name)
	if !ok || info.Phase != "ready" {
		t.Fatalf("after create %s: list entry %+v (found %v), want phase ready", name, info, ok)
	}
	return name, info, r
}

// scriptPrelude defines the shell functions hostile scripts use. Each prints one line:
//
//	try NAME CMD...  NAME=ok when CMD succeeds, else NAME=denied
//	rd NAME FILE     NAME=ok:<the first bytes of FILE> when it can be read, else NAME=denied
//	wr NAME FILE     NAME=ok when FILE (an existing regular file, not a masking device node)
//	                 opens for writing; nothing is written (": >>")
//
// Lines whose result starts with "ok" are successes of the attack.
const scriptPrelude = `
try() { n=$1; shift; if "$@" >/dev/null 2>&1; then echo "$n=ok"; else echo "$n=denied"; fi; }
rd() { if c=$(cat "$2" 2>/dev/null); then echo "$1=ok:$(printf %s "$c" | tr '\n' ' ' | head -c 300)"; else echo "$1=denied"; fi; }
wr() { if [ -f "$2" ] && (: >> "$2") 2>/dev/null; then echo "$1=ok"; else echo "$1=denied"; fi; }
`

// loopbackPrelude defines loopback_probe PYTHON: a connection over the sandbox's own loopback,
// TCP and UDP, IPv4 and IPv6, each reported as lo.KIND=works or lo.KIND=broken:WHY.
const loopbackPrelude = `
loopback_probe() {
"$1" - <<'PY' 2>&1
import socket
def tcp(fam, host):
    l = socket.socket(fam); l.bind((host, 0)); l.listen(1)
    c = socket.create_connection(l.getsockname()[:2], timeout=5)
    a, _ = l.accept(); c.sendall(b"x")
    assert a.recv(1) == b"x", "no byte"
def udp(fam, host):
    r = socket.socket(fam, socket.SOCK_DGRAM); r.bind((host, 0)); r.settimeout(5)
    s = socket.socket(fam, socket.SOCK_DGRAM); s.sendto(b"x", r.getsockname()[:2])
    assert r.recv(1) == b"x", "no datagram"
for name, f, fam, host in (("lo.tcp4", tcp, socket.AF_INET, "127.0.0.1"), ("lo.tcp6", tcp, socket.AF_INET6, "::1"),
                           ("lo.udp4", udp, socket.AF_INET, "127.0.0.1"), ("lo.udp6", udp, socket.AF_INET6, "::1")):
    try:
        f(fam, host); print(name + "=works")
    except Exception as e:
        print(name + "=broken:" + type(e).__name__ + ":" + str(e))
PY
}
`

// wantLoopbackWorks fails t unless every connection loopback_probe tried worked.
func wantLoopbackWorks(t *testing.T, class string, r cliResult) {
	t.Helper()
	for _, k := range []string{"lo.tcp4", "lo.tcp6", "lo.udp4", "lo.udp6"} {
		if got := attemptResult(r.Stdout, k); got != "works" {
			t.Errorf("%s: %s over the sandbox's own loopback: %q, want works", class, k, got)
		}
	}
}

// attempt is one NAME=RESULT line of a hostile script.
type attempt struct{ name, result string }

func (a attempt) ok() bool { return strings.HasPrefix(a.result, "ok") }

// attempts parses a script's NAME=RESULT lines (names may repeat).
func attempts(out string) []attempt {
	var as []attempt
	for _, l := range strings.Split(out, "\n") {
		n, r, ok := strings.Cut(l, "=")
		if ok && n != "" && !strings.ContainsAny(n, " \t") {
			as = append(as, attempt{n, r})
		}
	}
	return as
}

// wantNoneSucceeded fails t for every attempt of r that succeeded and for every name in
// expected that the script did not report (a script that broke halfway proves nothing).
func wantNoneSucceeded(t *testing.T, class string, r cliResult, expected ...string) {
	t.Helper()
	t.Logf("%s: what the sandbox tried:\n%s", class, r.Stdout)
	seen := map[string]bool{}
	for _, a := range attempts(r.Stdout) {
		seen[a.name] = true
		if a.ok() {
			t.Errorf("%s: %s succeeded from inside the sandbox: %s", class, a.name, a.result)
		}
	}
	for _, n := range expected {
		if !seen[n] {
			t.Errorf("%s: the script did not report %s; output:\n%s\nstderr:\n%s", class, n, r.Stdout, r.Stderr)
		}
	}
}

// wantNoSecret fails t when out holds any of the secrets.
func wantNoSecret(t *testing.T, class, out string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if s != "" && strings.Contains(out, s) {
			t.Errorf("%s: the sandbox read %q; output:\n%s", class, s, out)
		}
	}
}

// wantAbsentOnHost fails t for every path that exists on the host (the sandbox wrote it).
func wantAbsentOnHost(t *testing.T, class string, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s: the sandbox created %s on the host", class, p)
		}
	}
}

// removeOnCleanup removes the host paths when t ends: what an attack that worked left.
func removeOnCleanup(t *testing.T, paths ...string) {
	t.Cleanup(func() {
		for _, p := range paths {
			_ = os.RemoveAll(p)
		}
	})
}

// quoteSh quotes s for a POSIX shell.
func quoteSh(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// splitMarker writes marker as two shell-quoted halves, so that a script that passes both to
// the probe does not hold the marker whole in its own command line.
func splitMarker(marker string) string {
	i := len(marker) / 2
	return quoteSh(marker[:i]) + " " + quoteSh(marker[i:])
}

// held is a long-running shell inside a sandbox, started through `sandbox exec`, that answers
// each line on its stdin with "ack LINE" until stdin closes. Its command line holds marker.
type held struct {
	in     io.WriteCloser
	out    *bufio.Reader
	marker string
}

// hold starts a held shell in sandbox name that runs setup first; marker becomes its $0.
func (h *hostile) hold(t *testing.T, name, setup, marker string) *held {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	script := setup + "\necho ready; while read l; do echo \"ack $l\"; done"
	args := []string{"sandbox", "exec", "--state-dir", h.stateDir, name, "--", "sh", "-c", script, marker}
	cmd := h.command(ctx, nil, args...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start a held shell in %s: %v", name, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		in.Close() // the shell's read ends, it exits, exec returns
		select {
		case <-done:
		case <-time.After(sbCommandTimeout): // a bound, not synchronisation
			t.Errorf("held shell in %s did not exit after its stdin closed; killing it", name)
		}
		cancel()
	})
	p := &held{in: in, out: bufio.NewReader(out), marker: marker}
	if line, err := p.out.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("held shell in %s: first line %q, %v; stderr %q", name, line, err, stderr.String())
	}
	return p
}

// alive says whether the held shell still answers (nothing killed or stopped it).
func (p *held) alive() bool {
	if _, err := fmt.Fprintln(p.in, "ping"); err != nil {
		return false
	}
	line, err := p.out.ReadString('\n')
	return err == nil && line == "ack ping\n"
}

// hostPid finds the held shell on the host. It fails t when there is none.
func (p *held) hostPid(t *testing.T) int {
	t.Helper()
	pids := hostShells(t, p.marker)
	if len(pids) == 0 {
		t.Fatalf("no process on the host runs the held shell %s", p.marker)
	}
	return pids[0]
}

// hostShells lists the live host processes whose command line is sh -c SCRIPT marker.
func hostShells(t *testing.T, marker string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, d := range entries {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue
		}
		argv := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
		if len(argv) == 4 && filepath.Base(argv[0]) == "sh" && argv[1] == "-c" && argv[3] == marker && processAlive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// hostUids reads the real, effective, saved and filesystem uids of a host process.
func hostUids(t *testing.T, pid int) []string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "Uid:"); ok {
			return strings.Fields(rest)
		}
	}
	t.Fatalf("/proc/%d/status has no Uid line", pid)
	return nil
}
