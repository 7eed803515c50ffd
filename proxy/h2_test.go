package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/credentials"
)

// streamSecret is the secret the broker injects in the HTTP/2, gRPC and WebSocket tests.
const streamSecret = "h2-secret-value-0123456789"

// streamEgress intercepts api.test (L7 rules, injection, placeholders allowed in bodies) and
// plain.test:443 (injection, placeholders in headers only); plain.test:80 is plain HTTP.
const streamEgress = `    - name: api
      hosts: ["api.test"]
      ports: [443]
      http:
        - methods: [GET, POST]
          paths: ["/ok/**", "/test.Echo/**", "/ws/**"]
      inject:
        - header: Authorization
          value: 'Bearer {{ secret "tok" }}'
      placeholderIn: [header, body]
    - name: headers-only
      hosts: ["plain.test"]
      ports: [443]
      inject:
        - header: Authorization
          value: 'Bearer {{ secret "tok" }}'
    - name: plain
      hosts: ["plain.test"]
      ports: [80]
  secrets:
    tok: {env: TEST_TOK}
`

// streamHarness is a harness whose proxy injects streamSecret through a real broker.
type streamHarness struct {
	*harness
	ph *credentials.Placeholders
}

func newStreamHarness(t *testing.T, opts ...harnessOpt) *streamHarness {
	t.Helper()
	ph := credentials.NewPlaceholders([]byte("0123456789abcdef0123456789abcdef"))
	opts = append(opts, func(c *Config) {
		b, err := credentials.New(credentials.Config{Policy: c.Policy, Placeholders: ph,
			Env: credentials.EnvSource{Lookup: func(k string) (string, bool) { return streamSecret, k == "TEST_TOK" }}})
		if err != nil {
			t.Fatal(err)
		}
		c.Injector = b
	})
	h := newHarness(t, mustPolicy(t, policyDoc("streams", "enforce", streamEgress)), opts...)
	return &streamHarness{harness: h, ph: ph}
}

// seen records what reached an upstream: Authorization values, protocols, messages.
type seen struct {
	mu     sync.Mutex
	auth   []string
	protos []string
	msgs   []string
}

func (s *seen) add(auth, proto, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.auth, s.protos = append(s.auth, auth), append(s.protos, proto)
	if msg != "" {
		s.msgs = append(s.msgs, msg)
	}
}

func (s *seen) snapshot() (auth, protos, msgs []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auth...), append([]string(nil), s.protos...), append([]string(nil), s.msgs...)
}

// checkInjected fails unless every request the upstream saw carried the injected secret.
func (s *seen) checkInjected(t *testing.T, want int) {
	t.Helper()
	auth, _, _ := s.snapshot()
	if len(auth) < want {
		t.Fatalf("upstream saw %d requests, want at least %d", len(auth), want)
	}
	for _, a := range auth {
		if a != "Bearer "+streamSecret {
			t.Fatalf("upstream got Authorization %q, want the injected secret", a)
		}
	}
}

// h2Upstream starts an HTTPS upstream for names that offers HTTP/2 and HTTP/1.1.
func (h *streamHarness) h2Upstream(t *testing.T, hd http.Handler, names ...string) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(hd)
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{h.upstream.leaf(t, names...)}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// protoEcho records each request and answers with the protocol it came over.
func protoEcho(s *seen) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.add(r.Header.Get("Authorization"), r.Proto, "")
		w.Header().Set("Trailer", "X-Upstream-Trailer")
		_, _ = w.Write([]byte("upstream proto=" + r.Proto + " path=" + r.URL.Path))
		w.Header().Set("X-Upstream-Trailer", "done")
	})
}

