//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/ebpf"
	"github.com/airlock-dev/airlock/test/fakellm"
	"github.com/airlock-dev/airlock/test/privtest"
	"github.com/airlock-dev/airlock/test/testnet"
)

// Fixture and helpers of the local sandbox manager tests (sandbox_test.go).

// sandboxInfo is one element of `airlock sandbox list --json` (the contract's fields).
type sandboxInfo struct {
	Name          string  `json:"name"`
	Backend       string  `json:"backend"`
	Phase         string  `json:"phase"`
	Created       string  `json:"created"`
	AgeSeconds    float64 `json:"age_seconds"`
	Policy        string  `json:"policy"`
	Environment   string  `json:"environment"`
	Health        string  `json:"health"`
	Bytes         int64   `json:"bytes"`
	Denies        int64   `json:"denies"`
	LLMSpendUSD   float64 `json:"llm_spend_usd"`
	Netns         string  `json:"netns"`
	HostVeth      string  `json:"host_veth"`
	HostAddr      string  `json:"host_addr"`
	SandboxAddr   string  `json:"sandbox_addr"`
	Cgroup        string  `json:"cgroup"`
	StateDir      string  `json:"state_dir"`
	EnvFile       string  `json:"env_file"`
	CABundle      string  `json:"ca_bundle"`
	AdminAddr     string  `json:"admin_addr"`
	SupervisorPid int     `json:"supervisor_pid"`
	SidecarPid    int     `json:"sidecar_pid"`
	OpenAsks      int     `json:"open_asks"`
	DiskBytes     int64   `json:"disk_bytes"`
	DiskUsedBytes int64   `json:"disk_used_bytes"`
	Frozen        string  `json:"frozen"`
	Identities    []struct {
		Name       string `json:"name"`
		ProxyBytes int64  `json:"proxy_bytes"`
		Denies     int64  `json:"denies"`
	} `json:"identities"`
}

// sbEnv is the shared fixture: one world with a git server and a fake model provider, one
// state directory, one cgroup parent.
type sbEnv struct {
	w          *testnet.World
	bin        string
	git        *testnet.GitServer
	llm        *fakellm.Server
	stateDir   string
	cgParent   string
	policyFile string
	certDir    string // empty: SSL_CERT_DIR, so only SSL_CERT_FILE is trusted
	python     string
	seq        atomic.Int64
	// out is a host directory every sandbox of the fixture sees read-write at outInside: the
	// files a test hands in (the probe binary, the world's CA) and those it reads back.
	out string
}

// outInside is where sandboxes see sbEnv.out.
const outInside = "/e2e"

// inside is the path inside a sandbox of the file name in e.out.
func (e *sbEnv) inside(name string) string { return filepath.Join(outInside, name) }

// newSandboxEnv gates a privileged test, makes it parallel, waits until no other sandbox test
// runs (parallelSandbox) and builds the fixture.
func newSandboxEnv(t *testing.T) *sbEnv {
	t.Helper()
	requireSandbox(t)
	parallelSandbox(t, false)
	return sandboxEnv(t)
}

// newLongSandboxEnv is newSandboxEnv for one of the longest sandbox tests (40 s and more on the
// shared 2 cores): it gets the next free sandbox slot before the others waiting
// (parallelSandbox), so that it does not start late and finish last, alone.
func newLongSandboxEnv(t *testing.T) *sbEnv {
	t.Helper()
	requireSandbox(t)
	parallelSandbox(t, true)
	return sandboxEnv(t)
}

// newSandboxEnvAlone is newSandboxEnv for a test that must run with no other test at all: it
// is not parallel.
func newSandboxEnvAlone(t *testing.T) *sbEnv {
	t.Helper()
	requireSandbox(t)
	return sandboxEnv(t)
}

func requireSandbox(t *testing.T) {
	t.Helper()
	privtest.Require(t, "curl", "git", "python3", "nsenter", "dig", "script")
}

