package proxy

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"testing"
)

// resumeEgress intercepts api.test and other.test.
const resumeEgress = `    - name: github
      hosts: ["api.test", "other.test"]
      ports: [443]
      http:
        - methods: [GET]
          paths: ["/**"]
`

// tunnelHandshake opens a tunnel to target and completes a TLS handshake with sni, using
// cache; it sends one request so the client reads the session tickets.
func tunnelHandshake(t *testing.T, h *harness, target, sni string, cache tls.ClientSessionCache) (tls.ConnectionState, error) {
	t.Helper()
	c, resp := h.connect(target)
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s got %d", target, resp.StatusCode)
	}
	tc := tls.Client(c, &tls.Config{ServerName: sni, RootCAs: h.airlockRoots(), ClientSessionCache: cache})
	defer tc.Close()
	if err := tc.Handshake(); err != nil {
		return tls.ConnectionState{}, err
	}
	io.WriteString(tc, "GET /x HTTP/1.1\r\nHost: "+sni+"\r\nConnection: close\r\n\r\n")
	// In TLS 1.3 the server checks the client's Finished after the client's Handshake has
	// returned: a refusal shows on the first read.
	b, err := io.ReadAll(tc)
	if !strings.HasPrefix(string(b), "HTTP/1.1 200") {
		return tls.ConnectionState{}, fmt.Errorf("request in the tunnel: %.80q, %v", b, err)
	}
	return tc.ConnectionState(), nil
}

// TestInterceptResumesTLSSession: a client resumes its TLS session with the sidecar in a
// later tunnel (the ticket keys are shared by every intercepted connection), and a resumed
// session is still held to the tunnel's host.
func TestInterceptResumesTLSSession(t *testing.T) {
	h := newHarness(t, mustPolicy(t, policyDoc("l7", "enforce", resumeEgress)))
	h.route(addrAPI, 443, h.upstream.tlsServer(t, echo(), "api.test"))
	h.res.names["other.test"] = []netip.Addr{addrOther}
	cache := tls.NewLRUClientSessionCache(8)
	if cs, err := tunnelHandshake(t, h, "api.test:443", "api.test", cache); err != nil || cs.DidResume {
		t.Fatalf("first tunnel: resumed %v, %v; want a full handshake", cs.DidResume, err)
	}
	cs, err := tunnelHandshake(t, h, "api.test:443", "api.test", cache)
	if err != nil || !cs.DidResume {
		t.Fatalf("second tunnel: resumed %v, %v; want the session resumed", cs.DidResume, err)
	}
	// The session of api.test offered in a tunnel to other.test: the server name does not
	// match the tunnel, resumed or not.
	if _, err := tunnelHandshake(t, h, "other.test:443", "api.test", cache); err == nil {
		t.Fatal("resumed api.test's session in a tunnel to other.test")
	}
	evs := h.log.wait(t, 5)
	var mismatch bool
	for _, ev := range evs {
		if ev["kind"] == "connect" && ev["reason"] == "host_mismatch" {
			mismatch = true
		}
	}
	if !mismatch {
		t.Errorf("no host_mismatch connect event in %v", evs)
	}
}
