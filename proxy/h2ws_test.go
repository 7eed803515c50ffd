package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2wsClient is a minimal RFC 8441 client on one intercepted HTTP/2 connection, written on
// golang.org/x/net's Framer: x/net's Transport has no public way to send extended CONNECT,
// and coder/websocket speaks WebSocket over HTTP/1.1 only.
type h2wsClient struct {
	t        *testing.T
	host     string // the :authority of every stream
	goaway   bool   // the server sent GOAWAY
	closed   bool   // the connection ended; with mayClose set, readFrame records it
	mayClose bool
	conn     *tls.Conn
	fr       *http2.Framer
	hbuf     bytes.Buffer
	enc      *hpack.Encoder
	next     uint32                         // next stream id
	settings map[http2.SettingID]uint32     // the server's SETTINGS
	data     map[uint32]*bytes.Buffer       // DATA received per stream, not yet consumed
	ended    map[uint32]bool                // streams the server ended (END_STREAM or RST_STREAM)
	heads    map[uint32][]hpack.HeaderField // response headers per stream
}

// dialH2WS opens an intercepted tunnel to host:443, negotiates h2 and exchanges SETTINGS
// (the client's are settings).
func dialH2WS(t *testing.T, h *streamHarness, host string, settings ...http2.Setting) *h2wsClient {
	t.Helper()
	c, resp := h.connect(host + ":443")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s got %d", host, resp.StatusCode)
	}
	tc := tls.Client(c, &tls.Config{ServerName: host, RootCAs: h.airlockRoots(), NextProtos: []string{"h2"}})
	if err := tc.Handshake(); err != nil || tc.ConnectionState().NegotiatedProtocol != "h2" {
		t.Fatalf("TLS in the tunnel: %v, ALPN %q; want h2", err, tc.ConnectionState().NegotiatedProtocol)
	}
	_ = tc.SetDeadline(time.Now().Add(waitTimeout))
	cl := &h2wsClient{t: t, host: host, conn: tc, fr: http2.NewFramer(tc, tc), next: 1, settings: map[http2.SettingID]uint32{},
		data: map[uint32]*bytes.Buffer{}, ended: map[uint32]bool{}, heads: map[uint32][]hpack.HeaderField{}}
	cl.enc = hpack.NewEncoder(&cl.hbuf)
	cl.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if _, err := io.WriteString(tc, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := cl.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	for len(cl.settings) == 0 {
		cl.readFrame()
	}
	return cl
}

// readFrame reads one frame and records what it carries.
func (c *h2wsClient) readFrame() {
	c.t.Helper()
	f, err := c.fr.ReadFrame()
	if err != nil && c.mayClose && errors.Is(err, io.EOF) {
		c.closed = true
		for id := uint32(1); id < c.next; id += 2 {
			c.ended[id] = true
		}
		return
	}
	if err != nil {
		c.t.Fatalf("read frame: %v", err)
	}
	id := f.Header().StreamID
	switch f := f.(type) {
	case *http2.SettingsFrame:
		if !f.IsAck() {
			_ = f.ForeachSetting(func(s http2.Setting) error { c.settings[s.ID] = s.Val; return nil })
			_ = c.fr.WriteSettingsAck()
		}
	case *http2.PingFrame:
		if !f.IsAck() {
			_ = c.fr.WritePing(true, f.Data)
		}
	case *http2.MetaHeadersFrame:
		c.heads[id] = append(c.heads[id], f.Fields...)
		c.ended[id] = c.ended[id] || f.StreamEnded()
	case *http2.DataFrame:
		if c.data[id] == nil {
			c.data[id] = new(bytes.Buffer)
		}
		c.data[id].Write(f.Data())
		if n := uint32(len(f.Data())); n > 0 {
			_ = c.fr.WriteWindowUpdate(0, n)
			_ = c.fr.WriteWindowUpdate(id, n)
		}
		c.ended[id] = c.ended[id] || f.StreamEnded()
	case *http2.RSTStreamFrame:
		c.ended[id] = true
	case *http2.GoAwayFrame:
		c.goaway = true
	}
}

