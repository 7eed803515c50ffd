//go:build linux

package testnet

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// EnvBinary names a prebuilt airlock binary to use instead of building ./cmd/airlock.
const EnvBinary = "AIRLOCK_BIN"

// Timeouts for waiting on the binary. They bound waits on readiness signals; nothing sleeps.
const (
	// ReadyTimeout bounds the wait for /readyz after start.
	ReadyTimeout = 30 * time.Second
	// EventTimeout bounds the wait for a log line or audit event.
	EventTimeout = 15 * time.Second
	// StopTimeout bounds the wait for exit after SIGTERM before SIGKILL.
	StopTimeout = 10 * time.Second
)

// BuildAirlock compiles the module's ./cmd/airlock (the default build, the sidecar: no
// Kubernetes commands) into dir and returns the binary's path, or returns $AIRLOCK_BIN
// untouched when it is set. Call it once per test process.
func BuildAirlock(ctx context.Context, dir string) (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		return p, nil
	}
	bin := filepath.Join(dir, "airlock")
	return bin, goBuild(ctx, bin, "./cmd/airlock")
}

// BuildAirlockWithKube is BuildAirlock plus cmd/airlock-kube as airlock-kube next to
// it, where airlock finds it when it forwards "webhook", "node" and "sandbox ... --backend
// kubernetes". With $AIRLOCK_BIN set it builds nothing: airlock-kube is then expected next to
// that binary or on $PATH, as airlock itself looks for it.
func BuildAirlockWithKube(ctx context.Context, dir string) (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		return p, nil
	}
	bin := filepath.Join(dir, "airlock")
	if err := goBuild(ctx, bin, "./cmd/airlock"); err != nil {
		return "", err
	}
	return bin, goBuild(ctx, filepath.Join(dir, "airlock-kube"), "./cmd/airlock-kube")
}

