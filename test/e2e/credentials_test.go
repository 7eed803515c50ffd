//go:build linux

package e2e

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/test/privtest"
	"github.com/airlock-dev/airlock/test/testnet"
	"github.com/airlock-dev/airlock/test/vaulttest"
)

// echoUpstream is an HTTPS host that records the credential headers it receives and echoes
// every request header back, in its body and as X-Echo-* response headers: a hostile or
// careless upstream that would hand the sandbox its own credential.
type echoUpstream struct {
	mu   sync.Mutex
	auth []string // Authorization headers received, in order
	dyn  []string // X-Dyn headers received
	// placeholderSeen is set when a request body held a placeholder.
	placeholderSeen bool
}

const echoName = "echo.test"

func startEcho(t *testing.T, w *testnet.World) *echoUpstream {
	t.Helper()
	addr := netip.MustParseAddr("198.18.0.40")
	w.AddUpstreamAddr(t, addr)
	w.DNS.Set(echoName, testnet.DefaultTTL, addr)
	l, err := w.Upstream.Listen("tcp", netip.AddrPortFrom(addr, 443).String())
	if err != nil {
		t.Fatal(err)
	}
	e := &echoUpstream{}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		e.mu.Lock()
		if strings.Contains(string(body), "airlock-placeholder") {
			e.placeholderSeen = true
		}
		e.auth = append(e.auth, r.Header.Get("Authorization"))
		e.dyn = append(e.dyn, r.Header.Get("X-Dyn"))
		e.mu.Unlock()
		for k, v := range r.Header {
			rw.Header()["X-Echo-"+k] = v
		}
		_ = json.NewEncoder(rw).Encode(r.Header)
	})}
	go func() { _ = srv.Serve(tls.NewListener(l, w.CA.ServerConfig(echoName))) }()
	t.Cleanup(func() { _ = srv.Close() })
	return e
}

func (e *echoUpstream) seen() (auth, dyn []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.auth...), append([]string(nil), e.dyn...)
}

const credPolicy = `apiVersion: airlock/v1
kind: EgressPolicy
metadata:
  name: e2e-credentials
spec:
  egress:
    - name: echo
      hosts: ["echo.test"]
      ports: [443]
      inject:
        - header: Authorization
          value: 'Bearer {{ secret "gh" }}'
        - header: X-Dyn
          value: '{{ secret "dyn" }}'
    - name: allowed
      hosts: ["allowed.test"]
      ports: [80, 443]
    - name: intercepted
      hosts: ["intercept.test"]
      ports: [443]
      http:
        - paths: ["/**"]
  secrets:
    gh:
      vault: {path: secret/data/e2e/github, field: token}
    dyn:
      vault: {path: dyn/creds/e2e, field: value, dynamic: true}
`

// credWorld is a world with a real Vault (running inside the sidecar namespace, where
// airlock can reach it on loopback), an echo upstream, and AppRole credentials for airlock.
type credWorld struct {
	w       *testnet.World
	v       *vaulttest.Server
	echo    *echoUpstream
	kvValue string
	args    []string
}

func newCredWorld(t *testing.T, tokenTTL, tokenMaxTTL int) *credWorld {
	t.Helper()
	w := testnet.NewWorld(t)
	v := vaulttest.StartWith(t, vaulttest.Options{
		Command:     func(bin string) *exec.Cmd { return w.Sidecar.Command(context.Background(), bin) },
		DialContext: w.Sidecar.DialContext,
	})
	buf := make([]byte, 12)
	_, _ = rand.Read(buf)
	cw := &credWorld{w: w, v: v, echo: startEcho(t, w), kvValue: "kv-e2e-" + hex.EncodeToString(buf)}
	v.PutKV(t, "e2e/github", map[string]any{"token": cw.kvValue})
	v.Policy(t, "airlock", `
path "secret/data/e2e/*" { capabilities = ["read"] }
path "dyn/creds/*" { capabilities = ["read"] }
path "sys/leases/renew" { capabilities = ["update"] }
path "sys/leases/revoke" { capabilities = ["update"] }
`)
	roleID, secretID := v.AppRole(t, "airlock", tokenTTL, tokenMaxTTL, "airlock")
	cw.args = []string{
		"--vault-addr", v.Address, "--vault-ca-cert", v.CACertFile, "--vault-auth", "approle",
		"--vault-role-id-file", w.WriteFile(t, "role-id", []byte(roleID)),
		"--vault-secret-id-file", w.WriteFile(t, "secret-id", []byte(secretID)),
	}
	return cw
}

