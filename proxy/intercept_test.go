package proxy

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"strings"
	"testing"
)

// l7Egress intercepts api.test: GET and HEAD under /repos/acme/ only.
const l7Egress = `    - name: github
      hosts: ["api.test"]
      ports: [443]
      http:
        - methods: [GET, HEAD]
          paths: ["/repos/acme/**"]
`

func TestInterceptedTunnel(t *testing.T) {
	h := newHarness(t, mustPolicy(t, policyDoc("l7", "enforce", l7Egress)))
	h.route(addrAPI, 443, h.upstream.tlsServer(t, echo(), "api.test"))
	c := h.client(h.airlockRoots())
	tests := []struct {
		name   string
		method string
		path   string
		status int
		reason string
	}{
		{name: "allowed path", method: "GET", path: "/repos/acme/app", status: 200},
		{name: "second request on the kept-alive tunnel", method: "HEAD", path: "/repos/acme/app/pulls", status: 200},
		{name: "method not allowed", method: "POST", path: "/repos/acme/app", status: 403, reason: "method_not_allowed"},
		{name: "path not allowed", method: "GET", path: "/repos/other/app", status: 403, reason: "path_not_allowed"},
		{name: "dot segments are normalised", method: "GET", path: "/repos/acme/../other/app", status: 403, reason: "path_not_allowed"},
	}
	want := map[string]int{} // request id -> status: a response can reach the client before its event is queued
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := get(t, c, tc.method, "https://api.test"+tc.path, nil)
			want[resp.Header.Get(headerAirlockRequestID)] = tc.status
			if resp.StatusCode != tc.status {
				t.Fatalf("got %d %s, want %d", resp.StatusCode, body, tc.status)
			}
			if resp.TLS == nil || resp.TLS.PeerCertificates[0].Issuer.CommonName != h.p.cfg.CA.Certificate().Subject.CommonName {
				t.Fatalf("the client did not see the airlock leaf")
			}
			if tc.reason != "" {
				if d := deniedJSON(t, body); d.Reason != tc.reason || d.Rule != "github" {
					t.Errorf("got %+v, want reason %s rule github", d, tc.reason)
				}
				if resp.Header.Get(headerDecision) != "deny" {
					t.Errorf("got %s %q, want deny", headerDecision, resp.Header.Get(headerDecision))
				}
			}
		})
	}
	evs := h.log.wait(t, len(tests))
	if got := h.metric("airlock_proxy_open_tunnels", nil); got != 1 {
		t.Errorf("open_tunnels = %v after %d requests, want 1 (keep-alive in the tunnel)", got, len(tests))
	}
	if len(evs) != len(tests) {
		t.Fatalf("got %d events before the tunnel closed, want one per request (%d)", len(evs), len(tests))
	}
	for _, ev := range evs {
		id, _ := ev["request_id"].(string)
		status, ok := want[id]
		if !ok {
			t.Errorf("event for request %q, which no response named", id)
			continue
		}
		checkEvent(t, ev, map[string]any{"kind": "http", "destination": "api.test:443", "status": float64(status)})
	}
	c.CloseIdleConnections()
	tunnel := h.log.wait(t, 1)[len(tests)]
	checkEvent(t, tunnel, map[string]any{"kind": "connect", "decision": "allow", "rule": "github", "status": float64(200),
		"addr": "198.18.0.10:443"})
	if tunnel["bytes_down"].(float64) == 0 {
		t.Errorf("tunnel event counts no bytes: %v", tunnel)
	}
}

// tunnelTLS opens an intercepted tunnel to target and starts TLS with serverName.
func (h *harness) tunnelTLS(target, serverName string) (*tls.Conn, error) {
	c, resp := h.connect(target)
	if resp.StatusCode != 200 {
		h.t.Fatalf("CONNECT %s got %d, want 200", target, resp.StatusCode)
	}
	tc := tls.Client(c, &tls.Config{ServerName: serverName, RootCAs: h.airlockRoots(), InsecureSkipVerify: serverName == ""})
	return tc, tc.Handshake()
}

func TestInterceptSNIMismatch(t *testing.T) {
	h := newHarness(t, mustPolicy(t, policyDoc("l7", "enforce", l7Egress)))
	h.route(addrAPI, 443, h.upstream.tlsServer(t, echo(), "api.test"))
	if _, err := h.tunnelTLS("api.test:443", "evil.test"); err == nil {
		t.Fatal("handshake with SNI evil.test in a tunnel to api.test succeeded")
	}
	evs := h.log.wait(t, 1)
	checkEvent(t, evs[0], map[string]any{"kind": "connect", "decision": "deny", "reason": "host_mismatch"})
	if got := h.dials(); len(got) != 0 {
		t.Errorf("dialled %v, want nothing", got)
	}
}

