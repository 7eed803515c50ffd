package proxy

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

func TestHTTPAllowed(t *testing.T) {
	h := newHarness(t, mustPolicy(t, policyDoc("basic", "enforce", basicEgress)))
	h.route(addrPlain, 80, httpServer(t, echo()))

	resp, body := get(t, h.client(nil), "GET", "http://plain.test/hello?q=1", nil)
	if resp.StatusCode != http.StatusOK || body != `GET plain.test /hello auth="" body=0` {
		t.Fatalf("got %d %q, want 200 with the upstream's echo", resp.StatusCode, body)
	}
	if v := resp.Header.Get(headerDecision); v != "" {
		t.Errorf("allowed response carries %s: %q, want none", headerDecision, v)
	}
	evs := h.log.wait(t, 1)
	if len(evs) != 1 {
		t.Fatalf("got %d audit events, want 1", len(evs))
	}
	want := map[string]any{"kind": "http", "decision": "allow", "rule": "plain", "reason": "rule_matched",
		"destination": "plain.test:80", "addr": "198.18.0.20:80", "method": "GET", "path": "/hello",
		"status": float64(200), "policy": "basic", "sandbox": "test", "would_deny": false}
	checkEvent(t, evs[0], want)
	if evs[0]["bytes_down"].(float64) != float64(len(body)) {
		t.Errorf("bytes_down = %v, want %d", evs[0]["bytes_down"], len(body))
	}
	if got := h.dials(); len(got) != 1 || got[0] != netip.MustParseAddrPort("198.18.0.20:80") {
		t.Errorf("dialled %v, want exactly the checked address 198.18.0.20:80", got)
	}
	for name, labels := range map[string]map[string]string{
		"airlock_proxy_requests_total":           {"kind": "http", "decision": "allow", "rule": "plain"},
		"airlock_proxy_request_duration_seconds": {"kind": "http"},
	} {
		if got := h.metric(name, labels); got != 1 {
			t.Errorf("%s%v = %v, want 1", name, labels, got)
		}
	}
	if got := h.metric("airlock_proxy_bytes_total", map[string]string{"direction": "down"}); got != float64(len(body)) {
		t.Errorf("bytes_total{down} = %v, want %d", got, len(body))
	}
}

// checkEvent compares the fields of want with an audit event.
func checkEvent(t *testing.T, ev map[string]any, want map[string]any) {
	t.Helper()
	for k, v := range want {
		if ev[k] != v {
			t.Errorf("audit %s = %#v, want %#v (event %v)", k, ev[k], v, ev)
		}
	}
}

func TestHTTPDenied(t *testing.T) {
	tests := []struct {
		name   string
		url    string
		host   string
		port   int
		rule   string
		reason string
	}{
		{name: "host not named", url: "http://evil.test/x", host: "evil.test", port: 80, reason: "no_rule"},
		{name: "port not named", url: "http://plain.test:8080/x", host: "plain.test", port: 8080, rule: "plain", reason: "port_not_allowed"},
		{name: "alternate IPv4 spelling of loopback", url: "http://2130706433/", host: "127.0.0.1", port: 80, reason: "no_rule"},
		{name: "short IPv4 spelling of loopback", url: "http://127.1/", host: "127.0.0.1", port: 80, reason: "no_rule"},
		{name: "IPv4-mapped loopback", url: "http://[::ffff:127.0.0.1]/", host: "::ffff:127.0.0.1", port: 80, reason: "no_rule"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, mustPolicy(t, policyDoc("basic", "enforce", basicEgress)))
			resp, body := get(t, h.client(nil), "GET", tc.url, nil)
			if resp.StatusCode != http.StatusForbidden {
				t.Fatalf("got status %d, want 403", resp.StatusCode)
			}
			if v := resp.Header.Get(headerDecision); v != "deny" {
				t.Errorf("got %s %q, want deny", headerDecision, v)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("got Content-Type %q, want application/json", ct)
			}
			d := deniedJSON(t, body)
			if d.Error != "egress_denied" || d.Host != tc.host || d.Port != tc.port || d.Rule != tc.rule || d.Reason != tc.reason || d.Detail == "" {
				t.Errorf("got body %+v, want egress_denied %s:%d rule %q reason %q with a detail", d, tc.host, tc.port, tc.rule, tc.reason)
			}
			evs := h.log.wait(t, 1)
			if len(evs) != 1 {
				t.Fatalf("got %d audit events, want 1", len(evs))
			}
			checkEvent(t, evs[0], map[string]any{"kind": "http", "decision": "deny", "reason": tc.reason, "status": float64(403)})
			if got := h.dials(); len(got) != 0 {
				t.Errorf("dialled %v for a denied request, want nothing", got)
			}
		})
	}
}

