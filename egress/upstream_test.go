package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/test/upstreamproxy"
)

// backend is a TCP server that greets every connection with its name and closes.
func backend(t *testing.T, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, name+"\n")
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// proxyWorld is a guard whose upstream proxy is a test proxy on loopback. The proxy reaches
// destinations through route (authority → loopback backend), which also plays the proxy's
// own resolver: a name routes wherever the test says, as a rebinding DNS answer would.
type proxyWorld struct {
	guard *Guard
	res   *resolver
	dir   *dialer // the guard's direct dials
	proxy *upstreamproxy.Proxy
}

type worldOpts struct {
	route   map[string]string // CONNECT authority → backend address
	users   map[string]string
	creds   ProxyCredentials
	byName  bool
	noProxy []string
	timeout time.Duration
	proxyLn net.Listener
}

func newProxyWorld(t *testing.T, o worldOpts) *proxyWorld {
	t.Helper()
	ln := o.proxyLn
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	p := upstreamproxy.Start(t, ln, upstreamproxy.Config{Users: o.users,
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			to, ok := o.route[addr]
			if !ok {
				return nil, errors.New("no route")
			}
			return (&net.Dialer{}).DialContext(ctx, network, to)
		}})
	np, err := ParseNoProxy(o.noProxy)
	if err != nil {
		t.Fatal(err)
	}
	up, err := NewUpstream(UpstreamConfig{URL: p.URL(), Credentials: o.creds, ByName: o.byName, NoProxy: np, ConnectTimeout: o.timeout})
	if err != nil {
		t.Fatal(err)
	}
	r, d := newResolver(), &dialer{fail: map[netip.AddrPort]bool{}}
	g, err := New(Config{Resolver: r, Dial: d.dial, Upstream: up})
	if err != nil {
		t.Fatal(err)
	}
	return &proxyWorld{guard: g, res: r, dir: d, proxy: p}
}

// fetch resolves and dials host:port through the guard and returns the backend's greeting.
func (w *proxyWorld) fetch(t *testing.T, host string, port int, rules Rules) (string, error) {
	t.Helper()
	tg, err := w.guard.Resolve(context.Background(), host, port, rules)
	if err != nil {
		return "", err
	}
	c, _, err := w.guard.Dial(context.Background(), tg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

func authorities(es []upstreamproxy.Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Authority)
	}
	return out
}

// TestUpstreamConnectsToCheckedAddress: through the proxy, the guard asks for the address
// it checked and the destination's own port, never the name; the proxy's resolution of the
// name (here: an internal server) is never used.
func TestUpstreamConnectsToCheckedAddress(t *testing.T) {
	good, internal := backend(t, "good"), backend(t, "internal")
	w := newProxyWorld(t, worldOpts{route: map[string]string{
		public + ":443": good, public + ":8443": good,
		"svc.test:443": internal, "svc.test:8443": internal, // what the proxy's DNS would say
	}})
	w.res.set("svc.test", addrs(public))
	for _, port := range []int{443, 8443} {
		got, err := w.fetch(t, "svc.test", port, Ranges(nil))
		if err != nil {
			t.Fatalf("port %d: %v", port, err)
		}
		if got != "good" {
			t.Fatalf("port %d: reached %q, want good", port, got)
		}
	}
	if got, want := authorities(w.proxy.Log()), []string{public + ":443", public + ":8443"}; !equal(got, want) {
		t.Fatalf("proxy was asked for %v, want %v (the checked address and the destination's port)", got, want)
	}
	if d := w.dir.dials(); len(d) != 0 {
		t.Fatalf("direct dials %v, want none", d)
	}
}

func equal(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }

// TestUpstreamRefusesInternalBeforeProxy: an allowed name whose answer is internal (or
// mixed, as rebinding looks) is refused by the guard; the proxy never hears of it.
func TestUpstreamRefusesInternalBeforeProxy(t *testing.T) {
	w := newProxyWorld(t, worldOpts{route: map[string]string{}})
	for name, answer := range map[string][]string{
		"internal.test": {"10.0.0.5"}, "mixed.test": {public, "169.254.169.254"}, "mapped.test": {"::ffff:127.0.0.1"},
	} {
		w.res.set(name, addrs(answer...))
		_, err := w.fetch(t, name, 443, Ranges(nil))
		if !errors.Is(err, ErrInternalAddress) {
			t.Fatalf("%s: got %v, want ErrInternalAddress", name, err)
		}
	}
	for _, lit := range []string{"127.0.0.1", "[::1]", "0x7f000001", "169.254.169.254"} {
		if _, err := w.fetch(t, lit, 443, Ranges(nil)); err == nil {
			t.Fatalf("%s: dialled, want a denial", lit)
		}
	}
	if l := w.proxy.Log(); len(l) != 0 {
		t.Fatalf("proxy saw %v, want nothing", l)
	}
}