func sandboxEnv(t *testing.T) *sbEnv {
	t.Helper()
	if err := ebpf.Probe(); err != nil {
		t.Fatalf("kernel lacks what the enforcement needs: %v", err)
	}
	e := &sbEnv{w: testnet.NewWorld(t), bin: airlockBinary(t), python: "python3"}
	e.w.Allowed.ListenHTTPS(t, 8443)
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		e.python = "/usr/bin/python3" // the distribution's, not a version manager's shim
	}
	e.git = e.w.StartGitServer(t, netip.MustParseAddr(sbGitAddr), "git.test")
	e.llm = fakellm.New(fakellm.Config{Flavor: fakellm.OpenAI, Key: sbOpenAIKey})
	llmAddr := netip.MustParseAddr(sbLLMAddr)
	e.w.AddUpstreamAddr(t, llmAddr)
	e.w.DNS.Set("openai.llm.test", testnet.DefaultTTL, llmAddr)
	ln, err := e.w.Upstream.Listen("tcp", netip.AddrPortFrom(llmAddr, 8080).String())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: e.llm, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })

	e.stateDir = filepath.Join(e.w.Dir, "state")
	e.certDir = filepath.Join(e.w.Dir, "no-cert-dir")
	if err := os.Mkdir(e.certDir, 0o755); err != nil {
		t.Fatal(err)
	}
	e.policyFile = e.w.WriteFile(t, "sandbox-policy.yaml", []byte(sbPolicy))
	e.cgParent = testnet.NewCgroup(t).Path
	e.out = sharedDir(t)
	copyFile(t, testnet.ProbeBinary(t), filepath.Join(e.out, "probe"), 0o755)
	copyFile(t, e.w.CA.File, filepath.Join(e.out, "ca.pem"), 0o644)
	return e
}

// sharedDir makes a directory a sandbox can be handed with --mount: on a path its unprivileged
// mapped root can traverse (not under a test's 0700 temporary directory), writable by it.
func sharedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "airlock-e2e-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, mode); err != nil {
		t.Fatal(err)
	}
}

// name returns a sandbox name unique on this machine (pid) and in this process.
func (e *sbEnv) name(what string) string {
	return fmt.Sprintf("e%d-%s%d", os.Getpid(), what, e.seq.Add(1))
}

// cliResult is the outcome of one airlock command.
type cliResult struct {
	Stdout, Stderr string
	Code           int
}

func (r cliResult) String() string {
	return fmt.Sprintf("exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
}

// baseEnv is the environment of every airlock command: the world's CA is the only trusted
// root (create copies it into the sandbox's bundle, and the sidecar inherits it).
func (e *sbEnv) baseEnv() []string {
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + e.w.Dir,
		"SSL_CERT_FILE=" + e.w.CA.File,
		"SSL_CERT_DIR=" + e.certDir,
		"GIT_CONFIG_NOSYSTEM=1",
	}
}

// command builds `airlock ARGS...` in the sidecar namespace with the host's mounts.
func (e *sbEnv) command(ctx context.Context, env []string, args ...string) *exec.Cmd {
	cmd := e.w.Sidecar.CommandHostMounts(ctx, e.bin, args...)
	cmd.Env = append(e.baseEnv(), env...)
	return cmd
}

// run runs `airlock ARGS...` with stdin (may be nil) and extra environment.
func (e *sbEnv) run(t *testing.T, stdin io.Reader, env []string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sbCommandTimeout)
	defer cancel()
	cmd := e.command(ctx, env, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &stdout, &stderr
	err := cmd.Run()
	r := cliResult{Stdout: stdout.String(), Stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.Exited():
		r.Code = ee.ExitCode()
	case errors.As(err, &ee):
		// Killed by a signal: report it as a shell would ($? = 128+N). `sandbox exec`
		// becomes the command itself, so its death by a signal is the command's.
		r.Code = -1
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.Code = 128 + int(ws.Signal())
		}
	default:
		t.Fatalf("run airlock %v: %v", args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("airlock %v did not finish within %v: %s", args, sbCommandTimeout, r)
	}
	return r
}