func TestSSRFGuard(t *testing.T) {
	tests := []struct {
		name  string
		addrs []string
	}{
		{name: "loopback", addrs: []string{"127.0.0.1"}},
		{name: "metadata", addrs: []string{"169.254.169.254"}},
		{name: "private", addrs: []string{"10.0.0.1"}},
		{name: "IPv4-mapped loopback", addrs: []string{"::ffff:127.0.0.1"}},
		{name: "IPv6 loopback", addrs: []string{"::1"}},
		{name: "mixed answer", addrs: []string{"198.18.0.20", "127.0.0.1"}},
		{name: "mixed answer, internal first", addrs: []string{"10.0.0.1", "198.18.0.20"}},
		{name: "mixed answer, IPv6 ULA", addrs: []string{"2001:db8::20", "fd12:3456::1"}},
		{name: "mixed answer, IPv6 link-local", addrs: []string{"198.18.0.20", "fe80::1"}},
		{name: "mixed answer, metadata", addrs: []string{"198.18.0.20", "169.254.169.254"}},
		{name: "mixed answer, IPv4-mapped private", addrs: []string{"198.18.0.20", "::ffff:10.0.0.1"}},
		{name: "mixed answer, NAT64 of private", addrs: []string{"198.18.0.20", "64:ff9b::a00:1"}},
		{name: "mixed answer, 6to4 of private", addrs: []string{"198.18.0.20", "2002:a00:1::1"}},
	}
	// The guard holds in report mode too: report trials rules on names, it never lets the
	// sidecar dial an internal address.
	for _, mode := range []string{"enforce", "report"} {
		for _, tc := range tests {
			t.Run(mode+"/"+tc.name, func(t *testing.T) { testSSRFGuard(t, mode, tc.addrs) })
		}
	}
}

func testSSRFGuard(t *testing.T, mode string, addrs []string) {
	h := newHarness(t, mustPolicy(t, policyDoc("basic", mode, basicEgress)))
	h.route(addrPlain, 80, httpServer(t, echo()))
	var as []netip.Addr
	for _, a := range addrs {
		as = append(as, netip.MustParseAddr(a))
	}
	h.res.names["evil.ssrf.test"] = as
	resp, body := get(t, h.client(nil), "GET", "http://evil.ssrf.test/", nil)
	d := deniedJSON(t, body)
	if resp.StatusCode != http.StatusForbidden || d.Reason != "internal_address" || d.Rule == "" {
		t.Fatalf("got %d %+v, want 403 internal_address naming the rule that allowed the name", resp.StatusCode, d)
	}
	if got := h.dials(); len(got) != 0 {
		t.Errorf("dialled %v, want nothing", got)
	}
	checkEvent(t, h.log.wait(t, 1)[0], map[string]any{"decision": "deny", "reason": "internal_address", "would_deny": false})
}

// TestMixedAnswerNamedRange: a mixed answer is dialled when a rule names the internal range
// by CIDR with the port (the one rule the model API follows too).
func TestMixedAnswerNamedRange(t *testing.T) {
	egress := basicEgress + "    - name: internal\n      cidrs: [\"10.0.0.0/8\"]\n      ports: [80]\n"
	h := newHarness(t, mustPolicy(t, policyDoc("named", "enforce", egress)))
	srv := httpServer(t, echo())
	public := netip.MustParseAddr("198.18.0.20")
	h.route(public, 80, srv)
	h.res.names["mixed.ssrf.test"] = []netip.Addr{public, netip.MustParseAddr("10.0.0.1")}
	resp, body := get(t, h.client(nil), "GET", "http://mixed.ssrf.test/", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("got %d %s, want 200", resp.StatusCode, body)
	}
	if got, want := h.dials(), []netip.AddrPort{netip.AddrPortFrom(public, 80)}; !slices.Equal(got, want) {
		t.Errorf("dialled %v, want %v", got, want)
	}
}