// TestUpstreamNoProxy: exempt names and ranges are dialled directly; everything else goes
// through the proxy.
func TestUpstreamNoProxy(t *testing.T) {
	good := backend(t, "good")
	w := newProxyWorld(t, worldOpts{route: map[string]string{public + ":443": good},
		noProxy: []string{"*.corp.test", "direct.test", "198.19.0.0/16"}})
	w.res.set("a.corp.test", addrs("198.18.5.5"))
	w.res.set("direct.test", addrs("198.18.5.6"))
	w.res.set("ranged.test", addrs("198.19.1.1"))
	w.res.set("corp.test", addrs(public)) // the apex is not under *.corp.test
	for _, h := range []string{"a.corp.test", "direct.test", "ranged.test"} {
		if _, err := w.fetch(t, h, 443, Ranges(nil)); err != nil && !strings.Contains(err.Error(), "EOF") {
			t.Fatalf("%s: %v", h, err)
		}
	}
	if got, err := w.fetch(t, "corp.test", 443, Ranges(nil)); err != nil || got != "good" {
		t.Fatalf("corp.test: %q, %v; want good through the proxy", got, err)
	}
	want := []netip.AddrPort{netip.MustParseAddrPort("198.18.5.5:443"), netip.MustParseAddrPort("198.18.5.6:443"), netip.MustParseAddrPort("198.19.1.1:443")}
	if got := w.dir.dials(); len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("direct dials %v, want %v", got, want)
	}
	if got := authorities(w.proxy.Log()); !equal(got, []string{public + ":443"}) {
		t.Fatalf("proxy saw %v, want only %s:443", got, public)
	}
}

// TestUpstreamFailsClosed: a proxy that refuses, cannot be reached or does not answer fails
// the dial with ErrUpstreamProxy, without its body or headers in the error, and the guard
// never dials directly instead.
func TestUpstreamFailsClosed(t *testing.T) {
	for _, status := range []int{http.StatusForbidden, http.StatusProxyAuthRequired, http.StatusBadGateway, http.StatusServiceUnavailable} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			w := newProxyWorld(t, worldOpts{route: map[string]string{public + ":443": backend(t, "good")}})
			w.res.set("svc.test", addrs(public, "198.18.0.11"))
			w.proxy.SetRefuse(status)
			_, err := w.fetch(t, "svc.test", 443, Ranges(nil))
			var pe *ProxyError
			if !errors.As(err, &pe) || pe.Status != status || !errors.Is(err, ErrUpstreamProxy) {
				t.Fatalf("got %v, want a *ProxyError with status %d", err, status)
			}
			if strings.Contains(err.Error(), upstreamproxy.LeakMarker) {
				t.Fatalf("error %q carries the proxy's own answer", err)
			}
			if d := w.dir.dials(); len(d) != 0 {
				t.Fatalf("direct dials %v after the proxy refused, want none", d)
			}
			wantTries := 1 // the proxy itself refused: the next address would fare alike
			if status >= 500 {
				wantTries = 2 // the destination's fault: the next address is tried
			}
			if got := len(w.proxy.Log()); got != wantTries {
				t.Fatalf("proxy asked %d times, want %d", got, wantTries)
			}
		})
	}
	t.Run("unreachable", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		w := newProxyWorld(t, worldOpts{proxyLn: ln})
		w.proxy.Close() // the port is closed: connection refused
		w.res.set("svc.test", addrs(public))
		if _, err := w.fetch(t, "svc.test", 443, Ranges(nil)); !errors.Is(err, ErrUpstreamProxy) {
			t.Fatalf("got %v, want ErrUpstreamProxy", err)
		}
		if d := w.dir.dials(); len(d) != 0 {
			t.Fatalf("direct dials %v, want none", d)
		}
	})
	t.Run("never answers", func(t *testing.T) {
		w := newProxyWorld(t, worldOpts{timeout: 100 * time.Millisecond})
		w.proxy.SetHang(true)
		w.res.set("svc.test", addrs(public))
		_, err := w.fetch(t, "svc.test", 443, Ranges(nil))
		if !errors.Is(err, ErrUpstreamProxy) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want ErrUpstreamProxy and the deadline", err)
		}
		if d := w.dir.dials(); len(d) != 0 {
			t.Fatalf("direct dials %v, want none", d)
		}
	})
}