// kvOnlyPolicy is credPolicy without the dynamic secret, whose short test lease (3s) would
// end before the cache TTL once Vault is gone.
var kvOnlyPolicy = strings.NewReplacer(`        - header: X-Dyn
          value: '{{ secret "dyn" }}'
`, "", `    dyn:
      vault: {path: dyn/creds/e2e, field: value, dynamic: true}
`, "").Replace(credPolicy)

func (cw *credWorld) start(t *testing.T, policy string, extra ...string) *testnet.Airlock {
	t.Helper()
	return cw.w.StartAirlock(t, testnet.AirlockConfig{Binary: airlockBinary(t), Policy: policy,
		Sandbox: sandboxName, Args: append(append([]string(nil), cw.args...), extra...)})
}

// credGet sends GET url through the proxy with hdr and returns status, headers and body.
func credGet(t *testing.T, c *http.Client, url string, hdr http.Header) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read body: %v", url, err)
	}
	return resp.StatusCode, resp.Header, string(body)
}

// waitFor polls cond (a condition on another process) until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestCredentialsVault is the credential broker's end-to-end run against a real Vault:
// KV v2 and dynamic secrets injected through the proxy, scrubbed from what comes back,
// placeholders refused where they are not bound, AppRole renewal and re-login, the lease
// renewed while airlock runs and revoked when it stops, and no secret in any output.
func TestCredentialsVault(t *testing.T) {
	privtest.Require(t)
	parallelWorld(t)
	cw := newCredWorld(t, 2, 5)
	a := cw.start(t, credPolicy)
	client := a.Client(t, a.CAPool(t))

	// Injection: the sandbox's own Authorization is replaced; the upstream sees the secret;
	// the echo (headers and body) reaches the sandbox scrubbed.
	status, hdr, body := credGet(t, client, "https://echo.test/repos", http.Header{"Authorization": {"Bearer sandbox-made-up"}})
	if status != http.StatusOK {
		t.Fatalf("echo: status %d, body %q", status, body)
	}
	auth, dyn := cw.echo.seen()
	if len(auth) != 1 || auth[0] != "Bearer "+cw.kvValue {
		t.Fatalf("upstream Authorization: got %d requests, want the KV value injected", len(auth))
	}
	dynValue := dyn[0]
	if !strings.HasPrefix(dynValue, "dyn-e2e-") {
		t.Fatal("upstream X-Dyn: the dynamic secret was not injected")
	}
	for _, secret := range []string{cw.kvValue, dynValue} {
		if strings.Contains(body, secret) || strings.Contains(fmt.Sprint(hdr), secret) {
			t.Fatal("the sandbox received a secret value echoed by the upstream")
		}
	}
	// A body of known length is masked with '*' (its Content-Length kept); others get [REDACTED].
	bodyScrubbed := strings.Contains(body, "[REDACTED]") || strings.Contains(body, strings.Repeat("*", len(cw.kvValue)))
	if !strings.Contains(hdr.Get("X-Echo-Authorization"), "[REDACTED]") || !bodyScrubbed {
		t.Fatalf("echoed credential not redacted: header %q", hdr.Get("X-Echo-Authorization"))
	}

	// Placeholders: to a host the secret is not bound to, plain HTTP and intercepted HTTPS.
	var placeholders map[string]string
	b, err := os.ReadFile(filepath.Join(a.StateDir, "placeholders.json"))
	if err != nil || json.Unmarshal(b, &placeholders) != nil || !strings.HasPrefix(placeholders["gh"], "airlock-placeholder:gh:") {
		t.Fatalf("placeholders.json: %v %q", err, b)
	}
	out, err := exec.Command(airlockBinary(t), "policy", "placeholders", "--state-dir", a.StateDir, a.PolicyFile).Output()
	if err != nil || !strings.Contains(string(out), "gh\t"+placeholders["gh"]+"\n") {
		t.Fatalf("airlock policy placeholders: %v\n%s", err, out)
	}
	for _, url := range []string{"http://allowed.test/x", "https://intercept.test/x"} {
		mark := a.Mark()
		status, hdr, body := credGet(t, client, url, http.Header{"X-Token": {placeholders["gh"]}})
		if status != http.StatusForbidden || hdr.Get("X-Airlock-Decision") != "deny" || !strings.Contains(body, "credential_misuse") {
			t.Fatalf("placeholder to %s: status %d body %q, want 403 credential_misuse", url, status, body)
		}
		a.WaitEventFrom(t, mark, "a credential misuse event", func(e testnet.AuditEvent) bool {
			return e.Kind == "credential" && e.Decision == "deny" && e.Reason == "credential_misuse"
		})
	}
	// The placeholder in its bound location is swapped for the value.
	status, _, _ = credGet(t, client, "https://echo.test/p", http.Header{"X-Tool-Token": {"token " + placeholders["gh"]}})
	if status != http.StatusOK {
		t.Fatalf("bound placeholder: status %d", status)
	}

	// A placeholder in a body (not a location the echo rule names) is refused mid-stream:
	// 403, and the upstream never gets the placeholder.
	req, _ := http.NewRequest(http.MethodPost, "https://echo.test/upload",
		strings.NewReader(strings.Repeat("x", 100000)+placeholders["gh"]))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST with a placeholder body: %v", err)
	}
	rb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(rb), "credential_misuse") {
		t.Fatalf("placeholder in the body: status %d body %q, want 403 credential_misuse", resp.StatusCode, rb)
	}
	cw.echo.mu.Lock()
	seen := cw.echo.placeholderSeen
	cw.echo.mu.Unlock()
	if seen {
		t.Fatal("the upstream received a placeholder in a request body")
	}

	// AppRole: token_ttl 2s, token_max_ttl 5s: renewed, then a second login.
	waitLine := func(what, text string) {
		a.WaitLog(t, 0, what, func(l string) bool { return strings.Contains(l, text) })
	}
	waitLine("a token renewal", "vault token renewed")
	waitFor(t, 30*time.Second, "a second AppRole login", func() bool {
		return strings.Count(a.Stderr.String(), "logged in to vault") >= 2
	})

	// The dynamic lease (TTL 3s) is renewed while airlock runs.
	waitFor(t, 30*time.Second, "two lease renewals", func() bool {
		_, renewed, _ := cw.v.LeaseStats(t)
		return renewed >= 2
	})
	leases := cw.v.Leases(t, "dyn/creds/e2e/")
	if len(leases) != 1 || !cw.v.LeaseAlive(t, leases[0]) {
		t.Fatalf("leases under dyn/creds/e2e/: %v, want one live lease", leases)
	}
	status, _, _ = credGet(t, client, "https://echo.test/again", nil)
	if _, dyn := cw.echo.seen(); status != http.StatusOK || dyn[len(dyn)-1] != dynValue {
		t.Fatal("the renewed dynamic secret changed or was not injected")
	}

	// Metrics count per secret name.
	if n, _ := a.MetricSum(t, "airlock_credential_injections_total"); n < 3 {
		t.Fatalf("airlock_credential_injections_total: got %v, want >= 3", n)
	}
	if n, _ := a.MetricSum(t, "airlock_credential_misuse_total"); n < 2 {
		t.Fatalf("airlock_credential_misuse_total: got %v, want >= 2", n)
	}

	// Shutdown revokes the lease.
	a.Stop(t)
	if cw.v.LeaseAlive(t, leases[0]) {
		t.Fatal("the dynamic secret's lease is still alive after airlock stopped")
	}
	if _, _, revoked := cw.v.LeaseStats(t); revoked < 1 {
		t.Fatal("the test engine saw no revocation")
	}

	// No output of the whole run holds a secret value: airlock's stderr (logs and audit),
	// its audit file, stdout, and the Vault server's log.
	audit, _ := os.ReadFile(a.AuditFile)
	for name, out := range map[string]string{"stderr": a.Stderr.String(), "stdout": a.Stdout.String(),
		"audit file": string(audit), "vault log": cw.v.Stderr()} {
		for _, secret := range []string{cw.kvValue, dynValue} {
			if strings.Contains(out, secret) {
				t.Errorf("airlock %s holds a secret value", name)
			}
		}
	}
}

