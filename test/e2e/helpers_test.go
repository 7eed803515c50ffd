//go:build linux

package e2e

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/test/privtest"
	"github.com/airlock-dev/airlock/test/testnet"
)

// enforcePolicy is the policy most tests run with. Every name the internal-address and
// rebinding tests use is allowed by name, so that only the address check can deny them.
const enforcePolicy = `apiVersion: airlock/v1
kind: EgressPolicy
metadata:
  name: e2e
spec:
  mode: enforce
  egress:
    - name: allowed
      hosts: ["allowed.test", "api.allowed.test"]
      ports: [80, 443]
    - name: intercepted
      hosts: ["intercept.test"]
      ports: [443]
      http:
        - methods: [GET]
          paths: ["/ok/**"]
    - name: internal-names
      hosts: ["loopback.test", "metadata.test", "private.test", "mapped.test"]
      ports: [8080]
    - name: rebind
      hosts: ["rebind.test"]
      ports: [80]
`

// sandboxName is the --sandbox every test runs airlock with.
const sandboxName = "e2e"

// setup gates a privileged test, makes it parallel and starts a world with airlock serving
// policy in it.
func setup(t *testing.T, policy string) (*testnet.World, *testnet.Airlock) {
	t.Helper()
	privtest.Require(t, "curl")
	parallelWorld(t)
	bin := airlockBinary(t)
	w := testnet.NewWorld(t)
	a := w.StartAirlock(t, testnet.AirlockConfig{Binary: bin, Policy: policy, Sandbox: sandboxName})
	return w, a
}

// curlResult is one run of the curl binary through the proxy.
type curlResult struct {
	testnet.CurlResult
	Code        int         // %{http_code}: the final response's status, 0 if none
	ConnectCode int         // %{http_connect}: the proxy's answer to CONNECT, 0 if none
	Body        string      // the final response's body
	Header      http.Header // the final response's header
}

func (r curlResult) String() string {
	return fmt.Sprintf("curl exit %d, http_code %d, http_connect %d, body %q, stderr %q",
		r.ExitCode, r.Code, r.ConnectCode, r.Body, strings.TrimSpace(r.Stderr))
}

// curlProxy runs curl in the sidecar namespace through airlock's explicit proxy.
func curlProxy(t *testing.T, w *testnet.World, a *testnet.Airlock, args ...string) curlResult {
	t.Helper()
	hf, err := os.CreateTemp(w.Dir, "curl-headers-")
	if err != nil {
		t.Fatal(err)
	}
	hf.Close()
	full := append([]string{
		"--proxy", a.ProxyURL.String(),
		"--dump-header", hf.Name(),
		"--write-out", "\n%{http_code} %{http_connect}",
	}, args...)
	r := curlResult{CurlResult: w.Curl(t, full...)}
	body, trailer, ok := cutLast(r.Stdout, "\n")
	if !ok {
		t.Fatalf("curl output has no --write-out trailer: %q", r.Stdout)
	}
	r.Body = body
	codes := strings.Fields(trailer)
	if len(codes) != 2 {
		t.Fatalf("curl --write-out trailer: got %q, want two codes", trailer)
	}
	r.Code, _ = strconv.Atoi(codes[0])
	r.ConnectCode, _ = strconv.Atoi(codes[1])
	raw, err := os.ReadFile(hf.Name())
	if err != nil {
		t.Fatal(err)
	}
	r.Header = lastHeaderBlock(string(raw))
	return r
}

func cutLast(s, sep string) (before, after string, ok bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return "", "", false
	}
	return s[:i], s[i+len(sep):], true
}

// lastHeaderBlock parses the last response header block curl dumped (a CONNECT response, if
// any, comes first).
func lastHeaderBlock(dump string) http.Header {
	blocks := strings.Split(strings.ReplaceAll(dump, "\r\n", "\n"), "\n\n")
	for i := len(blocks) - 1; i >= 0; i-- {
		b := strings.TrimSpace(blocks[i])
		if b == "" {
			continue
		}
		h := http.Header{}
		for _, line := range strings.Split(b, "\n")[1:] {
			if k, v, ok := strings.Cut(line, ":"); ok {
				h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
			}
		}
		return h
	}
	return http.Header{}
}