// goBuild builds the module's package pkg (./cmd/...) as out.
func goBuild(ctx context.Context, out, pkg string) error {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("find go tool: %w", err)
	}
	gomod, err := exec.CommandContext(ctx, goTool, "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	if root == "." || root == "" {
		return errors.New("build airlock: not inside the airlock module")
	}
	args := []string{"build", "-o", out, pkg}
	cmd := exec.CommandContext(ctx, goTool, args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// AirlockConfig says how to start the binary. The zero value of every field but Binary and
// Policy is usable.
type AirlockConfig struct {
	// Binary is the airlock executable (BuildAirlock). Required.
	Binary string
	// Policy is the policy YAML written to the policy file. Required.
	Policy string
	// Sandbox is --sandbox; empty means "e2e".
	Sandbox string
	// Args are extra flags appended after the standard ones.
	Args []string
	// Env are extra environment variables ("K=V") for the process.
	Env []string
	// HostMounts runs the process with the host's mounts (Netns.CommandHostMounts) instead
	// of `ip netns exec`, which remounts /sys and so hides /sys/fs/cgroup and /sys/fs/bpf.
	// Kernel enforcement (--cgroup) needs it.
	HostMounts bool
	// Cgroup, when set, is where the process starts (CLONE_INTO_CGROUP), as a sidecar
	// container of a pod (--pod-cgroup) runs in its own cgroup inside the pod's.
	Cgroup *Cgroup
	// CgroupNS runs the process in a new cgroup namespace rooted at its cgroup (`unshare
	// --cgroup`), as a container's private cgroup namespace ("0::/" in /proc/self/cgroup).
	CgroupNS bool
}

// Airlock is a running `airlock run` inside the sidecar namespace, stopped with SIGTERM when
// the test ends.
type Airlock struct {
	// ProxyAddr and AdminAddr are the listeners inside the sidecar namespace.
	ProxyAddr string
	AdminAddr string
	// ProxyURL is http://ProxyAddr.
	ProxyURL *url.URL
	// PolicyFile, StateDir and AuditFile are the paths given to the process.
	PolicyFile string
	StateDir   string
	AuditFile  string
	// Stdout and Stderr hold the process's output. Audit events are JSON lines on stderr.
	Stdout *Lines
	Stderr *Lines

	binary string
	ns     *Netns
	cmd    *exec.Cmd
	done   chan struct{} // closed when the process has exited
	err    error         // cmd.Wait's result, set before done is closed
	killed bool          // Kill was called: the exit is expected
}

// StartAirlock writes the policy, starts `airlock run` in the sidecar namespace with every
// listener on its contract address and --upstream-dns pointing at the world's DNS server, and
// waits until /readyz answers 200. The process trusts the world's test CA as its only root
// (SSL_CERT_FILE). It is stopped with SIGTERM in t.Cleanup, and a test fails if it does not
// exit 0.
func (w *World) StartAirlock(t testing.TB, cfg AirlockConfig) *Airlock {
	t.Helper()
	if cfg.Binary == "" {
		t.Fatal("testnet: AirlockConfig.Binary is required")
	}
	dir, err := os.MkdirTemp(w.Dir, "airlock-")
	if err != nil {
		t.Fatal(err)
	}
	a := &Airlock{
		ProxyAddr:  "127.0.0.1:3128",
		AdminAddr:  "127.0.0.1:9090",
		PolicyFile: filepath.Join(dir, "policy.yaml"),
		StateDir:   filepath.Join(dir, "state"),
		AuditFile:  filepath.Join(dir, "audit.jsonl"),
		Stdout:     NewLines(),
		Stderr:     NewLines(),
		binary:     cfg.Binary,
		ns:         w.Sidecar,
		done:       make(chan struct{}),
	}
	a.ProxyURL = &url.URL{Scheme: "http", Host: a.ProxyAddr}
	if err := os.WriteFile(a.PolicyFile, []byte(cfg.Policy), 0o644); err != nil {
		t.Fatal(err)
	}
	emptyDir := filepath.Join(dir, "no-cert-dir")
	if err := os.Mkdir(emptyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	sandbox := cfg.Sandbox
	if sandbox == "" {
		sandbox = "e2e"
	}
	args := []string{"run",
		"--policy", a.PolicyFile,
		"--proxy-addr", a.ProxyAddr,
		"--admin-addr", a.AdminAddr,
		"--state-dir", a.StateDir,
		"--upstream-dns", w.DNS.Addr.String(),
		"--audit-log", a.AuditFile,
		"--sandbox", sandbox,
	}
	args = append(args, cfg.Args...)
	name := cfg.Binary
	if cfg.CgroupNS {
		name, args = "unshare", append([]string{"--cgroup", "--", cfg.Binary}, args...)
	}
	if cfg.HostMounts {
		a.cmd = w.Sidecar.CommandHostMounts(context.Background(), name, args...)
	} else {
		a.cmd = w.Sidecar.Command(context.Background(), name, args...)
	}
	a.cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + dir,
		// Only the test CA is trusted upstream: Go reads roots from these two variables.
		"SSL_CERT_FILE=" + w.CA.File,
		"SSL_CERT_DIR=" + emptyDir,
	}, cfg.Env...)
	if v := os.Getenv("AIRLOCK_HTTP1_FASTPATH"); v != "" {
		// The e2e suite runs with the proxy's HTTP/1.1 fast path on (auto) and off.
		a.cmd.Env = append(a.cmd.Env, "AIRLOCK_HTTP1_FASTPATH="+v)
	}
	a.cmd.Stdout = a.Stdout
	a.cmd.Stderr = a.Stderr
	// If the test process dies, so does airlock.
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if cfg.Cgroup != nil {
		a.cmd.SysProcAttr.UseCgroupFD = true
		a.cmd.SysProcAttr.CgroupFD = int(cfg.Cgroup.dir.Fd())
	}
	if err := a.cmd.Start(); err != nil {
		t.Fatalf("start airlock: %v", err)
	}
	go func() {
		a.err = a.cmd.Wait()
		close(a.done)
	}()
	t.Cleanup(func() { a.stop(t) })
	a.waitReady(t)
	return a
}

// waitReady polls /readyz with a short backoff until it answers 200, the process exits or
// ReadyTimeout passes. Polling is how readiness of another process is observed; it is bounded.
func (a *Airlock) waitReady(t testing.TB) {
	t.Helper()
	client := a.ns.HTTPClient(t, nil)
	deadline := time.Now().Add(ReadyTimeout)
	backoff := 10 * time.Millisecond
	var last string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.AdminAddr+"/readyz", nil)
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				cancel()
				return
			}
			last = fmt.Sprintf("status %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
		} else {
			last = err.Error()
		}
		cancel()
		if time.Now().After(deadline) {
			t.Fatalf("airlock not ready after %v (last /readyz: %s)", ReadyTimeout, last)
		}
		select {
		case <-a.done:
			t.Fatalf("airlock exited before it was ready: %v", a.err)
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 200*time.Millisecond)
	}
}

// stop sends SIGTERM, waits StopTimeout, then kills. A process that had already exited, that
// needed SIGKILL, or that exited non-zero fails the test.
func (a *Airlock) stop(t testing.TB) {
	select {
	case <-a.done:
		if !a.killed {
			t.Errorf("airlock exited while the test was running: %v", a.err)
		}
	default:
		a.tallyPaths(t)
		_ = a.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-a.done:
			if a.err != nil {
				t.Errorf("airlock did not exit cleanly after SIGTERM: %v", a.err)
			}
		case <-time.After(StopTimeout):
			_ = a.cmd.Process.Kill()
			<-a.done
			t.Errorf("airlock did not exit within %v of SIGTERM; killed", StopTimeout)
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("airlock stderr:\n%s", a.Stderr)
		if out := a.Stdout.String(); out != "" {
			t.Logf("airlock stdout:\n%s", out)
		}
	}
}