// TestUpstreamCredentialsRotation: Basic credentials from a file; after the proxy's
// password rotates, a 407 makes the guard re-read the file once and retry; with the file
// still stale, the second 407 is the answer (no loop).
func TestUpstreamCredentialsRotation(t *testing.T) {
	file := filepath.Join(t.TempDir(), "proxy-auth")
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("agent:old\n")
	creds := NewFileCredentials(file)
	w := newProxyWorld(t, worldOpts{route: map[string]string{public + ":443": backend(t, "good")},
		users: map[string]string{"agent": "old"}, creds: creds})
	w.res.set("svc.test", addrs(public))
	if got, err := w.fetch(t, "svc.test", 443, Ranges(nil)); err != nil || got != "good" {
		t.Fatalf("first fetch: %q, %v", got, err)
	}
	w.proxy.SetPassword("agent", "new")
	write("agent:new\n")
	if got, err := w.fetch(t, "svc.test", 443, Ranges(nil)); err != nil || got != "good" {
		t.Fatalf("after rotation: %q, %v", got, err)
	}
	w.proxy.SetPassword("agent", "newer") // the file is not updated
	_, err := w.fetch(t, "svc.test", 443, Ranges(nil))
	var pe *ProxyError
	if !errors.As(err, &pe) || pe.Status != http.StatusProxyAuthRequired {
		t.Fatalf("stale credentials: got %v, want 407", err)
	}
	var statuses []int
	for _, e := range w.proxy.Log() {
		statuses = append(statuses, e.Status)
		if e.User != "agent" {
			t.Fatalf("proxy saw user %q, want agent", e.User)
		}
	}
	if want := []int{200, 407, 200, 407, 407}; !equalInts(statuses, want) {
		t.Fatalf("proxy answered %v, want %v", statuses, want)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestUpstreamByName: the opt-in sends the name; a name the sidecar cannot resolve still
// goes (by name), but one it resolves to an internal address is still refused.
func TestUpstreamByName(t *testing.T) {
	w := newProxyWorld(t, worldOpts{byName: true, route: map[string]string{
		"far.test:443": backend(t, "far"), "svc.test:443": backend(t, "svc")}})
	w.res.set("svc.test", addrs(public))
	w.res.set("inside.test", addrs("10.1.2.3"))
	for _, h := range []string{"far.test", "svc.test"} {
		if got, err := w.fetch(t, h, 443, Ranges(nil)); err != nil || got != strings.TrimSuffix(h, ".test") {
			t.Fatalf("%s: %q, %v", h, got, err)
		}
	}
	if _, err := w.fetch(t, "inside.test", 443, Ranges(nil)); !errors.Is(err, ErrInternalAddress) {
		t.Fatalf("inside.test: got %v, want ErrInternalAddress", err)
	}
	if got := authorities(w.proxy.Log()); !equal(got, []string{"far.test:443", "svc.test:443"}) {
		t.Fatalf("proxy saw %v", got)
	}
}

// TestUpstreamHTTPSProxy: an https:// proxy is verified against RootCAs; without them the
// dial fails closed.
func TestUpstreamHTTPSProxy(t *testing.T) {
	srv := httptest.NewUnstartedServer(nil) // for its certificate only
	srv.StartTLS()
	cert := srv.TLS.Certificates[0]
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	srv.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	good := backend(t, "good")
	p := upstreamproxy.Start(t, ln, upstreamproxy.Config{TLS: &tls.Config{Certificates: []tls.Certificate{cert}},
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, good)
		}})
	for _, tc := range []struct {
		name string
		ca   []byte
		ok   bool
	}{{"with the CA", caPEM, true}, {"without it", nil, false}} {
		t.Run(tc.name, func(t *testing.T) {
			up, err := NewUpstream(UpstreamConfig{URL: p.URL(), CAPEM: tc.ca})
			if err != nil {
				t.Fatal(err)
			}
			c, err := up.Connect(context.Background(), public+":443")
			if tc.ok != (err == nil) {
				t.Fatalf("got %v, want ok=%t", err, tc.ok)
			}
			if err != nil {
				if !errors.Is(err, ErrUpstreamProxy) {
					t.Fatalf("got %v, want ErrUpstreamProxy", err)
				}
				return
			}
			defer c.Close()
			if line, _ := bufio.NewReader(c).ReadString('\n'); line != "good\n" {
				t.Fatalf("read %q through the https proxy", line)
			}
		})
	}
}