// caFile writes the proxy's CA certificate to a PEM file for external clients.
func (h *streamHarness) caFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, h.p.cfg.CA.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCurlHTTP2 runs curl --http2 through an intercepted tunnel: HTTP/2 is negotiated with
// the proxy (curl's %{http_version}), and with the upstream, which gets the credential.
func TestCurlHTTP2(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		failOrSkip(t, "curl is not installed")
	}
	h := newStreamHarness(t)
	var s seen
	h.route(addrAPI, 443, h.h2Upstream(t, protoEcho(&s), "api.test"))
	ca := h.caFile(t)
	curl := func(path string) string {
		out, err := exec.Command("curl", "-sS", "--http2", "-x", "http://"+h.addr, "--cacert", ca,
			"-w", "\n%{http_code} %{http_version}", "https://api.test"+path).CombinedOutput()
		if err != nil {
			t.Fatalf("curl %s: %v\n%s", path, err, out)
		}
		return string(out)
	}
	out := curl("/ok/x")
	if !strings.HasSuffix(out, "\n200 2") || !strings.Contains(out, "upstream proto=HTTP/2.0 path=/ok/x") {
		t.Fatalf("curl got %q, want 200 over HTTP/2 from an HTTP/2 upstream", out)
	}
	s.checkInjected(t, 1)
	out = curl("/denied")
	if !strings.HasSuffix(out, "\n403 2") || !strings.Contains(out, `"reason":"path_not_allowed"`) {
		t.Fatalf("curl got %q, want the path denial over HTTP/2", out)
	}
}

// failOrSkip skips a test that needs a missing tool, or fails it under
// AIRLOCK_PRIVILEGED_TESTS=1 (CI has every tool).
func failOrSkip(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("AIRLOCK_PRIVILEGED_TESTS") == "1" {
		t.Fatal(why + " (AIRLOCK_PRIVILEGED_TESTS=1 turns this skip into a failure)")
	}
	t.Skip(why)
}

// h2Client is a Go HTTP client through the explicit proxy that offers HTTP/2 in the tunnel.
func (h *streamHarness) h2Client(t *testing.T) *http.Client {
	c := h.client(h.airlockRoots())
	tr := c.Transport.(*http.Transport)
	tr.ForceAttemptHTTP2 = true
	return c
}

// TestHTTP2RulesAsHTTP1 checks an L7 rule decides an HTTP/2 stream as it does an HTTP/1.1
// request, trailers pass, and a stream whose :authority is another host is refused.
func TestHTTP2RulesAsHTTP1(t *testing.T) {
	h := newStreamHarness(t)
	var s seen
	h.route(addrAPI, 443, h.h2Upstream(t, protoEcho(&s), "api.test"))
	h1, h2 := h.client(h.airlockRoots()), h.h2Client(t)
	for _, path := range []string{"/ok/a", "/denied", "/ok/../denied"} {
		r1, b1 := get(t, h1, "GET", "https://api.test"+path, nil)
		r2, b2 := get(t, h2, "GET", "https://api.test"+path, nil)
		if r1.ProtoMajor != 1 || r2.ProtoMajor != 2 {
			t.Fatalf("%s: protocols %s and %s, want HTTP/1.1 and HTTP/2", path, r1.Proto, r2.Proto)
		}
		if r1.StatusCode != r2.StatusCode || (b1 != b2 && r1.StatusCode != 200) {
			t.Fatalf("%s: HTTP/1.1 got %d %s, HTTP/2 got %d %s", path, r1.StatusCode, b1, r2.StatusCode, b2)
		}
		if r2.StatusCode == 200 && (r2.Trailer.Get("X-Upstream-Trailer") != "done" || r1.Trailer.Get("X-Upstream-Trailer") != "done") {
			t.Fatalf("%s: trailers %v and %v, want X-Upstream-Trailer", path, r1.Trailer, r2.Trailer)
		}
		if r2.StatusCode != 200 && deniedJSON(t, b2).Reason != "path_not_allowed" {
			t.Fatalf("%s: got %s, want path_not_allowed", path, b2)
		}
	}
	s.checkInjected(t, 2)
	req, _ := http.NewRequestWithContext(context.Background(), "GET", "https://api.test/ok/a", nil)
	req.Host = "plain.test" // :authority names another host than the tunnel and SNI
	resp, err := h2.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body := new(strings.Builder)
	_, _ = io.Copy(body, resp.Body)
	if resp.ProtoMajor != 2 || resp.StatusCode != 403 || deniedJSON(t, body.String()).Reason != "host_mismatch" {
		t.Fatalf("mismatched :authority got %s %d %s, want 403 host_mismatch over HTTP/2", resp.Proto, resp.StatusCode, body)
	}
	if auth, _, _ := s.snapshot(); len(auth) != 2 {
		t.Fatalf("upstream saw %d requests, want 2 (the refused stream never left)", len(auth))
	}
}