// TestRebinding: a name that resolves public first and to loopback later (TTL 0) must never
// get loopback dialled: each connection resolves once and dials only what it checked.
func TestRebinding(t *testing.T) {
	victim, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := victim.Addr().(*net.TCPAddr).Port
	accepted := make(chan struct{}, 10)
	go func() {
		for {
			c, err := victim.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			c.Close()
		}
	}()
	defer victim.Close()

	egress := fmt.Sprintf("    - name: rebind\n      hosts: [\"rebind.test\"]\n      ports: [%d]\n", port)
	h := newHarness(t, mustPolicy(t, policyDoc("rebind", "enforce", egress)))
	// Connection: close, so the second request needs a new connection (and a new lookup).
	h.route(addrPlain, uint16(port), httpServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		io.WriteString(w, "public")
	})))
	h.res.lookup = func(host string, call int) []netip.Addr {
		if call == 1 {
			return []netip.Addr{addrPlain}
		}
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	}
	c := h.client(nil)
	url := fmt.Sprintf("http://rebind.test:%d/", port)
	if resp, body := get(t, c, "GET", url, nil); resp.StatusCode != http.StatusOK || body != "public" {
		t.Fatalf("first request: got %d %q, want 200 public", resp.StatusCode, body)
	}
	resp, body := get(t, c, "GET", url, nil)
	if d := deniedJSON(t, body); resp.StatusCode != http.StatusForbidden || d.Reason != "internal_address" {
		t.Fatalf("second request: got %d %+v, want 403 internal_address", resp.StatusCode, d)
	}
	if n := h.res.count("rebind.test"); n != 2 {
		t.Errorf("resolved rebind.test %d times for 2 connections, want 2", n)
	}
	for _, ap := range h.dials() {
		if ap.Addr().IsLoopback() {
			t.Errorf("dialled loopback %v", ap)
		}
	}
	h.log.wait(t, 2)
	select {
	case <-accepted:
		t.Error("the loopback listener got a connection")
	default:
	}
}

func TestAbsoluteFormHostMismatch(t *testing.T) {
	h := newHarness(t, mustPolicy(t, policyDoc("basic", "enforce", basicEgress)))
	h.route(addrPlain, 80, httpServer(t, echo()))
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	// One connection, kept alive: a fronted request, a matching one with a body, and one
	// without a Host header (HTTP/1.0).
	steps := []struct {
		req    string
		status int
		reason string
	}{
		{req: "GET http://plain.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n", status: 403, reason: "host_mismatch"},
		{req: "POST http://plain.test/a HTTP/1.1\r\nHost: plain.test\r\nContent-Length: 5\r\n\r\nhello", status: 200},
		{req: "GET http://plain.test/b HTTP/1.1\r\nHost: PLAIN.test.:80\r\n\r\n", status: 200},
		{req: "GET http://plain.test/c HTTP/1.1\r\nHost: plain.test:81\r\n\r\n", status: 403, reason: "host_mismatch"},
	}
	for i, s := range steps {
		if _, err := io.WriteString(c, s.req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("step %d: read response: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != s.status {
			t.Fatalf("step %d: got %d %s, want %d", i, resp.StatusCode, body, s.status)
		}
		if s.reason != "" {
			if d := deniedJSON(t, string(body)); d.Reason != s.reason {
				t.Errorf("step %d: got reason %q, want %q", i, d.Reason, s.reason)
			}
		}
	}
	h.log.wait(t, len(steps))
}

func TestBadRequests(t *testing.T) {
	h := newHarness(t, mustPolicy(t, policyDoc("basic", "enforce", basicEgress)))
	tests := []struct {
		name, req, reason string
	}{
		{name: "origin-form, not a proxy request", req: "GET / HTTP/1.1\r\nHost: x\r\n\r\n", reason: "not_a_proxy_request"},
		{name: "unsupported scheme", req: "GET ftp://plain.test/ HTTP/1.1\r\nHost: plain.test\r\n\r\n", reason: "unsupported_scheme"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := rawHTTP(t, h.addr, tc.req)
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, `"error":"bad_request"`) || !strings.Contains(body, tc.reason) {
				t.Errorf("got %d %s, want 400 bad_request %s", resp.StatusCode, body, tc.reason)
			}
		})
	}
}