// createArgs are the flags every create gets after NAME.
func (e *sbEnv) createArgs(extra ...string) []string {
	return append([]string{"--policy", e.policyFile, "--state-dir", e.stateDir, "--subnet", sbSubnet,
		"--cgroup-parent", e.cgParent, "--upstream-dns", e.w.DNS.Addr.String(), "--mount", e.out + ":" + outInside + ":rw"}, extra...)
}

// createEnv is create's extra environment: the secrets the sidecar reads.
func createEnv() []string {
	return []string{"E2E_SANDBOX_TOKEN=" + sbToken, "E2E_OPENAI_KEY=" + sbOpenAIKey}
}

// create creates sandbox name, deletes it when t ends, and returns its list entry.
func (e *sbEnv) create(t *testing.T, name string, extra ...string) sandboxInfo {
	t.Helper()
	e.cleanupSandbox(t, name)
	r := e.run(t, nil, createEnv(), append([]string{"sandbox", "create", name}, e.createArgs(extra...)...)...)
	if r.Code != 0 {
		t.Fatalf("sandbox create %s: %s\nsidecar log:\n%s", name, r, e.sidecarLog(name))
	}
	info, ok := e.info(t, name)
	if !ok {
		t.Fatalf("sandbox create %s succeeded but list does not show it", name)
	}
	if info.Phase != "ready" || info.Health != "ok" {
		t.Fatalf("after create: phase %q health %q, want ready/ok", info.Phase, info.Health)
	}
	return info
}