// TestHTTP2Shutdown checks Shutdown ends an idle HTTP/2 client connection (GOAWAY) instead
// of waiting for it to time out.
func TestHTTP2Shutdown(t *testing.T) {
	h := newStreamHarness(t)
	var s seen
	h.route(addrAPI, 443, h.h2Upstream(t, protoEcho(&s), "api.test"))
	if resp, body := get(t, h.h2Client(t), "GET", "https://api.test/ok/a", nil); resp.ProtoMajor != 2 || resp.StatusCode != 200 {
		t.Fatalf("got %s %d %s", resp.Proto, resp.StatusCode, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second) // under IdleTimeout (5s)
	defer cancel()
	if err := h.p.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown with an idle HTTP/2 connection: %v", err)
	}
}

// TestSSEStreamsThroughScrubbing checks a server-sent event reaches the client before the
// upstream sends the next one, over HTTP/1.1 and HTTP/2, with response scrubbing on (the
// request carries an injected secret): the upstream waits for the client to hold the first
// event, so a proxy that buffers fails the test.
func TestSSEStreamsThroughScrubbing(t *testing.T) {
	h := newStreamHarness(t)
	got1 := make(chan struct{}, 1)
	h.route(addrAPI, 443, h.h2Upstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: one "+strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")+"\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-got1:
		case <-time.After(waitTimeout):
			_, _ = io.WriteString(w, "data: timeout\n\n")
			return
		}
		_, _ = io.WriteString(w, "data: two\n\n")
	}), "api.test"))
	for _, c := range []*http.Client{h.client(h.airlockRoots()), h.h2Client(t)} {
		resp, err := c.Get("https://api.test/ok/events")
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		line, err := br.ReadString('\n')
		if want := "data: one " + credentials.Redacted + "\n"; err != nil || line != want {
			t.Fatalf("%s: first line %q, %v; want %q", resp.Proto, line, err, want)
		}
		got1 <- struct{}{}
		rest, _ := io.ReadAll(br)
		resp.Body.Close()
		if string(rest) != "\ndata: two\n\n" {
			t.Fatalf("%s: rest %q", resp.Proto, rest)
		}
	}
}

// TestHTTP2ConnectRefused checks a CONNECT stream inside an intercepted HTTP/2 connection is
// refused (upgrade_unsupported): a tunnel in a stream would carry bytes no rule looked at.
func TestHTTP2ConnectRefused(t *testing.T) {
	h := newStreamHarness(t)
	var s seen
	h.route(addrAPI, 443, h.h2Upstream(t, protoEcho(&s), "api.test"))
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Scheme: "https", Host: "api.test"},
		Host: "api.test:443", Header: http.Header{}}
	resp, err := h.h2Client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body := new(strings.Builder)
	_, _ = ioCopy(body, resp)
	if resp.ProtoMajor != 2 || resp.StatusCode != 403 || deniedJSON(t, body.String()).Reason != "upgrade_unsupported" {
		t.Fatalf("got %s %d %s, want 403 upgrade_unsupported over HTTP/2", resp.Proto, resp.StatusCode, body)
	}
	if auth, _, _ := s.snapshot(); len(auth) != 0 {
		t.Fatalf("the upstream saw %d requests", len(auth))
	}
}