func TestSelfAddressLoop(t *testing.T) {
	// Once the proxy listens, the policy names loopback by CIDR on the proxy's own port, so
	// only the self-address rule stands between a request and the proxy itself.
	h := newHarness(t, mustPolicy(t, policyDoc("loop", "enforce", "    - name: placeholder\n      hosts: [\"x.test\"]\n")))
	port := h.addr[strings.LastIndexByte(h.addr, ':')+1:]
	h.src.p.Store(mustPolicy(t, policyDoc("loop", "enforce",
		fmt.Sprintf("    - name: loop\n      cidrs: [\"127.0.0.0/8\"]\n      ports: [%s]\n", port))))
	resp, body := get(t, h.client(nil), "GET", "http://"+h.addr+"/", nil)
	if d := deniedJSON(t, body); resp.StatusCode != http.StatusForbidden || d.Reason != string(policy.ReasonSelfAddress) {
		t.Fatalf("got %d %+v, want 403 self_address", resp.StatusCode, d)
	}
	checkEvent(t, h.log.wait(t, 1)[0], map[string]any{"decision": "deny", "reason": "self_address"})
}

func TestReportMode(t *testing.T) {
	h := newHarness(t, mustPolicy(t, policyDoc("watch", "report", basicEgress)))
	h.res.names["elsewhere.test"] = []netip.Addr{addrOther}
	h.route(addrOther, 80, httpServer(t, echo()))
	h.route(addrPlain, 80, httpServer(t, echo()))
	c := h.client(nil)

	resp, _ := get(t, c, "GET", "http://elsewhere.test/", nil)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(headerDecision) != "report" {
		t.Fatalf("would-deny: got %d %s=%q, want 200 report", resp.StatusCode, headerDecision, resp.Header.Get(headerDecision))
	}
	ev := h.log.wait(t, 1)[0]
	checkEvent(t, ev, map[string]any{"decision": "report", "reason": "no_rule", "would_deny": true, "status": float64(200)})

	resp, _ = get(t, c, "GET", "http://plain.test/", nil)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(headerDecision) != "" {
		t.Fatalf("allowed: got %d %s=%q, want 200 and no header", resp.StatusCode, headerDecision, resp.Header.Get(headerDecision))
	}
	checkEvent(t, h.log.wait(t, 1)[1], map[string]any{"decision": "allow", "would_deny": false})

	if got := h.metric("airlock_proxy_requests_total", map[string]string{"kind": "http", "decision": "report"}); got != 1 {
		t.Errorf("requests_total{decision=report} = %v, want 1", got)
	}
}

func TestBodyLimit(t *testing.T) {
	h := newHarness(t, mustPolicy(t, policyDoc("basic", "enforce", basicEgress)), func(c *Config) { c.MaxRequestBodyBytes = 10 })
	h.route(addrPlain, 80, httpServer(t, echo()))
	c := h.client(nil)
	tests := []struct {
		name   string
		body   io.Reader
		status int
	}{
		{name: "known length within the cap", body: strings.NewReader("0123456789"), status: 200},
		{name: "known length over the cap", body: strings.NewReader("0123456789x"), status: 413},
		{name: "chunked over the cap", body: io.MultiReader(strings.NewReader("0123456"), strings.NewReader("789xyz")), status: 413},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := get(t, c, "POST", "http://plain.test/upload", tc.body)
			if resp.StatusCode != tc.status {
				t.Fatalf("got %d %s, want %d", resp.StatusCode, body, tc.status)
			}
			if tc.status == 413 && !strings.Contains(body, `"error":"request_too_large"`) {
				t.Errorf("got body %s, want request_too_large", body)
			}
		})
	}
}

// silentListener accepts connections and never answers; they close with the test.
func silentListener(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held <- c
		}
	}()
	t.Cleanup(func() {
		l.Close()
		for len(held) > 0 {
			(<-held).Close()
		}
	})
	return l
}