// open sends an extended CONNECT for path with :protocol proto and returns the stream's
// id and response status.
func (c *h2wsClient) open(path, proto string) (uint32, string) {
	c.t.Helper()
	id := c.next
	c.next += 2
	c.hbuf.Reset()
	for _, kv := range [][2]string{{":method", "CONNECT"}, {":protocol", proto}, {":scheme", "https"},
		{":path", path}, {":authority", c.host}, {"sec-websocket-version", "13"}} {
		_ = c.enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.hbuf.Bytes(), EndHeaders: true}); err != nil {
		c.t.Fatal(err)
	}
	for len(c.heads[id]) == 0 && !c.ended[id] {
		c.readFrame()
	}
	for _, hf := range c.heads[id] {
		if hf.Name == ":status" {
			return id, hf.Value
		}
	}
	return id, "reset"
}

// body reads a stream's DATA until the stream ends.
func (c *h2wsClient) body(id uint32) string {
	c.t.Helper()
	c.waitEnd(id)
	if c.data[id] == nil {
		return ""
	}
	return c.data[id].String()
}

// waitEnd reads frames until the server ends stream id.
func (c *h2wsClient) waitEnd(id uint32) {
	c.t.Helper()
	for !c.ended[id] {
		c.readFrame()
	}
}

// send sends a masked, unfragmented WebSocket frame on stream id (encoded here, not with the
// proxy's encoder under test).
func (c *h2wsClient) send(id uint32, op byte, payload string) {
	c.t.Helper()
	if len(payload) > 125 {
		c.t.Fatal("test frames are short")
	}
	var key [4]byte
	_, _ = rand.Read(key[:])
	b := append([]byte{0x80 | op, 0x80 | byte(len(payload))}, key[:]...)
	for i := range len(payload) {
		b = append(b, payload[i]^key[i%4])
	}
	if err := c.fr.WriteData(id, false, b); err != nil {
		c.t.Fatal(err)
	}
}

// recv reads one WebSocket frame from stream id: its opcode and payload (it must be
// unmasked, as a server's frames are).
func (c *h2wsClient) recv(id uint32) (byte, string) {
	c.t.Helper()
	for {
		buf := c.data[id]
		if buf != nil && buf.Len() >= 2 {
			b := buf.Bytes()
			n, hdr := int(b[1]&0x7f), 2
			if n == 126 && len(b) >= 4 {
				n, hdr = int(binary.BigEndian.Uint16(b[2:4])), 4
			}
			if b[1]&0x80 != 0 || n == 127 {
				c.t.Fatalf("frame from the proxy is masked or huge: % x", b[:2])
			}
			if n < 126 || hdr == 4 {
				if len(b) >= hdr+n {
					op, payload := b[0]&0x0f, string(b[hdr:hdr+n])
					buf.Next(hdr + n)
					return op, payload
				}
			}
		}
		if c.ended[id] {
			c.t.Fatalf("stream %d ended before a whole frame", id)
		}
		c.readFrame()
	}
}