// cleanupSandbox deletes name when t ends (a no-op when the test already did), and kills what
// is left of its processes if delete failed.
func (e *sbEnv) cleanupSandbox(t *testing.T, name string) {
	t.Cleanup(func() {
		info, ok := e.info(t, name)
		r := e.run(t, nil, nil, "sandbox", "delete", "--state-dir", e.stateDir, name)
		if r.Code != 0 {
			t.Errorf("cleanup: sandbox delete %s: %s", name, r)
		}
		if ok {
			for _, pid := range []int{info.SupervisorPid, info.SidecarPid} {
				if pid > 0 && processAlive(pid) {
					t.Errorf("cleanup: pid %d of sandbox %s outlived delete; killing it", pid, name)
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		if t.Failed() {
			t.Logf("sidecar log of %s:\n%s", name, e.sidecarLog(name))
		}
	})
}

func (e *sbEnv) sidecarLog(name string) string {
	b, err := os.ReadFile(filepath.Join(e.stateDir, "sandboxes", name, "sidecar.log"))
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return string(b)
}

// list runs `sandbox list --json`.
func (e *sbEnv) list(t *testing.T) []sandboxInfo {
	t.Helper()
	r := e.run(t, nil, nil, "sandbox", "list", "--json", "--state-dir", e.stateDir)
	if r.Code != 0 {
		t.Fatalf("sandbox list --json: %s", r)
	}
	var infos []sandboxInfo
	if err := json.Unmarshal([]byte(r.Stdout), &infos); err != nil {
		t.Fatalf("sandbox list --json: not a JSON array of sandboxes: %v: %q", err, r.Stdout)
	}
	return infos
}

func (e *sbEnv) info(t *testing.T, name string) (sandboxInfo, bool) {
	t.Helper()
	for _, i := range e.list(t) {
		if i.Name == name {
			return i, true
		}
	}
	return sandboxInfo{}, false
}

// exec runs `airlock sandbox exec [FLAGS] NAME -- CMD...`; flags come before NAME.
func (e *sbEnv) exec(t *testing.T, flags []string, name string, env []string, stdin io.Reader, cmd ...string) cliResult {
	t.Helper()
	args := append([]string{"sandbox", "exec", "--state-dir", e.stateDir}, flags...)
	args = append(append(args, name, "--"), cmd...)
	return e.run(t, stdin, env, args...)
}

// sh runs a shell script in the sandbox with the env file applied.
func (e *sbEnv) sh(t *testing.T, name, script string) cliResult {
	t.Helper()
	return e.exec(t, nil, name, nil, nil, "sh", "-c", script)
}

// probe starts the sandbox probe (the test binary) inside the sandbox through exec.
func (e *sbEnv) probe(t *testing.T, name string) *testnet.SandboxProbe {
	t.Helper()
	// exec gives the command a clean environment: the probe switch must be passed by name.
	args := []string{"sandbox", "exec", "--state-dir", e.stateDir, "--env", testnet.EnvProbe, name, "--", e.inside("probe")}
	return testnet.StartProbeCommand(t, e.command(context.Background(), []string{testnet.ProbeEnv}, args...))
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	if err != nil {
		return !errors.Is(err, syscall.ESRCH)
	}
	// A zombie is dead for our purposes.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// vethsIn lists the links named al* in namespace ns (the sandboxes' host ends).
func vethsIn(t *testing.T, ns *testnet.Netns) []string {
	t.Helper()
	out, err := exec.Command("ip", "-n", ns.Name, "-o", "link", "show").CombinedOutput()
	if err != nil {
		t.Fatalf("ip link: %v: %s", err, out)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		n, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		if strings.HasPrefix(n, "al") {
			names = append(names, n)
		}
	}
	return names
}

// listenersIn counts the listening TCP and UDP sockets in namespace ns (the sidecars').
func listenersIn(t *testing.T, ns *testnet.Netns) int {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns.Name, "ss", "-H", "-l", "-t", "-u", "-n").CombinedOutput()
	if err != nil {
		t.Fatalf("ss: %v: %s", err, out)
	}
	return len(strings.Split(strings.TrimSpace(string(out)), "\n"))
}

// leftovers lists everything of sandbox name (with its list entry info, if known) that
// still exists.
func (e *sbEnv) leftovers(t *testing.T, name string, info sandboxInfo) []string {
	t.Helper()
	left := e.fsLeftovers(t, name)
	if info.Cgroup != "" && info.Cgroup != filepath.Join(e.cgParent, name) {
		if _, err := os.Lstat(info.Cgroup); err == nil {
			left = append(left, info.Cgroup)
		}
	}
	if info.HostVeth != "" {
		// The pair goes with the sandbox's namespace, in the kernel's background: it may
		// outlive the delete by milliseconds, its addresses never do.
		if out, err := exec.Command("ip", "-n", e.w.Sidecar.Name, "-o", "addr", "show", "dev", info.HostVeth).CombinedOutput(); err == nil && strings.Contains(string(out), " inet ") {
			left = append(left, "address on veth "+info.HostVeth+": "+strings.TrimSpace(string(out)))
		}
		deadline := time.Now().Add(10 * time.Second)
		for slices.Contains(vethsIn(t, e.w.Sidecar), info.HostVeth) {
			if time.Now().After(deadline) {
				left = append(left, "veth "+info.HostVeth)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, pid := range []int{info.SupervisorPid, info.SidecarPid} {
		if pid > 0 && processAlive(pid) {
			left = append(left, fmt.Sprintf("process %d", pid))
		}
	}
	if _, ok := e.info(t, name); ok {
		left = append(left, "list entry")
	}
	return left
}

// fsLeftovers is leftovers without the list entry check (one `sandbox list` per call).
func (e *sbEnv) fsLeftovers(t *testing.T, name string) []string {
	t.Helper()
	var left []string
	for _, p := range []string{"/run/netns/airlock-" + name, "/etc/netns/airlock-" + name,
		filepath.Join(e.cgParent, name), filepath.Join(ebpf.DefaultPinRoot, name),
		filepath.Join(e.stateDir, "sandboxes", name+".json"), filepath.Join(e.stateDir, "sandboxes", name)} {
		if _, err := os.Lstat(p); err == nil {
			left = append(left, p)
		}
	}
	return left
}

// processesOf counts the live processes whose command line mentions the state directory
// (supervisors and sidecars of this fixture).
func (e *sbEnv) processesOf() int {
	entries, _ := os.ReadDir("/proc")
	n := 0
	for _, d := range entries {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(e.stateDir)) && processAlive(pid) {
			n++
		}
	}
	return n
}

func countDir(t *testing.T, dir string, keep func(os.DirEntry) bool) int {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, en := range entries {
		if keep(en) {
			n++
		}
	}
	return n
}

// waitSidecar polls `list --json` (bounded) until the sandbox reports health ok with a
// sidecar pid other than old.
func (e *sbEnv) waitSidecar(t *testing.T, name string, old int) sandboxInfo {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last sandboxInfo
	for backoff := 20 * time.Millisecond; ; backoff = min(backoff*2, 300*time.Millisecond) {
		info, ok := e.info(t, name)
		if ok && info.Health == "ok" && info.SidecarPid > 0 && info.SidecarPid != old && processAlive(info.SidecarPid) {
			return info
		}
		last = info
		if time.Now().After(deadline) {
			t.Fatalf("sidecar of %s not back within 30s: last %+v\nlog:\n%s", name, last, e.sidecarLog(name))
		}
		time.Sleep(backoff) // polling another process's state, bounded by the deadline
	}
}

// auditCount counts the events in sandbox name's audit log that match.
func (e *sbEnv) auditCount(t *testing.T, name string, match func(testnet.AuditEvent) bool) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(e.stateDir, "sandboxes", name, "audit.log"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(data), "\n") {
		if ev, ok := testnet.ParseAuditEvent(l); ok && match(ev) {
			n++
		}
	}
	return n
}

// waitAudit waits (polling the file, bounded) until sandbox name's audit log holds more than
// before events that match: a tunnel's event is written when the tunnel closes, which may be
// just after the client has exited. what names the event for the failure message.
func (e *sbEnv) waitAudit(t *testing.T, name string, before int, what string, match func(testnet.AuditEvent) bool) {
	t.Helper()
	deadline := time.Now().Add(testnet.EventTimeout)
	for e.auditCount(t, name, match) <= before {
		if time.Now().After(deadline) {
			data, _ := os.ReadFile(filepath.Join(e.stateDir, "sandboxes", name, "audit.log"))
			t.Errorf("no new %s in the audit log of %s within %v; the log:\n%s", what, name, testnet.EventTimeout, data)
			return
		}
		time.Sleep(20 * time.Millisecond) // polling another process's log file, bounded
	}
}

// tunnelTo matches the audit event of an allowed tunnel of kind (connect: a CONNECT tunnel or a
// transparent one, the audit log does not tell them apart) to dest.
func tunnelTo(kind, dest string) func(testnet.AuditEvent) bool {
	return func(ev testnet.AuditEvent) bool {
		return ev.Kind == kind && ev.Destination == dest && ev.Decision == "allow"
	}
}

// curlResolveFailed is curl's exit code when the name does not resolve.
const curlResolveFailed = 6

// curlScript is the curl command line the sandbox tests run with sh -c: it prints the body,
// then a trailer line with the status code and the CONNECT status.
func curlScript(args string) string {
	return `curl --silent --show-error --max-time 20 --write-out '\n%{http_code} %{http_connect}' ` + args
}

// parseCurl splits curlScript's output into body and codes.
func parseCurl(t *testing.T, r cliResult) (body string, code, connect int) {
	t.Helper()
	body, trailer, ok := cutLast(r.Stdout, "\n")
	if !ok {
		t.Fatalf("curl output has no trailer: %s", r)
	}
	f := strings.Fields(trailer)
	if len(f) != 2 {
		t.Fatalf("curl trailer %q: %s", trailer, r)
	}
	code, _ = strconv.Atoi(f[0])
	connect, _ = strconv.Atoi(f[1])
	return body, code, connect
}