func TestUpstreamFailures(t *testing.T) {
	silent := silentListener(t)
	refused, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusedAddr := refused.Addr().String()
	refused.Close()

	h := newHarness(t, mustPolicy(t, policyDoc("basic", "enforce", basicEgress)), func(c *Config) {
		c.ResponseHeaderTimeout = 200 * time.Millisecond
	})
	h.res.names["silent.ssrf.test"] = []netip.Addr{netip.MustParseAddr("198.18.0.30")}
	h.res.names["refused.ssrf.test"] = []netip.Addr{netip.MustParseAddr("198.18.0.31")}
	h.mu.Lock()
	h.routes[netip.MustParseAddrPort("198.18.0.30:80")] = silent.Addr().String()
	h.routes[netip.MustParseAddrPort("198.18.0.31:80")] = refusedAddr
	h.mu.Unlock()

	tests := []struct {
		name   string
		url    string
		status int
		code   string
	}{
		{name: "connection refused", url: "http://refused.ssrf.test/", status: 502, code: "upstream_unreachable"},
		{name: "name does not resolve", url: "http://nowhere.ssrf.test/", status: 502, code: "upstream_unreachable"},
		{name: "no response head", url: "http://silent.ssrf.test/", status: 504, code: "upstream_timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := get(t, h.client(nil), "GET", tc.url, nil)
			if resp.StatusCode != tc.status || !strings.Contains(body, `"error":"`+tc.code+`"`) {
				t.Fatalf("got %d %s, want %d %s", resp.StatusCode, body, tc.status, tc.code)
			}
			if strings.Contains(body, "127.0.0.1") || strings.Contains(body, "dial") {
				t.Errorf("error body leaks internals: %s", body)
			}
		})
	}
	evs := h.log.wait(t, len(tests))
	for _, ev := range evs {
		if ev["error"] == nil || ev["decision"] != audit.DecisionAllow {
			t.Errorf("event %v: want decision allow with an error", ev)
		}
	}
}

// injector sets a header from a fake secret, or fails.
type injector struct{ fail bool }

func (i injector) Inject(r *http.Request, _ policy.Decision) error {
	if i.fail {
		return fmt.Errorf("vault sealed")
	}
	r.Header.Set("Authorization", "Bearer s3cret")
	return nil
}

func TestInjector(t *testing.T) {
	egress := `    - name: plain
      hosts: ["plain.test"]
      ports: [80]
      inject:
        - header: Authorization
          value: "Bearer {{ secret \"tok\" }}"
  secrets:
    tok:
      env: TEST_TOKEN
`
	for _, tc := range []struct {
		name     string
		injector Injector
		wantFail bool
	}{
		{"injected", injector{}, false},
		{"injector fails", injector{fail: true}, true},
		{"no injector configured fails closed", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, mustPolicy(t, policyDoc("inject", "enforce", egress)), func(c *Config) { c.Injector = tc.injector })
			var reached atomic.Int32
			h.route(addrPlain, 80, httpServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				reached.Add(1)
				echo().ServeHTTP(w, r)
			})))
			resp, body := get(t, h.client(nil), "GET", "http://plain.test/", nil)
			ev := h.log.wait(t, 1)[0]
			if tc.wantFail {
				if resp.StatusCode != 503 || !strings.Contains(body, `"error":"credential_unavailable"`) {
					t.Fatalf("got %d %s, want 503 credential_unavailable", resp.StatusCode, body)
				}
				if n := reached.Load(); n != 0 {
					t.Errorf("upstream reached %d times without its credential, want 0", n)
				}
				return
			}
			if resp.StatusCode != 200 || !strings.Contains(body, `auth="Bearer s3cret"`) {
				t.Fatalf("got %d %s, want the injected header upstream", resp.StatusCode, body)
			}
			if secrets, _ := ev["secrets"].([]any); len(secrets) != 1 || secrets[0] != "tok" {
				t.Errorf("audit secrets = %v, want [tok]", ev["secrets"])
			}
			if strings.Contains(h.log.text(), "s3cret") {
				t.Error("the audit log holds the secret value")
			}
		})
	}
}