func TestInterceptNoSNI(t *testing.T) {
	// A client that sends no server name gets the CONNECT host's leaf.
	h := newHarness(t, mustPolicy(t, policyDoc("l7", "enforce", l7Egress)))
	h.route(addrAPI, 443, h.upstream.tlsServer(t, echo(), "api.test"))
	tc, err := h.tunnelTLS("api.test:443", "")
	if err != nil {
		t.Fatalf("handshake without SNI: %v", err)
	}
	defer tc.Close()
	leaf := tc.ConnectionState().PeerCertificates[0]
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "api.test", Roots: h.airlockRoots()}); err != nil {
		t.Errorf("leaf does not verify for api.test: %v", err)
	}
}

func TestInterceptInnerHostMismatch(t *testing.T) {
	h := newHarness(t, mustPolicy(t, policyDoc("l7", "enforce", l7Egress)))
	h.route(addrAPI, 443, h.upstream.tlsServer(t, echo(), "api.test"))
	tc, err := h.tunnelTLS("api.test:443", "api.test")
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	br := bufio.NewReader(tc)
	for _, s := range []struct{ req, reason string }{
		{req: "GET /repos/acme/app HTTP/1.1\r\nHost: evil.test\r\n\r\n", reason: "host_mismatch"},
		{req: "GET https://evil.test/repos/acme/app HTTP/1.1\r\nHost: api.test\r\n\r\n", reason: "host_mismatch"},
		{req: "GET /repos/acme/app HTTP/1.1\r\nHost: api.test:8443\r\n\r\n", reason: "host_mismatch"},
		{req: "GET http:repos/acme/app HTTP/1.1\r\nHost: api.test\r\n\r\n", reason: "invalid_path"},
	} {
		io.WriteString(tc, s.req)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%q: %v", s.req, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if d := deniedJSON(t, string(body)); resp.StatusCode != 403 || d.Reason != s.reason {
			t.Errorf("%q: got %d %+v, want 403 %s", s.req, resp.StatusCode, d, s.reason)
		}
	}
	if got := h.dials(); len(got) != 0 {
		t.Errorf("dialled %v, want nothing", got)
	}
}

func TestInterceptUntrustedUpstream(t *testing.T) {
	h := newHarness(t, mustPolicy(t, policyDoc("l7", "enforce", l7Egress)))
	other := newPKI(t) // not in UpstreamRoots
	h.route(addrAPI, 443, other.tlsServer(t, echo(), "api.test"))
	resp, body := get(t, h.client(h.airlockRoots()), "GET", "https://api.test/repos/acme/app", nil)
	if resp.StatusCode != 502 || !strings.Contains(body, `"error":"upstream_unreachable"`) {
		t.Fatalf("got %d %s, want 502 upstream_unreachable", resp.StatusCode, body)
	}
	ev := h.log.wait(t, 1)[0]
	if msg, _ := ev["error"].(string); !strings.Contains(msg, "certificate") {
		t.Errorf("audit error %q, want the certificate failure", msg)
	}
}

func TestInterceptPolicyReload(t *testing.T) {
	// Requests inside an intercepted tunnel are new requests: each sees the policy in force.
	h := newHarness(t, mustPolicy(t, policyDoc("before", "enforce", l7Egress)))
	h.route(addrAPI, 443, h.upstream.tlsServer(t, echo(), "api.test"))
	c := h.client(h.airlockRoots())
	if resp, _ := get(t, c, "GET", "https://api.test/repos/acme/app", nil); resp.StatusCode != 200 {
		t.Fatalf("before: got %d, want 200", resp.StatusCode)
	}
	h.src.p.Store(mustPolicy(t, policyDoc("after", "enforce", strings.Replace(l7Egress, "/repos/acme/**", "/repos/other/**", 1))))
	resp, _ := get(t, c, "GET", "https://api.test/repos/acme/app", nil)
	if resp.StatusCode != 403 {
		t.Fatalf("after: got %d, want 403", resp.StatusCode)
	}
	checkEvent(t, h.log.wait(t, 2)[1], map[string]any{"policy": "after", "decision": "deny"})
}