// TestWebSocketOverHTTP2 runs WebSocket over HTTP/2 (RFC 8441) through an intercepted
// tunnel: the proxy advertises extended CONNECT, relays a :protocol websocket stream to an
// HTTP/1.1 upstream with the credential injected, swaps a placeholder and masks the echoed
// secret, decides the path as a GET (a denied path gets 403 on its stream while another
// stream relays), and refuses another :protocol.
func TestWebSocketOverHTTP2(t *testing.T) {
	h := newStreamHarness(t)
	s := &seen{}
	h.route(addrAPI, 443, h.upstream.tlsServer(t, wsEcho(s), "api.test"))
	c := dialH2WS(t, h, "api.test")
	if v, ok := c.settings[http2.SettingEnableConnectProtocol]; !ok || v != 1 {
		t.Fatalf("server SETTINGS %v lack ENABLE_CONNECT_PROTOCOL=1", c.settings)
	}
	if v, ok := os.LookupEnv("GODEBUG"); ok && strings.Contains(v, "http2xconnect") {
		t.Fatalf("GODEBUG=%q after init; the proxy should have restored it", v)
	}
	ws, status := c.open("/ws/echo", "websocket")
	if status != "200" {
		t.Fatalf("extended CONNECT got %s %s, want 200", status, c.data[ws])
	}
	ph, stars := h.ph.For("tok"), strings.Repeat("*", len(streamSecret))
	for _, m := range [][2]string{{"hello", "hello"}, {"sendsecret", "token=" + stars}, {"key=" + ph + ";", "key=" + stars + ";"}} {
		c.send(ws, wsText, m[0])
		if op, got := c.recv(ws); op != wsText || got != m[1] {
			t.Fatalf("sent %q, got op %d %q; want %q", m[0], op, got, m[1])
		}
	}
	denied, status := c.open("/denied", "websocket")
	if body := c.body(denied); status != "403" || deniedJSON(t, body).Reason != "path_not_allowed" {
		t.Fatalf("denied path got %s %s, want 403 path_not_allowed", status, body)
	}
	other, status := c.open("/ws/echo", "connect-udp")
	if body := c.body(other); status != "403" || deniedJSON(t, body).Reason != "upgrade_unsupported" {
		t.Fatalf(":protocol connect-udp got %s %s, want 403 upgrade_unsupported", status, body)
	}
	c.send(ws, wsPing, "still-open") // the relay outlived the other streams
	if op, got := c.recv(ws); op != wsPong || got != "still-open" {
		t.Fatalf("ping got op %d %q", op, got)
	}
	c.send(ws, wsClose, "\x03\xe8")
	if op, _ := c.recv(ws); op != wsClose {
		t.Fatalf("close got op %d", op)
	}
	_, _, msgs := s.snapshot()
	if want := []string{"hello", "sendsecret", "key=" + streamSecret + ";"}; strings.Join(msgs, "|") != strings.Join(want, "|") {
		t.Fatalf("upstream got %q, want %q", msgs, want)
	}
	s.checkInjected(t, 1)
	if auth, protos, _ := s.snapshot(); len(auth) != 4 || protos[0] != "HTTP/1.1" {
		t.Fatalf("upstream saw %d requests (%q), want the one HTTP/1.1 upgrade and its 3 messages", len(auth), protos)
	}
	for found := false; !found; {
		for _, ev := range h.log.wait(t, 1) {
			found = found || (ev["kind"] == "http" && ev["path"] == "/ws/echo" && ev["method"] == "GET" && ev["status"] == float64(101))
		}
	}
}

// TestWebSocketOverHTTP2Refusals checks the HTTP/1.1 rules hold over HTTP/2: a placeholder
// where the rule does not allow it in bodies ends the WebSocket with Close 1008 and never
// reaches the upstream, and an upstream 101 without a valid Sec-WebSocket-Accept is not
// relayed (the stream gets 502, never 200).
func TestWebSocketOverHTTP2Refusals(t *testing.T) {
	t.Run("placeholder refused", func(t *testing.T) {
		h := newStreamHarness(t)
		s := &seen{}
		h.route(addrPlain, 443, h.upstream.tlsServer(t, wsEcho(s), "plain.test"))
		c := dialH2WS(t, h, "plain.test")
		ws, status := c.open("/ws/echo", "websocket")
		if status != "200" {
			t.Fatalf("got %s, want 200", status)
		}
		c.send(ws, wsText, "key="+h.ph.For("tok"))
		op, payload := c.recv(ws)
		if op != wsClose || len(payload) < 2 || binary.BigEndian.Uint16([]byte(payload)) != 1008 {
			t.Fatalf("got op %d %q, want Close 1008", op, payload)
		}
		c.waitEnd(ws)
		if _, _, msgs := s.snapshot(); len(msgs) != 0 {
			t.Fatalf("the upstream got %q", msgs)
		}
		s.checkInjected(t, 1)
	})
	t.Run("101 without a valid accept", func(t *testing.T) {
		h := newStreamHarness(t)
		s := &seen{}
		h.route(addrAPI, 443, h.upstream.tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.add(r.Header.Get("Authorization"), r.Proto, "bad-accept")
			w.Header().Set("Upgrade", "websocket")
			w.Header().Set("Connection", "Upgrade")
			w.Header().Set("Sec-WebSocket-Accept", "bm90IHRoZSByaWdodCBhY2NlcHQ=")
			w.WriteHeader(http.StatusSwitchingProtocols)
		}), "api.test"))
		c := dialH2WS(t, h, "api.test")
		ws, status := c.open("/ws/echo", "websocket")
		if body := c.body(ws); status != "502" || deniedJSON(t, body).Reason != "upgrade_unsupported" {
			t.Fatalf("got %s %s, want 502 upgrade_unsupported", status, body)
		}
		s.checkInjected(t, 1)
	})
}