func TestPlainTunnel(t *testing.T) {
	h := newHarness(t, mustPolicy(t, policyDoc("basic", "enforce", basicEgress)))
	h.route(addrAPI, 443, h.upstream.tlsServer(t, echo(), "api.test"))
	c := h.client(h.upstream.pool)
	resp, body := get(t, c, "GET", "https://api.test/repos", nil)
	if resp.StatusCode != 200 || body != `GET api.test /repos auth="" body=0` {
		t.Fatalf("got %d %q, want 200 echo", resp.StatusCode, body)
	}
	c.CloseIdleConnections() // ends the tunnel, which writes its event
	ev := h.log.wait(t, 1)[0]
	checkEvent(t, ev, map[string]any{"kind": "connect", "decision": "allow", "rule": "api", "destination": "api.test:443",
		"addr": "198.18.0.10:443", "status": float64(200)})
	if ev["bytes_up"].(float64) == 0 || ev["bytes_down"].(float64) == 0 {
		t.Errorf("tunnel bytes up %v down %v, want both counted", ev["bytes_up"], ev["bytes_down"])
	}
	if got := h.metric("airlock_proxy_bytes_total", map[string]string{"direction": "down"}); got == 0 {
		t.Error("bytes_total{direction=down} did not move")
	}
	if got := h.metric("airlock_proxy_requests_total", map[string]string{"kind": "connect", "decision": "allow", "rule": "api"}); got != 1 {
		t.Errorf("requests_total{connect,allow,api} = %v, want 1", got)
	}
}

func TestConnectDenied(t *testing.T) {
	tests := []struct {
		name   string
		target string
		reason string
	}{
		{name: "unnamed port", target: "api.test:8443", reason: "port_not_allowed"},
		{name: "unnamed host", target: "evil.test:443", reason: "no_rule"},
		{name: "internal address", target: "meta.test:443", reason: "internal_address"},
		{name: "not an authority", target: "api.test:99999", reason: "invalid_host"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			egress := basicEgress + "    - name: meta\n      hosts: [\"meta.test\"]\n      ports: [443]\n"
			h := newHarness(t, mustPolicy(t, policyDoc("basic", "enforce", egress)))
			h.res.names["meta.test"] = []netip.Addr{netip.MustParseAddr("169.254.169.254")}
			_, resp := h.connect(tc.target)
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 403 || resp.Header.Get(headerDecision) != "deny" {
				t.Fatalf("got %d %s=%q, want 403 deny", resp.StatusCode, headerDecision, resp.Header.Get(headerDecision))
			}
			if d := deniedJSON(t, string(body)); d.Reason != tc.reason || d.Error != "egress_denied" {
				t.Errorf("got %+v, want reason %s", d, tc.reason)
			}
			evs := h.log.wait(t, 1)
			checkEvent(t, evs[0], map[string]any{"kind": "connect", "decision": "deny", "reason": tc.reason, "status": float64(403)})
		})
	}
}

func TestPlainTunnelSNIMismatch(t *testing.T) {
	h := newHarness(t, mustPolicy(t, policyDoc("basic", "enforce", basicEgress)))
	h.route(addrAPI, 443, h.upstream.tlsServer(t, echo(), "api.test", "evil.test"))
	c, resp := h.connect("api.test:443")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT got %d, want 200", resp.StatusCode)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "evil.test", RootCAs: h.upstream.pool})
	if err := tc.Handshake(); err == nil {
		t.Fatal("handshake with a fronted SNI succeeded, want the tunnel closed")
	}
	ev := h.log.wait(t, 1)[0]
	checkEvent(t, ev, map[string]any{"kind": "connect", "decision": "deny", "reason": "host_mismatch"})
	if len(h.log.events(t)) != 1 {
		t.Errorf("got %d events, want exactly 1", len(h.log.events(t)))
	}
}

func TestRawTunnel(t *testing.T) {
	// A tunnel that is not TLS passes as is (a raw TCP protocol the policy allows), even when
	// the server speaks first. The client's first text line goes upstream once it is whole
	// (the classifier must see it is not HTTP).
	banner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer banner.Close()
	go func() {
		c, err := banner.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(c, "SSH-2.0-test\r\n")
		buf := make([]byte, 5)
		io.ReadFull(c, buf)
		c.Write(buf)
	}()
	egress := "    - name: ssh\n      hosts: [\"git.test\"]\n      ports: [22]\n"
	h := newHarness(t, mustPolicy(t, policyDoc("ssh", "enforce", egress)))
	h.res.names["git.test"] = []netip.Addr{addrOther}
	h.mu.Lock()
	h.routes[netip.AddrPortFrom(addrOther, 22)] = banner.Addr().String()
	h.mu.Unlock()
	c, resp := h.connect("git.test:22")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT got %d, want 200", resp.StatusCode)
	}
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil || line != "SSH-2.0-test\r\n" {
		t.Fatalf("got banner %q %v, want the server's", line, err)
	}
	io.WriteString(c, "hi!\r\n")
	buf := make([]byte, 5)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "hi!\r\n" {
		t.Fatalf("got %q %v, want echo", buf, err)
	}
	c.Close()
	checkEvent(t, h.log.wait(t, 1)[0], map[string]any{"kind": "connect", "decision": "allow", "bytes_up": float64(5)})
}

