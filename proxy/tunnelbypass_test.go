package proxy

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
)

// frontedUpstream is a Go TLS server in front of two sites, as a CDN is: it picks the site
// by the TLS server name, or by the Host header when the client sends none. Go's crypto/tls
// skips warning alerts before a ClientHello. It records the sites it served.
type frontedUpstream struct {
	srv *httptest.Server
	// mu guards served.
	mu     sync.Mutex
	served []string
}

func newFrontedUpstream(t *testing.T, k *pki) *frontedUpstream {
	f := &frontedUpstream{}
	certs := map[string]tls.Certificate{"api.test": k.leaf(t, "api.test"), "secret.test": k.leaf(t, "secret.test")}
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		site := r.TLS.ServerName
		if site == "" {
			site = r.Host
		}
		f.mu.Lock()
		f.served = append(f.served, site)
		f.mu.Unlock()
		fmt.Fprintf(w, "site %s", site)
	}))
	f.srv.TLS = &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
		c, ok := certs[h.ServerName]
		if !ok {
			c = certs["api.test"]
		}
		return &c, nil
	}}
	f.srv.StartTLS()
	t.Cleanup(f.srv.Close)
	return f
}

func (f *frontedUpstream) sites() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.served...)
}

// tlsGet runs one HTTPS GET with Host host over a TLS client on c.
func tlsGet(c net.Conn, cfg *tls.Config, host string) (string, error) {
	tc := tls.Client(c, cfg)
	if err := tc.Handshake(); err != nil {
		return "", err
	}
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host)
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// alertThenConn writes a TLS warning alert record before the first write to Conn.
type alertThenConn struct {
	net.Conn
	once sync.Once
}

func (c *alertThenConn) Write(p []byte) (int, error) {
	var err error
	c.once.Do(func() { _, err = c.Conn.Write(tlsRecord(recordTypeAlert, []byte{1, 90})) })
	if err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// TestTunnelClassBypasses: a passthrough tunnel to api.test reaches secret.test on a fronted
// upstream in none of the ways the record layer allows: a warning alert before the
// ClientHello (which Go's server skips), no server name at all (the server routes on Host),
// a ClientHello fragmented over records naming secret.test.
func TestTunnelClassBypasses(t *testing.T) {
	h := newHarness(t, mustPolicy(t, policyDoc("basic", "enforce", basicEgress)))
	up := newFrontedUpstream(t, h.upstream)
	h.route(addrAPI, 443, up.srv)
	tests := []struct {
		name   string
		wrap   func(net.Conn) net.Conn
		sni    string
		reason string
	}{
		{name: "warning alert before the ClientHello", wrap: func(c net.Conn) net.Conn { return &alertThenConn{Conn: c} },
			sni: "secret.test", reason: "bad_client_hello"},
		{name: "no server name, Host names the other site", sni: "", reason: "sni_missing"},
		{name: "fragmented ClientHello naming the other site", wrap: func(c net.Conn) net.Conn { return &fragmentingConn{Conn: c} },
			sni: "secret.test", reason: "host_mismatch"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, resp := h.connect("api.test:443")
			if resp.StatusCode != 200 {
				t.Fatalf("CONNECT got %d", resp.StatusCode)
			}
			if tc.wrap != nil {
				c = tc.wrap(c)
			}
			body, err := tlsGet(c, &tls.Config{ServerName: tc.sni, RootCAs: h.upstream.pool, InsecureSkipVerify: tc.sni == ""}, "secret.test")
			if err == nil {
				t.Fatalf("the tunnel carried the request: %q", body)
			}
			c.Close()
			ev := h.log.wait(t, 1)[i]
			checkEvent(t, ev, map[string]any{"kind": "connect", "decision": "deny", "reason": tc.reason})
		})
	}
	if got := up.sites(); len(got) != 0 {
		t.Errorf("the upstream served %v, want nothing", got)
	}
	// The same upstream through an honest tunnel, fragmented or not.
	for _, wrap := range []func(net.Conn) net.Conn{nil, func(c net.Conn) net.Conn { return &fragmentingConn{Conn: c} }} {
		c, _ := h.connect("api.test:443")
		if wrap != nil {
			c = wrap(c)
		}
		if body, err := tlsGet(c, &tls.Config{ServerName: "api.test", RootCAs: h.upstream.pool}, "api.test"); err != nil || body != "site api.test" {
			t.Fatalf("honest tunnel: %q, %v", body, err)
		}
		c.Close()
	}
}

// fragmentingConn splits each TLS record it writes into records of 7 bytes of payload, as a
// client may (RFC 8446 §5.1), until the handshake is underway.
type fragmentingConn struct {
	net.Conn
	done bool
}

