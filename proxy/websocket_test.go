package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// wsEcho is a WebSocket upstream: it records the upgrade's Authorization and every message,
// answers "sendsecret" with the credential it got (which the proxy must mask) and echoes
// anything else.
func wsEcho(s *seen) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		s.add(auth, r.Proto, "")
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		ctx := r.Context()
		for {
			typ, msg, err := c.Read(ctx)
			if err != nil {
				return
			}
			s.add(auth, "ws", string(msg))
			if string(msg) == "sendsecret" {
				msg = []byte("token=" + strings.TrimPrefix(auth, "Bearer "))
			}
			if err := c.Write(ctx, typ, msg); err != nil {
				return
			}
		}
	})
}

// TestWebSocketThroughInterception runs a WebSocket client (coder/websocket) through
// intercepted tunnels with an injected credential: messages relay both ways, a placeholder
// is swapped where the rule allows it in bodies (also across fragments) and refused with
// Close 1008 where it does not, and an echoed secret is masked.
func TestWebSocketThroughInterception(t *testing.T) {
	h := newStreamHarness(t)
	s := &seen{}
	h.route(addrAPI, 443, h.upstream.tlsServer(t, wsEcho(s), "api.test"))
	h.route(addrPlain, 443, h.upstream.tlsServer(t, wsEcho(s), "plain.test"))
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	dial := func(t *testing.T, url string) *websocket.Conn {
		c, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: h.client(h.airlockRoots())})
		if err != nil {
			t.Fatalf("dial %s: %v (%v)", url, err, resp)
		}
		t.Cleanup(func() { c.CloseNow() })
		return c
	}
	roundTrip := func(t *testing.T, c *websocket.Conn, send string) string {
		t.Helper()
		if err := c.Write(ctx, websocket.MessageText, []byte(send)); err != nil {
			t.Fatal(err)
		}
		_, got, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return string(got)
	}
	ph, stars := h.ph.For("tok"), strings.Repeat("*", len(streamSecret))
	c := dial(t, "wss://api.test/ws/echo")
	if got := roundTrip(t, c, "hello"); got != "hello" {
		t.Fatalf("echo got %q", got)
	}
	if got := roundTrip(t, c, "sendsecret"); got != "token="+stars {
		t.Fatalf("the echoed secret reached the sandbox as %q, want it masked", got)
	}
	if got := roundTrip(t, c, "key="+ph+";"); got != "key="+stars+";" {
		t.Fatalf("placeholder round trip got %q", got)
	}
	w, err := c.Writer(ctx, websocket.MessageText)
	if err != nil {
		t.Fatal(err)
	}
	half := len(ph) / 2
	_, _ = w.Write([]byte("split " + ph[:half]))
	_, _ = w.Write([]byte(ph[half:] + " end"))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, got, err := c.Read(ctx); err != nil || string(got) != "split "+stars+" end" {
		t.Fatalf("fragmented placeholder got %q, %v", got, err)
	}
	_, _, msgs := s.snapshot()
	want := []string{"hello", "sendsecret", "key=" + streamSecret + ";", "split " + streamSecret + " end"}
	if strings.Join(msgs, "|") != strings.Join(want, "|") {
		t.Fatalf("upstream got %q, want %q", msgs, want)
	}
	c.Close(websocket.StatusNormalClosure, "")

	p := dial(t, "wss://plain.test/ws/echo") // placeholders in headers only
	if err := p.Write(ctx, websocket.MessageText, []byte("key="+ph)); err != nil {
		t.Fatal(err)
	}
	_, _, err = p.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Fatalf("a refused placeholder got %v, want Close 1008", err)
	}
	if _, _, after := s.snapshot(); len(after) != len(msgs) {
		t.Fatalf("the upstream got %q after the refusal", after[len(msgs):])
	}
	s.checkInjected(t, 2)
	p.CloseNow()
	// The relay's event is written when it closes, after the client got the Close frame.
	for found := false; !found; {
		for _, ev := range h.log.wait(t, 1) {
			found = found || (ev["kind"] == "http" && ev["reason"] == "credential_misuse" && ev["destination"] == "plain.test:443" &&
				ev["decision"] == "deny")
		}
	}
}

// TestUpgradeRefusals checks only WebSocket upgrades are relayed: h2c (from curl, in
// absolute form, and inside an intercepted tunnel) and others are refused with a reason
// before they go upstream, and a 101 without the right Sec-WebSocket-Accept is not relayed.
func TestUpgradeRefusals(t *testing.T) {
	h := newStreamHarness(t)
	s := &seen{}
	h.route(addrAPI, 443, h.upstream.tlsServer(t, protoEcho(s), "api.test"))
	badAccept := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.add(r.Header.Get("Authorization"), r.Proto, "bad-accept")
		w.Header().Set("Upgrade", "websocket")
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Sec-WebSocket-Accept", "bm90IHRoZSByaWdodCBhY2NlcHQ=")
		w.WriteHeader(http.StatusSwitchingProtocols)
	})
	h.route(addrPlain, 80, httpServer(t, badAccept))
	c := h.client(h.airlockRoots())
	for _, tc := range []struct{ name, url, upgrade string }{
		{"h2c in a tunnel", "https://api.test/ok/x", "h2c"},
		{"h2c in absolute form", "http://plain.test/x", "h2c"},
		{"another protocol", "https://api.test/ok/x", "foo/1"},
		{"websocket and h2c", "https://api.test/ok/x", "websocket, h2c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", tc.url, nil)
			req.Header.Set("Connection", "Upgrade, HTTP2-Settings")
			req.Header.Set("Upgrade", tc.upgrade)
			req.Header.Set("HTTP2-Settings", "AAMAAABkAARAAAAAAAIAAAAA")
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body := new(strings.Builder)
			_, _ = ioCopy(body, resp)
			if resp.StatusCode != 403 || deniedJSON(t, body.String()).Reason != "upgrade_unsupported" {
				t.Fatalf("got %d %s, want 403 upgrade_unsupported", resp.StatusCode, body)
			}
		})
	}
	if out, err := curlH2C(h); err != nil && !errors.Is(err, errNoCurl) {
		t.Fatal(err)
	} else if err == nil && !strings.Contains(out, "upgrade_unsupported") {
		t.Fatalf("curl --http2 http:// got %q, want the refusal", out)
	}
	if auth, _, _ := s.snapshot(); len(auth) != 0 {
		t.Fatalf("refused upgrades reached the upstream %d times", len(auth))
	}
	t.Run("101 without a valid accept", func(t *testing.T) {
		_, resp, err := websocket.Dial(context.Background(), "ws://plain.test/ws", &websocket.DialOptions{HTTPClient: h.client(nil)})
		if err == nil || resp == nil || resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("got %v, %v; want 502 upgrade_unsupported", resp, err)
		}
	})
	if _, _, msgs := s.snapshot(); len(msgs) != 1 {
		t.Fatalf("the upstream saw %q, want the one bad-accept handshake", msgs)
	}
}

