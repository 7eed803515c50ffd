package proxy

// HTTP/2 on the client side of an intercepted tunnel. The intercepting TLS server offers
// "h2" before "http/1.1" in ALPN; a client that picks h2 has its streams served by the
// HTTP/2 server net/http bundles (golang.org/x/net/http2's, whose own Server API is
// deprecated in favour of http.Server.Protocols). Every stream is one request through the
// same handler as an HTTP/1.1 request in the tunnel: goproxy, the exchange's decision (L7
// rules), injection and response filtering. A stream's :authority is its Host (net/http
// maps one onto the other), so the exchange's Host check refuses a stream naming another
// host than the tunnel's (host_mismatch), as it does a Host header in HTTP/1.1. The
// upstream side negotiates HTTP/2 or HTTP/1.1 on its own (upstreams, ForceAttemptHTTP2).
//
// CONNECT inside a stream is refused, except RFC 8441 extended CONNECT with :protocol
// websocket (WebSocket over HTTP/2, h2ws.go): the server advertises
// SETTINGS_ENABLE_CONNECT_PROTOCOL, and another :protocol is refused.

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/policy"
)

// serveH2 serves the HTTP/2 streams of one intercepted connection with h until the
// connection closes or idles out. TLS is already terminated (conn is the *tls.Conn, wrapped
// by serveConn), so net/http's HTTP/2 server is enabled for "unencrypted" HTTP/2: it reads
// the client's connection preface from conn and serves only HTTP/2 there. Shutdown sends
// GOAWAY, so the client opens no new stream.
func (p *Proxy) serveH2(conn net.Conn, h http.Handler) {
	srv := p.newServer(h)
	srv.TLSNextProto = nil // net/http sets up its HTTP/2 server
	srv.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: maxH2Streams}
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	srv.Protocols = &protos
	stop := p.active.onDrain(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // only the shutdown hooks (GOAWAY) are wanted: srv has no listener of its own
		// In its own goroutine: Shutdown waits for Serve to return, i.e. for the connection
		// to close, which a long stream (a WebSocket, a gRPC stream) may not do before the
		// Shutdown of the proxy stops waiting and closes it.
		go func() { _ = srv.Shutdown(ctx) }()
	})
	defer stop()
	p.serveConn(srv, conn)
}

// Rapid reset (CVE-2023-44487): a client that opens streams and resets them at once costs
// nothing itself, but each stream whose request went upstream before its reset was read is
// work for the upstream. net/http bounds the handlers in flight (maxH2Streams); a
// connection is also closed once its streams reset before they were answered number more
// than maxStreamResets and more than those answered, so what one connection makes the
// upstream do is bounded by what it asks in earnest (and a stream already reset when its
// handler starts sends nothing).
const (
	maxH2Streams    = 100
	maxStreamResets = 100
)

// resetGuard counts one HTTP/2 connection's streams, answered and reset.
type resetGuard struct {
	conn            net.Conn
	answered, reset atomic.Int64
	once            sync.Once
}

// done records the end of a stream served under ctx; it closes the connection once the
// client resets too many.
func (g *resetGuard) done(ctx context.Context) {
	if ctx.Err() == nil {
		g.answered.Add(1)
		return
	}
	if n := g.reset.Add(1); n > maxStreamResets && n > g.answered.Load() {
		g.once.Do(func() { _ = g.conn.Close() })
	}
}

// h2Handler is the handler of an intercepted tunnel's HTTP/2 streams on conn: h, except
// for CONNECT. An extended CONNECT for WebSocket is relayed as an upgrade (h2WebSocket);
// any other CONNECT stream is refused (upgrade_unsupported): a tunnel in a stream would
// carry bytes no rule looked at. Streams the client resets are counted (resetGuard).
func (p *Proxy) h2Handler(t *tunnel, conn net.Conn, h http.Handler) http.Handler {
	g := &resetGuard{conn: conn}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer g.done(r.Context())
		if r.Context().Err() != nil {
			return // reset before it was served: nothing goes upstream
		}
		switch {
		case r.Method != http.MethodConnect:
			h.ServeHTTP(w, r)
			return
		case isWebSocketProtocol(r):
			p.h2WebSocket(w, r, h)
			return
		}
		detail := "CONNECT in an HTTP/2 stream is not relayed"
		if proto := r.Header.Get(":protocol"); proto != "" {
			detail = fmt.Sprintf("extended CONNECT for %q is not relayed; only websocket is", proto)
		}
		o := &origin{client: t.client, hostHeader: r.Host, headKnown: true, ups: t.ups, tunnel: t}
		p.refuseRequest(w, r, o, policy.Decision{Reason: policy.ReasonUpgradeUnsupported, Rule: t.d.Rule,
			Host: t.host, Port: t.port, Detail: detail})
	})
}

// refuseRequest answers r with the denial d and audits it, for a request refused before
// goproxy sees it.
func (p *Proxy) refuseRequest(w http.ResponseWriter, r *http.Request, o *origin, d policy.Decision) {
	x := &exchange{p: p, o: o, at: p.cfg.Now(), start: time.Now(),
		method: r.Method, path: r.URL.EscapedPath(), host: r.Host, dest: r.Host}
	x.pol, _ = p.policyFor(o.client)
	resp := x.deny(r, d)
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = bufio.NewReader(resp.Body).WriteTo(w)
}

// streamWriter is the client's ResponseWriter as goproxy sees it: it flushes after every
// write, so a streamed response (SSE, gRPC server streaming, a long poll) reaches the client
// as the upstream sends it instead of when a buffer fills; and it remembers a hijacked
// connection, so a WebSocket relay can close it when either side ends.
type streamWriter struct {
	http.ResponseWriter

	// mu guards conn.
	mu   sync.Mutex
	conn net.Conn
}

// Write writes b and flushes it to the client.
func (w *streamWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	if err == nil {
		_ = http.NewResponseController(w.ResponseWriter).Flush()
	}
	return n, err
}

// Flush flushes what was written.
func (w *streamWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

// Hijack takes over the client connection (HTTP/1.1 only) and remembers it.
func (w *streamWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.mu.Lock()
	w.conn = c
	w.mu.Unlock()
	return c, rw, nil
}

// closeHijacked closes the hijacked connection, if there is one.
func (w *streamWriter) closeHijacked() {
	w.mu.Lock()
	c := w.conn
	w.mu.Unlock()
	if c != nil {
		_ = c.Close()
	}
}

// Unwrap is for http.ResponseController.
func (w *streamWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