// Stop stops the process now, as the test's cleanup would (SIGTERM, wait, fail the test on an
// unclean exit), for tests that check what happens at shutdown; the cleanup then does
// nothing more.
func (a *Airlock) Stop(t testing.TB) {
	t.Helper()
	a.stop(t)
	a.killed = true
}

// Kill sends SIGKILL (a crashed sidecar) and waits for the process to exit; the test's
// cleanup then expects no clean exit.
func (a *Airlock) Kill(t testing.TB) {
	t.Helper()
	a.killed = true
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatalf("kill airlock: %v", err)
	}
	<-a.done
}

// Signal sends sig to the process (SIGHUP reloads the policy).
func (a *Airlock) Signal(t testing.TB, sig os.Signal) {
	t.Helper()
	if err := a.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal airlock: %v", err)
	}
}

// Exited reports whether the process has exited, and its Wait error.
func (a *Airlock) Exited() (bool, error) {
	select {
	case <-a.done:
		return true, a.err
	default:
		return false, nil
	}
}

// WritePolicy replaces the policy file atomically (write a temporary file, rename it over the
// old one), the way editors and ConfigMap updates do.
func (a *Airlock) WritePolicy(t testing.TB, yaml string) {
	t.Helper()
	tmp := a.PolicyFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, a.PolicyFile); err != nil {
		t.Fatal(err)
	}
}

// CAPEM runs `airlock ca export --state-dir` (inside the sidecar namespace, bounded by
// EventTimeout) and returns the sidecar's CA certificate.
func (a *Airlock) CAPEM(t testing.TB) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), EventTimeout)
	defer cancel()
	var stderr strings.Builder
	cmd := a.ns.Command(ctx, a.binary, "ca", "export", "--state-dir", a.StateDir)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("airlock ca export: %v: %s", err, stderr.String())
	}
	return out
}

// CAPool returns a pool holding the sidecar's CA (CAPEM), for clients of intercepted hosts.
func (a *Airlock) CAPool(t testing.TB) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(a.CAPEM(t)) {
		t.Fatal("airlock ca export: output holds no PEM certificate")
	}
	return p
}