// get does a GET with c and returns the response (body read and closed) and its body.
func get(t *testing.T, c *http.Client, url string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return readBody(t, resp)
}

func readBody(t *testing.T, resp *http.Response) (*http.Response, string) {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp, string(b)
}

// proxyConn is a connection to the proxy whose reads go through the buffered reader that
// parsed the proxy's responses, so no byte is lost between a CONNECT answer and the tunnel.
type proxyConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *proxyConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// dialProxy opens a raw TCP connection to the proxy from the sidecar namespace.
func dialProxy(t *testing.T, a *testnet.Airlock, w *testnet.World) *proxyConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := w.Sidecar.DialContext(ctx, "tcp", a.ProxyAddr)
	if err != nil {
		t.Fatalf("dial proxy: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	return &proxyConn{Conn: c, r: bufio.NewReader(c)}
}

// rawRequest writes raw (a request exactly as given) to a new proxy connection and returns
// the response and its body.
func rawRequest(t *testing.T, a *testnet.Airlock, w *testnet.World, raw string) (*http.Response, string) {
	t.Helper()
	c := dialProxy(t, a, w)
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatalf("write request: %v", err)
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		t.Fatalf("read response to %q: %v", firstLine(raw), err)
	}
	return readBody(t, resp)
}

// connect sends CONNECT target on a new proxy connection and returns the connection and the
// proxy's answer (its body read when it is not 200).
func connect(t *testing.T, a *testnet.Airlock, w *testnet.World, target string) (*proxyConn, *http.Response, string) {
	t.Helper()
	c := dialProxy(t, a, w)
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target); err != nil {
		t.Fatalf("write CONNECT: %v", err)
	}
	req := &http.Request{Method: http.MethodConnect}
	resp, err := http.ReadResponse(c.r, req)
	if err != nil {
		t.Fatalf("read CONNECT %s response: %v", target, err)
	}
	if resp.StatusCode == http.StatusOK {
		return c, resp, ""
	}
	_, body := readBody(t, resp)
	return c, resp, body
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\r\n")
	return l
}

// checkDenial asserts the contract's answer to a denied request: 403, X-Airlock-Decision: deny,
// and a JSON body with every field.
func checkDenial(t *testing.T, status int, h http.Header, body, host string, port int, rule, reason string) {
	t.Helper()
	checkDenialHosts(t, status, h, body, []string{host}, port, rule, reason)
}

// checkDenialHosts is checkDenial where the body's host may be any of hosts (a request that
// names two hosts may be reported under either).
func checkDenialHosts(t *testing.T, status int, h http.Header, body string, hosts []string, port int, rule, reason string) {
	t.Helper()
	if status != http.StatusForbidden {
		t.Errorf("status: got %d, want 403 (body %q)", status, body)
	}
	if got := h.Get("X-Airlock-Decision"); got != "deny" {
		t.Errorf("X-Airlock-Decision: got %q, want %q", got, "deny")
	}
	var fields map[string]any
	if err := json.Unmarshal([]byte(body), &fields); err != nil {
		t.Fatalf("denial body is not JSON: %v: %q", err, body)
	}
	if got, _ := fields["host"].(string); !slices.Contains(hosts, got) {
		t.Errorf("denial body: host: got %#v, want one of %q", fields["host"], hosts)
	}
	want := map[string]any{
		"error":  "egress_denied",
		"port":   float64(port),
		"rule":   rule,
		"reason": reason,
	}
	for k, v := range want {
		got, ok := fields[k]
		if !ok {
			t.Errorf("denial body: field %q missing in %s", k, body)
			continue
		}
		if got != v {
			t.Errorf("denial body: %s: got %#v, want %#v", k, got, v)
		}
	}
	if d, _ := fields["detail"].(string); d == "" {
		t.Errorf("denial body: detail: got %#v, want a non-empty sentence", fields["detail"])
	}
}

// Event matchers.

