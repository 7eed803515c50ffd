package proxy

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"testing"
)

// origDst is a stub OriginalDestination: every connection was going to the address set
// last, or fails when none is set.
type origDst struct {
	mu sync.Mutex
	ap netip.AddrPort
}

func (o *origDst) set(ap netip.AddrPort) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ap = ap
}

func (o *origDst) OriginalDst(net.Conn) (netip.AddrPort, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.ap.IsValid() {
		return netip.AddrPort{}, errors.New("no original destination recorded")
	}
	return o.ap, nil
}

func newTransparentHarness(t *testing.T, egress string) (*harness, *origDst) {
	od := &origDst{}
	h := newHarness(t, mustPolicy(t, policyDoc("transparent", "enforce", egress)), func(c *Config) { c.OriginalDst = od })
	return h, od
}

// rawHTTP sends one request on a new connection to addr and reads the response.
func rawHTTP(t *testing.T, addr, req string) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, req)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func TestTransparentHTTP(t *testing.T) {
	h, od := newTransparentHarness(t, basicEgress)
	h.route(addrPlain, 80, httpServer(t, echo()))
	tests := []struct {
		name   string
		orig   string
		host   string
		status int
		reason string
	}{
		{name: "decided on the Host header", orig: "198.18.0.20:80", host: "plain.test", status: 200},
		{name: "host not named", orig: "198.18.0.20:80", host: "evil.test", status: 403, reason: "no_rule"},
		{name: "original address is not the name's", orig: "198.18.0.99:80", host: "plain.test", status: 403, reason: "original_destination_mismatch"},
		{name: "Host port differs from the original port", orig: "198.18.0.20:80", host: "plain.test:8080", status: 403, reason: "host_mismatch"},
		{name: "decided with the original port", orig: "198.18.0.20:8080", host: "plain.test", status: 403, reason: "port_not_allowed"},
	}
	want := map[string]int{} // request id -> status: a response can reach the client before its event is queued
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			od.set(netip.MustParseAddrPort(tc.orig))
			resp, body := rawHTTP(t, h.taddr, fmt.Sprintf("GET /p HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", tc.host))
			want[resp.Header.Get(headerAirlockRequestID)] = tc.status
			if resp.StatusCode != tc.status {
				t.Fatalf("got %d %s, want %d", resp.StatusCode, body, tc.status)
			}
			if tc.reason != "" {
				if d := deniedJSON(t, body); d.Reason != tc.reason {
					t.Errorf("got reason %q, want %q", d.Reason, tc.reason)
				}
			} else if body != `GET plain.test /p auth="" body=0` {
				t.Errorf("got body %q, want the upstream's echo", body)
			}
		})
	}
	evs := h.log.wait(t, len(tests))
	for _, ev := range evs {
		id, _ := ev["request_id"].(string)
		status, ok := want[id]
		if !ok {
			t.Errorf("event for request %q, which no response named", id)
			continue
		}
		checkEvent(t, ev, map[string]any{"kind": "http", "status": float64(status)})
	}
	for _, ap := range h.dials() {
		if ap != netip.MustParseAddrPort("198.18.0.20:80") {
			t.Errorf("dialled %v, want only the checked original address", ap)
		}
	}
}

func TestTransparentTLS(t *testing.T) {
	h, od := newTransparentHarness(t, basicEgress)
	h.route(addrAPI, 443, h.upstream.tlsServer(t, echo(), "api.test"))
	h.res.names["evil.test"] = []netip.Addr{addrOther}
	tests := []struct {
		name   string
		orig   string
		sni    string
		ok     bool
		reason string
	}{
		{name: "decided on the SNI", orig: "198.18.0.10:443", sni: "api.test", ok: true},
		{name: "SNI not named", orig: "198.18.0.99:443", sni: "evil.test", reason: "no_rule"},
		{name: "original address is not the name's", orig: "198.18.0.99:443", sni: "api.test", reason: "original_destination_mismatch"},
		{name: "no SNI", orig: "198.18.0.10:443", sni: "", reason: "sni_missing"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			od.set(netip.MustParseAddrPort(tc.orig))
			c, err := net.Dial("tcp", h.taddr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			tc2 := tls.Client(c, &tls.Config{ServerName: tc.sni, RootCAs: h.upstream.pool, InsecureSkipVerify: tc.sni == ""})
			err = tc2.Handshake()
			if !tc.ok {
				if err == nil {
					t.Fatal("handshake succeeded, want the connection closed")
				}
				checkEvent(t, h.log.wait(t, 1)[i], map[string]any{"kind": "connect", "decision": "deny", "reason": tc.reason})
				return
			}
			if err != nil {
				t.Fatalf("handshake: %v", err)
			}
			io.WriteString(tc2, "GET /t HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(tc2), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) != `GET api.test /t auth="" body=0` {
				t.Errorf("got %q, want the upstream's echo", body)
			}
			tc2.Close()
			checkEvent(t, h.log.wait(t, 1)[i], map[string]any{"kind": "connect", "decision": "allow", "destination": "api.test:443", "addr": "198.18.0.10:443"})
		})
	}
	if got := h.metric("airlock_proxy_requests_total", map[string]string{"kind": "transparent"}); got != float64(len(tests)) {
		t.Errorf("requests_total{kind=transparent} = %v, want %d", got, len(tests))
	}
}

func TestTransparentIntercept(t *testing.T) {
	h, od := newTransparentHarness(t, l7Egress)
	h.route(addrAPI, 443, h.upstream.tlsServer(t, echo(), "api.test"))
	od.set(netip.MustParseAddrPort("198.18.0.10:443"))
	c, err := net.Dial("tcp", h.taddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc := tls.Client(c, &tls.Config{ServerName: "api.test", RootCAs: h.airlockRoots()})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("handshake with the airlock leaf: %v", err)
	}
	br := bufio.NewReader(tc)
	for _, s := range []struct {
		path   string
		status int
	}{{"/repos/acme/x", 200}, {"/repos/other/x", 403}} {
		fmt.Fprintf(tc, "GET %s HTTP/1.1\r\nHost: api.test\r\n\r\n", s.path)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != s.status {
			t.Errorf("GET %s: got %d, want %d", s.path, resp.StatusCode, s.status)
		}
	}
	tc.Close()
	evs := h.log.wait(t, 3)
	checkEvent(t, evs[2], map[string]any{"kind": "connect", "decision": "allow", "rule": "github"})
}

func TestTransparentRefusals(t *testing.T) {
	h, od := newTransparentHarness(t, basicEgress)
	// Not TLS, not HTTP.
	od.set(netip.MustParseAddrPort("198.18.0.20:80"))
	c, err := net.Dial("tcp", h.taddr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "\x00\x01binary")
	io.Copy(io.Discard, c) // the proxy closes it
	c.Close()
	checkEvent(t, h.log.wait(t, 1)[0], map[string]any{"decision": "deny", "reason": "unknown_protocol"})
	// No original destination.
	od.set(netip.AddrPort{})
	c, err = net.Dial("tcp", h.taddr)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, c)
	c.Close()
	checkEvent(t, h.log.wait(t, 1)[1], map[string]any{"decision": "deny", "reason": "original_destination_unknown"})
}

func TestServeTransparentNeedsOriginalDst(t *testing.T) {
	h := newHarness(t, mustPolicy(t, policyDoc("basic", "enforce", basicEgress)))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.p.ServeTransparent(l); !errors.Is(err, ErrNoOriginalDst) {
		t.Errorf("got %v, want ErrNoOriginalDst", err)
	}
}