// TestOperatorIgnoresEnvironment: the operator path's transport goes through the configured
// upstream proxy (or directly), never through HTTP(S)_PROXY from the sidecar's environment.
func TestOperatorIgnoresEnvironment(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "origin") }))
	defer origin.Close()
	trapLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	trap := upstreamproxy.Start(t, trapLn, upstreamproxy.Config{})
	for _, v := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"} {
		t.Setenv(v, trap.URL())
	}
	t.Setenv("NO_PROXY", "")
	for _, via := range []string{"direct", "upstream"} {
		t.Run(via, func(t *testing.T) {
			cfg := Config{}
			var corp *upstreamproxy.Proxy
			if via == "upstream" {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				corp = upstreamproxy.Start(t, ln, upstreamproxy.Config{})
				if cfg.Upstream, err = NewUpstream(UpstreamConfig{URL: corp.URL()}); err != nil {
					t.Fatal(err)
				}
			}
			op, err := NewOperator(cfg)
			if err != nil {
				t.Fatal(err)
			}
			tr := op.Transport(AllRanges(), nil)
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr}).Get(origin.URL)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) != "origin" {
				t.Fatalf("body %q", body)
			}
			if corp != nil {
				if got := authorities(corp.Log()); !equal(got, []string{strings.TrimPrefix(origin.URL, "http://")}) {
					t.Fatalf("upstream proxy saw %v", got)
				}
			}
			if l := trap.Log(); len(l) != 0 {
				t.Fatalf("the environment's proxy saw %v", l)
			}
		})
	}
}

// TestOperatorRefusesSelfAndUnnamedInternal: the operator path still refuses the sidecar's
// own listeners, and internal addresses its caller does not name.
func TestOperatorRefusesSelfAndUnnamedInternal(t *testing.T) {
	self := NewSelfAddrs(func() ([]netip.Addr, error) { return nil, nil })
	self.Add(netip.MustParseAddrPort("127.0.0.1:3128"))
	op, err := NewOperator(Config{Self: self})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op.DialContext(AllRanges())(context.Background(), "tcp", "127.0.0.1:3128"); !errors.Is(err, ErrSelfAddress) {
		t.Fatalf("own listener: got %v, want ErrSelfAddress", err)
	}
	if _, err := op.DialContext(nil)(context.Background(), "tcp", "10.0.0.1:8200"); !errors.Is(err, ErrInternalAddress) {
		t.Fatalf("unnamed internal: got %v, want ErrInternalAddress", err)
	}
}

func TestParseUpstreamURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"http://proxy.corp:3128", "http://proxy.corp:3128"},
		{"https://proxy.corp", "https://proxy.corp:443"},
		{"http://10.0.0.1", "http://10.0.0.1:80"},
		{"http://[2001:db8::1]:8080/", "http://[2001:db8::1]:8080"},
		{"", ""},
		{"socks5://proxy:1080", ""},
		{"http://user:pw@proxy:3128", ""},
		{"proxy.corp:3128", ""},
		{"http://proxy:3128/path", ""},
		{"http://proxy:99999", ""},
		{"http://proxy:3128?x=1", ""},
	} {
		u, err := parseProxyURL(tc.in)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("%q: got %v, want an error", tc.in, u)
		case tc.want == "" && !errors.Is(err, ErrInvalidConfig):
			t.Errorf("%q: got %v, want ErrInvalidConfig", tc.in, err)
		case tc.want != "" && (err != nil || u.String() != tc.want):
			t.Errorf("%q: got %v, %v; want %s", tc.in, u, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "pw@") {
			t.Errorf("%q: error %q holds the credentials", tc.in, err)
		}
	}
}

func TestNoProxyMatch(t *testing.T) {
	np, err := ParseNoProxy([]string{"api.corp.test", "*.internal.test", "10.0.0.0/8", "2001:db8:1::/48", "198.18.9.9", " "})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host, addr string
		want       bool
	}{
		{"api.corp.test", "", true},
		{"API.Corp.Test.", "", true},
		{"x.api.corp.test", "", false},
		{"a.internal.test", "", true},
		{"a.b.internal.test", "", true},
		{"internal.test", "", false},
		{"evilinternal.test", "", false},
		{"svc.test", "10.1.2.3", true},
		{"svc.test", "::ffff:10.1.2.3", true},
		{"svc.test", "11.1.2.3", false},
		{"10.1.2.3", "", true},
		{"0x0a010203", "", true},
		{"[2001:db8:1::5]", "", true},
		{"svc.test", "2001:db8:2::5", false},
		{"198.18.9.9", "", true},
		{"svc.test", "", false},
	} {
		var a netip.Addr
		if tc.addr != "" {
			a = netip.MustParseAddr(tc.addr)
		}
		if got := np.Match(tc.host, a); got != tc.want {
			t.Errorf("Match(%q, %q) = %t, want %t", tc.host, tc.addr, got, tc.want)
		}
	}
	for _, bad := range []string{"10.0.0.0/33", "*", "*.", "a.*.test", "ex ample.test"} {
		if _, err := ParseNoProxy([]string{bad}); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%q: got %v, want ErrInvalidConfig", bad, err)
		}
	}
}