func (c *fragmentingConn) Write(p []byte) (int, error) {
	if c.done || len(p) < 5 || p[0] != recordTypeHandshake {
		return c.Conn.Write(p)
	}
	c.done = true
	var out []byte
	for r := p; len(r) >= 5; {
		n := int(r[3])<<8 | int(r[4])
		payload := r[5 : 5+n]
		for len(payload) > 0 {
			k := min(7, len(payload))
			out = append(out, tlsRecord(r[0], payload[:k])...)
			payload = payload[k:]
		}
		r = r[5+n:]
	}
	if _, err := c.Conn.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// TestTunnelMissingSNIOptIn: a ClientHello without a server name passes where the rule opts
// in (allowMissingSNI) and to an IP literal under a cidrs rule, which needs no opt-in.
func TestTunnelMissingSNIOptIn(t *testing.T) {
	egress := `    - name: legacy
      hosts: ["api.test"]
      ports: [443]
      allowMissingSNI: true
    - name: by-address
      cidrs: ["198.18.0.30/32"]
      ports: [443]
`
	h := newHarness(t, mustPolicy(t, policyDoc("optin", "enforce", egress)))
	up := newFrontedUpstream(t, h.upstream)
	h.route(addrAPI, 443, up.srv)
	h.route(netip.MustParseAddr("198.18.0.30"), 443, up.srv)
	for _, target := range []string{"api.test:443", "198.18.0.30:443"} {
		c, resp := h.connect(target)
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT %s got %d", target, resp.StatusCode)
		}
		body, err := tlsGet(c, &tls.Config{InsecureSkipVerify: true}, "api.test")
		if err != nil || body != "site api.test" {
			t.Fatalf("%s without SNI: %q, %v", target, body, err)
		}
		c.Close()
	}
}

// TestTunnelCleartextHTTP: cleartext HTTP in a passthrough tunnel is refused, whatever the
// Host headers say and however the request line is dressed, so no Host goes unchecked.
func TestTunnelCleartextHTTP(t *testing.T) {
	h := newHarness(t, mustPolicy(t, policyDoc("basic", "enforce", basicEgress)))
	var mu sync.Mutex
	var hosts []string
	h.route(addrPlain, 80, httpServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hosts = append(hosts, r.Host)
		mu.Unlock()
		io.WriteString(w, "reached")
	})))
	streams := []string{
		"GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: plain.test\r\n\r\nGET / HTTP/1.1\r\nHost: evil.test\r\n\r\n", // pipelined
		"\r\nGET / HTTP/1.1\r\nHost: evil.test\r\n\r\n",                                       // empty line first
		"X-Custom / HTTP/1.1\r\nHost: evil.test\r\n\r\n",                                      // odd method token
		"get / HTTP/1.0\r\nHost: evil.test\r\n\r\n",
	}
	for i, s := range streams {
		t.Run(fmt.Sprintf("stream %d", i), func(t *testing.T) {
			c, resp := h.connect("plain.test:80")
			if resp.StatusCode != 200 {
				t.Fatalf("CONNECT got %d", resp.StatusCode)
			}
			io.WriteString(c, s)
			got, _ := io.ReadAll(c)
			if strings.Contains(string(got), "reached") {
				t.Fatalf("the request reached the upstream: %q", got)
			}
			ev := h.log.wait(t, 1)[i]
			checkEvent(t, ev, map[string]any{"kind": "connect", "decision": "deny", "reason": "http_in_tunnel"})
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if len(hosts) != 0 {
		t.Errorf("the upstream served Hosts %v, want none", hosts)
	}
}

// TestTransparentRecordsBeforeHello: the transparent listener uses the same classifier: a
// warning alert before the ClientHello is refused, not passed as "not TLS".
func TestTransparentRecordsBeforeHello(t *testing.T) {
	h, od := newTransparentHarness(t, basicEgress)
	up := newFrontedUpstream(t, h.upstream)
	h.route(addrAPI, 443, up.srv)
	od.set(netip.AddrPortFrom(addrAPI, 443))
	c, err := net.Dial("tcp", h.taddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if body, err := tlsGet(&alertThenConn{Conn: c}, &tls.Config{ServerName: "secret.test", RootCAs: h.upstream.pool}, "secret.test"); err == nil {
		t.Fatalf("the connection carried the request: %q", body)
	}
	checkEvent(t, h.log.wait(t, 1)[0], map[string]any{"kind": "connect", "decision": "deny", "reason": "bad_client_hello"})
	if got := up.sites(); len(got) != 0 {
		t.Errorf("the upstream served %v, want nothing", got)
	}
}

// TestTransparentNoSNI: a transparent TLS connection without a server name is decided on its
// original address: refused unless a rule names the address by CIDR.
func TestTransparentNoSNI(t *testing.T) {
	egress := basicEgress + `    - name: by-address
      cidrs: ["198.18.0.30/32"]
      ports: [443]
`
	h, od := newTransparentHarness(t, egress)
	up := newFrontedUpstream(t, h.upstream)
	h.route(addrAPI, 443, up.srv)
	h.route(netip.MustParseAddr("198.18.0.30"), 443, up.srv)
	for i, tc := range []struct {
		orig string
		ok   bool
	}{{"198.18.0.10:443", false}, {"198.18.0.30:443", true}} {
		od.set(netip.MustParseAddrPort(tc.orig))
		c, err := net.Dial("tcp", h.taddr)
		if err != nil {
			t.Fatal(err)
		}
		body, err := tlsGet(c, &tls.Config{InsecureSkipVerify: true}, "secret.test")
		c.Close()
		if (err == nil) != tc.ok {
			t.Fatalf("%s without SNI: %q, %v; want ok=%v", tc.orig, body, err, tc.ok)
		}
		ev := h.log.wait(t, 1)[i]
		if !tc.ok {
			checkEvent(t, ev, map[string]any{"decision": "deny", "reason": "sni_missing"})
		} else {
			checkEvent(t, ev, map[string]any{"decision": "allow", "rule": "by-address"})
		}
	}
}