// TestWebSocketOverHTTP2Ends checks a relayed HTTP/2 WebSocket stream ends when the relay
// idles out (the stream alone), and when Shutdown stops waiting for it (the connection).
func TestWebSocketOverHTTP2Ends(t *testing.T) {
	for _, name := range []string{"idle", "shutdown"} {
		t.Run(name, func(t *testing.T) {
			idle := time.Duration(waitTimeout) // the stream must end for Shutdown, not idleness
			if name == "idle" {
				idle = 300 * time.Millisecond
			}
			h := newStreamHarness(t, func(c *Config) { c.IdleTimeout = idle })
			s := &seen{}
			h.route(addrAPI, 443, h.upstream.tlsServer(t, wsEcho(s), "api.test"))
			c := dialH2WS(t, h, "api.test")
			ws, status := c.open("/ws/echo", "websocket")
			if status != "200" {
				t.Fatalf("got %s, want 200", status)
			}
			c.send(ws, wsText, "ping")
			if _, got := c.recv(ws); got != "ping" {
				t.Fatalf("echo got %q", got)
			}
			if name == "shutdown" {
				short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				defer cancel()
				if err := h.p.Shutdown(short); !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("Shutdown returned %v, want it to wait for the open WebSocket until ctx ends", err)
				}
				c.mayClose = true // the proxy closes the connection when Shutdown stops waiting
			}
			c.waitEnd(ws)
		})
	}
	// A client that reads nothing (a zero window) holds the relay's write to it; the idle
	// close must still end the stream (reset) rather than wait for that write forever.
	t.Run("blocked write", func(t *testing.T) {
		h := newStreamHarness(t, func(c *Config) { c.IdleTimeout = 300 * time.Millisecond })
		h.route(addrAPI, 443, h.upstream.tlsServer(t, wsEcho(&seen{}), "api.test"))
		c := dialH2WS(t, h, "api.test", http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		ws, status := c.open("/ws/echo", "websocket")
		if status != "200" {
			t.Fatalf("got %s, want 200", status)
		}
		c.send(ws, wsText, "stuck")
		c.waitEnd(ws)
		if c.data[ws] != nil && c.data[ws].Len() > 0 {
			t.Fatalf("got %q through a zero window", c.data[ws])
		}
	})
}

// TestExplicitListenerNoHTTP2 checks extended CONNECT is offered only where HTTP/2 is: the
// explicit listener speaks HTTP/1.1 only, so an HTTP/2 client preface gets an HTTP/1.1 error
// instead of a SETTINGS frame.
func TestExplicitListenerNoHTTP2(t *testing.T) {
	h := newStreamHarness(t)
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(waitTimeout))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(io.LimitReader(c, 9))
	if !strings.HasPrefix(string(got), "HTTP/1.1 ") {
		t.Fatalf("the explicit listener answered an HTTP/2 preface with %q, want an HTTP/1.1 response", got)
	}
}