// TestCredentialsVaultDown: a rotated secret is used after the cache TTL; with Vault gone,
// the cached value serves until the TTL, then requests fail closed with 503 and are never
// forwarded without the credential.
func TestCredentialsVaultDown(t *testing.T) {
	privtest.Require(t)
	parallelWorld(t)
	cw := newCredWorld(t, 3600, 7200)
	if strings.Contains(kvOnlyPolicy, "dyn") {
		t.Fatal("kvOnlyPolicy still names the dynamic secret")
	}
	a := cw.start(t, kvOnlyPolicy, "--credential-cache-ttl", "4s")
	client := a.Client(t, a.CAPool(t))
	if status, _, _ := credGet(t, client, "https://echo.test/1", nil); status != http.StatusOK {
		t.Fatalf("first request: status %d", status)
	}
	rotated := cw.kvValue + "-rotated"
	cw.v.PutKV(t, "e2e/github", map[string]any{"token": rotated})
	waitFor(t, 15*time.Second, "the rotated value upstream", func() bool {
		credGet(t, client, "https://echo.test/rot", nil)
		auth, _ := cw.echo.seen()
		return auth[len(auth)-1] == "Bearer "+rotated
	})

	cw.v.Kill()
	killed := time.Now()
	if status, _, body := credGet(t, client, "https://echo.test/cached", nil); status != http.StatusOK {
		t.Fatalf("right after Vault stopped: status %d %q, want the cached value", status, body)
	}
	var body string
	waitFor(t, 20*time.Second, "503 once the cache TTL has passed", func() bool {
		var status int
		status, _, body = credGet(t, client, "https://echo.test/down", nil)
		return status == http.StatusServiceUnavailable
	})
	// The last fetch was at most TTL/2 (2s) before Vault stopped; its value is good for the
	// TTL (4s) after that fetch.
	if d := time.Since(killed); d < 1500*time.Millisecond || d > 7*time.Second {
		t.Fatalf("503 after %v, want it once the 4s cache TTL has run out", d)
	}
	var fail struct{ Error string }
	if err := json.Unmarshal([]byte(body), &fail); err != nil || fail.Error != "credential_unavailable" {
		t.Fatalf("503 body %q, want error credential_unavailable", body)
	}
	a.WaitEvent(t, "a credential failure event", func(e testnet.AuditEvent) bool {
		return e.Kind == "credential" && e.Reason == "credential_unavailable"
	})
	auth, _ := cw.echo.seen()
	for _, h := range auth {
		if h != "Bearer "+cw.kvValue && h != "Bearer "+rotated {
			t.Fatal("a request reached the upstream without the credential")
		}
	}
	if n, _ := a.MetricSum(t, "airlock_credential_failures_total"); n < 1 {
		t.Fatalf("airlock_credential_failures_total: got %v", n)
	}
}