func isDeny(reason string) func(testnet.AuditEvent) bool {
	return func(e testnet.AuditEvent) bool { return e.Decision == "deny" && e.Reason == reason }
}

func httpEvent(dest, path string) func(testnet.AuditEvent) bool {
	return func(e testnet.AuditEvent) bool {
		return e.Kind == "http" && e.Destination == dest && e.Path == path
	}
}

func connectEvent(dest string) func(testnet.AuditEvent) bool {
	return func(e testnet.AuditEvent) bool { return e.Kind == "connect" && e.Destination == dest }
}

func and(ms ...func(testnet.AuditEvent) bool) func(testnet.AuditEvent) bool {
	return func(e testnet.AuditEvent) bool {
		for _, m := range ms {
			if !m(e) {
				return false
			}
		}
		return true
	}
}

var barrierSeq atomic.Int64

// barrier makes one more request (denied, or reported in report mode) and waits for its audit
// event. Every event of a request that finished before the barrier started has been written
// once this returns, so a test can then count events.
func barrier(t *testing.T, w *testnet.World, a *testnet.Airlock) {
	t.Helper()
	path := fmt.Sprintf("/barrier-%d", barrierSeq.Add(1))
	get(t, a.Client(t, nil), "http://"+testnet.NameDenied+path)
	a.WaitEvent(t, "barrier event", httpEvent(testnet.NameDenied+":80", path))
}

// exactlyOneEvent waits for an event matching match, then (after a barrier) checks that it is
// the only one, and returns it.
func exactlyOneEvent(t *testing.T, w *testnet.World, a *testnet.Airlock, what string, match func(testnet.AuditEvent) bool) testnet.AuditEvent {
	t.Helper()
	e := a.WaitEvent(t, what, match)
	barrier(t, w, a)
	var n int
	var lines []string
	for _, ev := range a.Events() {
		if match(ev) {
			n++
			lines = append(lines, ev.Line)
		}
	}
	if n != 1 {
		t.Errorf("%s: got %d audit events, want exactly 1:\n%s", what, n, strings.Join(lines, "\n"))
	}
	return e
}

// checkEvent compares the contract fields of e with want (zero-valued fields of want are not
// compared, except WouldDeny, which always is).
func checkEvent(t *testing.T, e testnet.AuditEvent, want testnet.AuditEvent) {
	t.Helper()
	check := func(field, got, want string) {
		if want != "" && got != want {
			t.Errorf("audit %s: got %q, want %q (event %s)", field, got, want, e.Line)
		}
	}
	check("sandbox", e.Sandbox, want.Sandbox)
	check("kind", e.Kind, want.Kind)
	check("decision", e.Decision, want.Decision)
	check("rule", e.Rule, want.Rule)
	check("reason", e.Reason, want.Reason)
	check("destination", e.Destination, want.Destination)
	check("addr", e.Addr, want.Addr)
	check("method", e.Method, want.Method)
	check("path", e.Path, want.Path)
	if want.Status != 0 && e.Status != want.Status {
		t.Errorf("audit status: got %d, want %d (event %s)", e.Status, want.Status, e.Line)
	}
	if e.WouldDeny != want.WouldDeny {
		t.Errorf("audit would_deny: got %t, want %t (event %s)", e.WouldDeny, want.WouldDeny, e.Line)
	}
	if e.Time == "" {
		t.Errorf("audit time: missing (event %s)", e.Line)
	}
	for _, k := range []string{"bytes_up", "bytes_down", "would_deny"} {
		if _, ok := e.Fields[k]; !ok {
			t.Errorf("audit %s: missing (event %s)", k, e.Line)
		}
	}
}

// writePEM writes the sidecar CA to a file curl can --cacert.
func writePEM(t *testing.T, w *testnet.World, name string, certPEM []byte) string {
	t.Helper()
	return w.WriteFile(t, name, certPEM)
}

// poolOf returns a pool holding the PEM certificates in pem.
func poolOf(t *testing.T, pem []byte) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(pem) {
		t.Fatalf("no certificate in %q", pem)
	}
	return p
}