func ioCopy(w io.Writer, resp *http.Response) (int64, error) {
	defer resp.Body.Close()
	return io.Copy(w, resp.Body)
}

var errNoCurl = errors.New("curl is not installed")

// curlH2C runs curl --http2 on an http:// URL through the explicit proxy: curl asks to
// upgrade to h2c in the absolute-form request.
func curlH2C(h *streamHarness) (string, error) {
	if _, err := exec.LookPath("curl"); err != nil {
		return "", errNoCurl
	}
	out, err := exec.Command("curl", "-sS", "-v", "--http2", "-x", "http://"+h.addr, "http://plain.test/x").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("curl: %w: %s", err, out)
	}
	return string(out), nil
}

// TestTransparentStreams checks the transparent listener: a WebSocket over captured plain
// HTTP is relayed (and checked), and a captured TLS connection to an intercepted host
// negotiates HTTP/2 and gets the credential injected.
func TestTransparentStreams(t *testing.T) {
	od := &origDst{}
	h := newStreamHarness(t, func(c *Config) { c.OriginalDst = od })
	s := &seen{}
	h.route(addrPlain, 80, httpServer(t, wsEcho(s)))
	h.route(addrAPI, 443, h.h2Upstream(t, protoEcho(s), "api.test"))
	captured := &http.Transport{ // every connection lands on the transparent listener
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", h.taddr)
		},
		TLSClientConfig:   &tls.Config{RootCAs: h.airlockRoots()},
		ForceAttemptHTTP2: true,
	}
	t.Cleanup(captured.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	od.set(netip.MustParseAddrPort("198.18.0.20:80"))
	c, _, err := websocket.Dial(ctx, "ws://plain.test/ws/echo", &websocket.DialOptions{HTTPClient: &http.Client{Transport: captured}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if err := c.Write(ctx, websocket.MessageText, []byte("over transparent")); err != nil {
		t.Fatal(err)
	}
	if _, got, err := c.Read(ctx); err != nil || string(got) != "over transparent" {
		t.Fatalf("got %q, %v", got, err)
	}
	c.Close(websocket.StatusNormalClosure, "")

	od.set(netip.MustParseAddrPort("198.18.0.10:443"))
	resp, body := get(t, &http.Client{Transport: captured}, "GET", "https://api.test/ok/t", nil)
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 || !strings.Contains(body, "proto=HTTP/2.0") {
		t.Fatalf("got %s %d %q, want 200 over HTTP/2 on both sides", resp.Proto, resp.StatusCode, body)
	}
	auth, _, _ := s.snapshot()
	if len(auth) != 3 || auth[2] != "Bearer "+streamSecret {
		t.Fatalf("upstreams saw Authorization %q, want the injected one last", auth)
	}
}

// TestWebSocketShutdown checks Shutdown waits for a relayed WebSocket (absolute form, whose
// connection the HTTP server no longer tracks after the hijack) and closes it when ctx ends.
func TestWebSocketShutdown(t *testing.T) {
	h := newStreamHarness(t)
	s := &seen{}
	h.route(addrPlain, 80, httpServer(t, wsEcho(s)))
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://plain.test/ws/echo", &websocket.DialOptions{HTTPClient: h.client(nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	short, cancelShort := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancelShort()
	if err := h.p.Shutdown(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown returned %v, want it to wait for the open WebSocket until ctx ends", err)
	}
	if _, _, err := c.Read(ctx); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the WebSocket outlived Shutdown: read got %v", err)
	}
}

// TestWebSocketIdle checks a relayed WebSocket with no message for IdleTimeout is closed.
func TestWebSocketIdle(t *testing.T) {
	h := newStreamHarness(t, func(c *Config) { c.IdleTimeout = 300 * time.Millisecond })
	s := &seen{}
	h.route(addrPlain, 80, httpServer(t, wsEcho(s)))
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://plain.test/ws/echo", &websocket.DialOptions{HTTPClient: h.client(nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if err := c.Write(ctx, websocket.MessageText, []byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, got, err := c.Read(ctx); err != nil || string(got) != "ping" {
		t.Fatalf("got %q, %v", got, err)
	}
	if _, _, err := c.Read(ctx); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the idle WebSocket stayed open: read got %v", err)
	}
}