// Client returns an HTTP client in the sidecar namespace that uses the proxy for every URL
// and trusts roots for TLS. Keep-alives are off, so every request opens its own connection
// (and CONNECT tunnel) and is decided afresh.
func (a *Airlock) Client(t testing.TB, roots *x509.CertPool) *http.Client {
	t.Helper()
	tr := &http.Transport{
		Proxy:             http.ProxyURL(a.ProxyURL),
		DialContext:       a.ns.DialContext,
		TLSClientConfig:   &tls.Config{RootCAs: roots},
		DisableKeepAlives: true,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{
		Transport: tr,
		Timeout:   20 * time.Second,
		// A redirect would be a second, separately audited request; tests look at the first.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// AdminGet fetches path from the admin listener and returns status and body.
func (a *Airlock) AdminGet(t testing.TB, path string) (int, string) {
	t.Helper()
	resp, err := a.ns.HTTPClient(t, nil).Get("http://" + a.AdminAddr + path)
	if err != nil {
		t.Fatalf("GET admin %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET admin %s: read body: %v", path, err)
	}
	return resp.StatusCode, string(body)
}

// MetricSum scrapes /metrics and returns the sum of every sample of the metric family name
// (all label sets), and whether the family was present at all.
func (a *Airlock) MetricSum(t testing.TB, name string) (float64, bool) {
	t.Helper()
	status, body := a.AdminGet(t, "/metrics")
	if status != http.StatusOK {
		t.Fatalf("GET /metrics: status %d", status)
	}
	return SumMetric(body, name)
}

// SumMetric sums the samples of metric family name in a Prometheus text exposition.
func SumMetric(exposition, name string) (float64, bool) {
	var sum float64
	found := false
	sc := bufio.NewScanner(strings.NewReader(exposition))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue // a longer metric name with this prefix
		}
		if rest[0] == '{' {
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				continue
			}
			rest = rest[end+1:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		sum += v
		found = true
	}
	return sum, found
}

// AuditEvent is one audit JSON line. Field names follow the contract (DESIGN.md "Contract").
type AuditEvent struct {
	Time        string `json:"time"`
	Sandbox     string `json:"sandbox"`
	Kind        string `json:"kind"`
	Decision    string `json:"decision"`
	Rule        string `json:"rule"`
	Reason      string `json:"reason"`
	Detail      string `json:"detail"`
	Destination string `json:"destination"`
	Addr        string `json:"addr"`
	Method      string `json:"method"`
	Path        string `json:"path"`
	Status      int    `json:"status"`
	BytesUp     int64  `json:"bytes_up"`
	BytesDown   int64  `json:"bytes_down"`
	WouldDeny   bool   `json:"would_deny"`
	Policy      string `json:"policy"`
	Error       string `json:"error"`

	// Fields holds every field of the line, for the ones not named above.
	Fields map[string]any `json:"-"`
	// Line is the raw JSON line.
	Line string `json:"-"`
}

// String returns the raw line.
func (e AuditEvent) String() string { return e.Line }

// ParseAuditEvent parses line as an audit event: a JSON object with "kind" and "decision".
// A decision-phase line ("phase":"decision", written before a request is forwarded and
// followed by the request's canonical event) is not one: tests count requests.
func ParseAuditEvent(line string) (AuditEvent, bool) {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "{") {
		return AuditEvent{}, false
	}
	var fields map[string]any
	if json.Unmarshal([]byte(line), &fields) != nil {
		return AuditEvent{}, false
	}
	if _, ok := fields["kind"]; !ok {
		return AuditEvent{}, false
	}
	if _, ok := fields["decision"]; !ok {
		return AuditEvent{}, false
	}
	if fields["phase"] == "decision" {
		return AuditEvent{}, false
	}
	var e AuditEvent
	if json.Unmarshal([]byte(line), &e) != nil {
		return AuditEvent{}, false
	}
	e.Fields, e.Line = fields, line
	return e, true
}

// Events returns the audit events written to stderr so far.
func (a *Airlock) Events() []AuditEvent {
	var evs []AuditEvent
	for _, l := range a.Stderr.All() {
		if e, ok := ParseAuditEvent(l); ok {
			evs = append(evs, e)
		}
	}
	return evs
}

// FileEvents returns the audit events in the --audit-log file.
func (a *Airlock) FileEvents(t testing.TB) []AuditEvent {
	t.Helper()
	data, err := os.ReadFile(a.AuditFile)
	if err != nil {
		t.Fatalf("read audit log: %v", err)
	}
	var evs []AuditEvent
	for _, l := range strings.Split(string(data), "\n") {
		if e, ok := ParseAuditEvent(l); ok {
			evs = append(evs, e)
		}
	}
	return evs
}

// WaitEvent waits up to EventTimeout for an audit event on stderr that satisfies match (events
// already written count) and returns it; it fails t otherwise. what describes the event for
// the failure message.
func (a *Airlock) WaitEvent(t testing.TB, what string, match func(AuditEvent) bool) AuditEvent {
	t.Helper()
	return a.WaitEventFrom(t, 0, what, match)
}

// WaitEventFrom is WaitEvent looking only at stderr lines from index from on (Mark).
func (a *Airlock) WaitEventFrom(t testing.TB, from int, what string, match func(AuditEvent) bool) AuditEvent {
	t.Helper()
	line := a.WaitLog(t, from, what, func(l string) bool {
		e, ok := ParseAuditEvent(l)
		return ok && match(e)
	})
	e, _ := ParseAuditEvent(line)
	return e
}

// Mark returns the number of stderr lines so far, for WaitEventFrom and WaitLog.
func (a *Airlock) Mark() int { return a.Stderr.Len() }

// WaitLog waits up to EventTimeout for a stderr line at index from or later that satisfies
// match, and returns it; it fails t otherwise. what describes the line for the failure message.
func (a *Airlock) WaitLog(t testing.TB, from int, what string, match func(string) bool) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), EventTimeout)
	defer cancel()
	line, _, err := a.Stderr.Wait(ctx, from, match)
	if err != nil {
		t.Fatalf("no %s in airlock's log within %v (the log is printed at the end of the test)", what, EventTimeout)
	}
	return line
}

// tallyPaths appends the process's airlock_proxy_http1_requests_total lines to the file
// AIRLOCK_TEST_PATH_TALLY names, when it is set: the fast path's share over a test run is
// summed from it. Best effort: a scrape that fails adds nothing.
func (a *Airlock) tallyPaths(t testing.TB) {
	file := os.Getenv("AIRLOCK_TEST_PATH_TALLY")
	if file == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.AdminAddr+"/metrics", nil)
	resp, err := a.ns.HTTPClient(t, nil).Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out strings.Builder
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "airlock_proxy_http1_requests_total{") {
			out.WriteString(line + "\n")
		}
	}
	f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.WriteString(out.String())
}