// reloadCredPolicy injects one file secret, SECRET, into requests to echo.test.
const reloadCredPolicy = `apiVersion: airlock/v1
kind: EgressPolicy
metadata:
  name: e2e-cred-reload
spec:
  egress:
    - name: echo
      hosts: ["echo.test"]
      ports: [443]
      inject:
        - header: Authorization
          value: 'Bearer {{ secret "SECRET" }}'
  secrets:
    SECRET:
      file: FILE
`

// readPlaceholders reads placeholders.json from the sidecar's state directory.
func readPlaceholders(t *testing.T, a *testnet.Airlock) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(a.StateDir, "placeholders.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("placeholders.json: %v: %s", err, b)
	}
	return m
}

// TestCredentialsReloadPlaceholders: a policy reload that swaps one secret for another
// rewrites placeholders.json (the new secret's placeholder in, the removed one's out, no
// temporary file left), the broker injects the new secret at once, and the removed
// secret's placeholder is refused.
func TestCredentialsReloadPlaceholders(t *testing.T) {
	privtest.Require(t)
	parallelWorld(t)
	w := testnet.NewWorld(t)
	echo := startEcho(t, w)
	buf := make([]byte, 12)
	_, _ = rand.Read(buf)
	oldValue, freshValue := "old-e2e-"+hex.EncodeToString(buf), "fresh-e2e-"+hex.EncodeToString(buf)
	policyFor := func(name, value string) string {
		return strings.NewReplacer("SECRET", name, "FILE", w.WriteFile(t, name, []byte(value))).Replace(reloadCredPolicy)
	}
	a := w.StartAirlock(t, testnet.AirlockConfig{Binary: airlockBinary(t), Policy: policyFor("old", oldValue), Sandbox: sandboxName})
	client := a.Client(t, a.CAPool(t))

	before := readPlaceholders(t, a)
	oldPH := before["old"]
	if len(before) != 1 || !strings.HasPrefix(oldPH, "airlock-placeholder:old:") {
		t.Fatalf("placeholders.json at start: %v, want only old's", before)
	}
	if status, _, _ := credGet(t, client, "https://echo.test/before", nil); status != http.StatusOK {
		t.Fatalf("before the reload: status %d", status)
	}

	from := a.Mark()
	a.WritePolicy(t, policyFor("fresh", freshValue))
	a.WaitEventFrom(t, from, "policy reload event", func(e testnet.AuditEvent) bool {
		return e.Kind == "policy" && e.Decision == "allow"
	})
	after := readPlaceholders(t, a)
	if len(after) != 1 || !strings.HasPrefix(after["fresh"], "airlock-placeholder:fresh:") {
		t.Fatalf("placeholders.json after the reload: %v, want only fresh's", after)
	}
	out, err := exec.Command(airlockBinary(t), "policy", "placeholders", "--state-dir", a.StateDir, a.PolicyFile).Output()
	if err != nil || string(out) != "fresh\t"+after["fresh"]+"\n" {
		t.Fatalf("airlock policy placeholders disagrees with the file: %v\n%s", err, out)
	}
	entries, err := os.ReadDir(a.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("state directory holds a temporary file %s", e.Name())
		}
	}

	// The broker follows the reload: the new secret goes upstream, the removed secret's
	// placeholder is a forgery now.
	if status, _, body := credGet(t, client, "https://echo.test/after", nil); status != http.StatusOK {
		t.Fatalf("after the reload: status %d %q", status, body)
	}
	if auth, _ := echo.seen(); len(auth) != 2 || auth[0] != "Bearer "+oldValue || auth[1] != "Bearer "+freshValue {
		t.Fatal("the upstream did not get the old secret before the reload and the new one after it")
	}
	if status, _, _ := credGet(t, client, "https://echo.test/stale", http.Header{"X-Token": {oldPH}}); status != http.StatusForbidden {
		t.Fatalf("the removed secret's placeholder: status %d, want 403", status)
	}
	if auth, _ := echo.seen(); len(auth) != 2 {
		t.Fatalf("the request with the removed secret's placeholder reached the upstream")
	}
	a.WaitEvent(t, "misuse event for the stale placeholder", func(e testnet.AuditEvent) bool {
		return e.Kind == "credential" && e.Reason == "credential_misuse"
	})
	a.WaitLog(t, from, "placeholders file updated log", func(l string) bool {
		return strings.Contains(l, "placeholders file updated")
	})
	for _, v := range []string{oldValue, freshValue} {
		if strings.Contains(a.Stderr.String(), v) {
			t.Error("airlock's stderr holds a secret value")
		}
	}
}