func TestTunnelIdleTimeout(t *testing.T) {
	egress := "    - name: raw\n      hosts: [\"git.test\"]\n      ports: [22]\n"
	h := newHarness(t, mustPolicy(t, policyDoc("raw", "enforce", egress)), func(c *Config) { c.IdleTimeout = 100 * time.Millisecond })
	h.res.names["git.test"] = []netip.Addr{addrOther}
	h.mu.Lock()
	h.routes[netip.AddrPortFrom(addrOther, 22)] = silentListener(t).Addr().String()
	h.mu.Unlock()
	c, resp := h.connect("git.test:22")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT got %d, want 200", resp.StatusCode)
	}
	// Neither side says anything: the proxy ends the tunnel, and the read sees it.
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read data from an idle tunnel")
	}
	checkEvent(t, h.log.wait(t, 1)[0], map[string]any{"kind": "connect", "decision": "allow", "bytes_up": float64(0)})
}

func TestMaxTunnels(t *testing.T) {
	h := newHarness(t, mustPolicy(t, policyDoc("basic", "enforce", basicEgress)), func(c *Config) { c.MaxTunnels = 1 })
	h.route(addrAPI, 443, h.upstream.tlsServer(t, echo(), "api.test"))
	first, resp := h.connect("api.test:443")
	if resp.StatusCode != 200 {
		t.Fatalf("first CONNECT got %d, want 200", resp.StatusCode)
	}
	if got := h.metric("airlock_proxy_open_tunnels", nil); got != 1 {
		t.Errorf("open_tunnels = %v, want 1", got)
	}
	_, resp = h.connect("api.test:443")
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), `"error":"too_many_tunnels"`) {
		t.Fatalf("second CONNECT got %d Retry-After=%q %s, want 429 too_many_tunnels", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	checkEvent(t, h.log.wait(t, 1)[0], map[string]any{"kind": "connect", "status": float64(429), "decision": "deny", "reason": "tunnel_limit", "rule": "api"})
	first.Close()
	h.log.wait(t, 1)
	_, resp = h.connect("api.test:443")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT after the first tunnel closed got %d, want 200", resp.StatusCode)
	}
}

// TestPolicySwap: an open tunnel keeps going under the policy it started with; the next
// CONNECT sees the new one.
func TestPolicySwap(t *testing.T) {
	h := newHarness(t, mustPolicy(t, policyDoc("before", "enforce", basicEgress)))
	h.route(addrAPI, 443, h.upstream.tlsServer(t, echo(), "api.test"))
	c, resp := h.connect("api.test:443")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT got %d, want 200", resp.StatusCode)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "api.test", RootCAs: h.upstream.pool})
	roundTrip := func() string {
		t.Helper()
		io.WriteString(tc, "GET /x HTTP/1.1\r\nHost: api.test\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			t.Fatalf("request in the open tunnel: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if got := roundTrip(); !strings.HasPrefix(got, "GET api.test /x") {
		t.Fatalf("before the swap: got %q", got)
	}
	h.src.p.Store(mustPolicy(t, policyDoc("after", "enforce", "    - name: none\n      hosts: [\"other.test\"]\n      ports: [443]\n")))
	if got := roundTrip(); !strings.HasPrefix(got, "GET api.test /x") {
		t.Fatalf("after the swap, in the open tunnel: got %q", got)
	}
	_, resp = h.connect("api.test:443")
	if resp.StatusCode != 403 {
		t.Fatalf("new CONNECT after the swap got %d, want 403", resp.StatusCode)
	}
	checkEvent(t, h.log.wait(t, 1)[0], map[string]any{"decision": "deny", "policy": "after"})
	tc.Close()
	checkEvent(t, h.log.wait(t, 1)[1], map[string]any{"decision": "allow", "policy": "before"})
}
