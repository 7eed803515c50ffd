package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/elazarl/goproxy"
	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// newGoproxy builds the goproxy server every HTTP request goes through, with its unsafe
// defaults replaced: no upstream proxy from the environment, no unverified TLS, no dial that
// skips the SSRF guard. Every request gets its own RoundTripper (the exchange); the server's
// own transport and CONNECT dialer refuse, so a path we did not foresee fails closed.
func (p *Proxy) newGoproxy() *goproxy.ProxyHttpServer {
	gp := goproxy.NewProxyHttpServer()
	gp.Logger = goproxyLogger{p.cfg.Logger}
	gp.Verbose = false
	gp.KeepDestinationHeaders = true // keep what we set on the ResponseWriter (Connection: close)
	gp.KeepAcceptEncoding = true     // relay the client's Accept-Encoding; the transport never decodes
	gp.AllowHTTP2 = false
	gp.Tr = &http.Transport{
		Proxy: nil,
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			return nil, errNoExchange
		},
	}
	gp.ConnectDial = nil // NewProxyHttpServer takes one from HTTPS_PROXY
	gp.ConnectDialWithReq = func(*http.Request, string, string) (net.Conn, error) {
		return nil, errNoExchange
	}
	gp.NonproxyHandler = http.HandlerFunc(notProxy)
	gp.OnRequest().DoFunc(p.onRequest)
	gp.OnRequest().HijackConnect(p.serveConnect)
	return gp
}

// newServer is an http.Server for one of the proxy's client sides: the explicit listener,
// the inside of an intercepted tunnel, or a transparent HTTP connection.
func (p *Proxy) newServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: p.cfg.headTimeout(),
		IdleTimeout:       p.cfg.IdleTimeout,
		MaxHeaderBytes:    p.cfg.MaxHeaderBytes,
		ErrorLog:          p.errorLog,
		// HTTP/1.1 only, on every client side.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
}

// serveExplicit is the explicit listener's handler: it claims the raw head the connection
// read for this request, and passes the request to goproxy with its origin.
func (p *Proxy) serveExplicit(w http.ResponseWriter, r *http.Request) {
	o := &origin{client: r.RemoteAddr, ups: p.explicit, path: pathNetHTTP}
	hc, _ := r.Context().Value(connKey).(*headConn)
	if hc != nil {
		h, ok := hc.pop()
		if ok && h.method == r.Method && h.target == r.RequestURI && h.hosts <= 1 {
			o.hostHeader, o.headKnown = h.host, true
		}
		if !ok || h.bodyLen < 0 || !o.headKnown {
			// The connection's framing is no longer followed: no further request on it.
			w.Header().Set("Connection", "close")
		}
		w = &hijackNotifier{ResponseWriter: w, hc: hc}
	}
	o.stream = &streamWriter{ResponseWriter: w}
	w = o.stream
	if r.Method == http.MethodConnect {
		// Tracked from before the hijack, so Shutdown never misses a tunnel that is starting.
		e := p.active.add(hc)
		defer p.active.remove(e)
	}
	p.gp.ServeHTTP(w, r.WithContext(withOrigin(r.Context(), o)))
}

// notProxy answers a request that is not a proxy request (origin-form, sent to the proxy
// as if it were the server).
func notProxy(w http.ResponseWriter, r *http.Request) {
	resp := failResponse(r, policy.ReasonNotProxyRequest, "", 0)
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// serveConnect runs a CONNECT that came through goproxy (not in the plain form the fast
// path takes, see fastconnect.go) on the hijacked client connection.
func (p *Proxy) serveConnect(r *http.Request, client net.Conn, _ *goproxy.ProxyCtx) {
	p.runConnect(client, r.URL.Host, requestID(r.Header))
}

// runConnect runs one CONNECT tunnel to target (the request's authority) on client, and
// closes client: decide on the name and port, take a tunnel slot, resolve and check the
// destination, then intercept (when the decision says so) or relay bytes, screening the
// first ones for a TLS server name. Its answers do not depend on the request beyond target
// and the request id (a CONNECT response is never one to a HEAD request).
func (p *Proxy) runConnect(client net.Conn, target, reqID string) {
	defer client.Close()
	t := p.newTunnelID(kindConnect, client.RemoteAddr(), reqID)
	defer t.finish()
	a, err := parseAuthority(target)
	if err != nil {
		t.dest = target
		d := policy.Decision{Reason: policy.ReasonInvalidHost, Detail: fmt.Sprintf("CONNECT target %q is not host:port", target)}
		t.refuse(d)
		writeRaw(client, t.respond(denyResponse(nil, d, t.pol, target, 0)))
		return
	}
	t.dest = a.withPort(443)
	req := policy.Request{Scheme: "https", Host: a.host, Port: a.port}
	if req.Port == 0 {
		req.Port = 443
	}
	// Until the tunnel is established the client may leave (while an approval, a resolve
	// or the dial is waited for): that ends the wait.
	w := watchClient(context.Background(), client, client)
	defer w.stop()
	if resp := p.openTunnel(w.ctx, t, req, netip.Addr{}); resp != nil {
		w.stop()
		writeRaw(client, resp)
		return
	}
	defer p.releaseTunnel()
	if t.d.Intercept {
		client = w.resume(client)
		p.writeEstablished(t, client)
		p.intercept(t, client)
		return
	}
	upstream, err := p.connectTunnel(w.ctx, t)
	client = w.resume(client)
	if err != nil {
		writeRaw(client, t.respond(p.tunnelFailure(t, nil, err)))
		return
	}
	defer upstream.Close()
	p.writeEstablished(t, client)
	p.relay(t, client, upstream, t.screenStream)
}

// writeEstablished accepts the CONNECT; in report mode it says so when enforce would deny.
// The response is built in one small buffer (it goes out on every tunnel).
func (p *Proxy) writeEstablished(t *tunnel, client net.Conn) {
	t.setStatus(http.StatusOK)
	var buf [192]byte
	b := append(buf[:0], "HTTP/1.1 200 Connection established\r\n"+headerAirlockRequestID+": "...)
	b = append(b, t.reqID...)
	b = append(b, "\r\n"...)
	if decision, _ := t.outcome(); decision == audit.DecisionReport {
		b = append(b, headerDecision+": "+audit.DecisionReport+"\r\n"...)
	}
	b = append(b, "\r\n"...)
	_, _ = client.Write(b)
}

// screenStream is the screen of a tunnel that is not intercepted: it classifies what the
// client sends (classifyStream) before a byte of it goes upstream. A TLS ClientHello must
// name the CONNECT host; one naming no server passes only to an IP literal or under a rule
// with allowMissingSNI. Cleartext HTTP is refused: its Host header would go unchecked, and
// http:// requests belong in absolute form (or in an intercepted tunnel, where each is
// decided). Other protocols (SSH, binary ones) pass as the raw tunnel the policy allowed.
func (t *tunnel) screenStream(br *bufio.Reader) ([]byte, error) {
	s, err := classifyStream(br)
	switch {
	case errors.Is(err, errNothingSent):
		return nil, nil // EOF before any byte: nothing to relay
	case err != nil && s.kind == streamUnknown && !errors.Is(err, errLongLine):
		return nil, err // the client went away or idled out
	}
	if d, ok := t.admitStream(s, err); !ok {
		t.refuse(d)
		return nil, errRefusedStream
	}
	return s.first, nil
}

// admitStream decides whether a passthrough tunnel may carry stream s (classified with
// error err), or returns the refusal.
func (t *tunnel) admitStream(s stream, err error) (policy.Decision, bool) {
	refusal := func(reason policy.Reason, detail string) (policy.Decision, bool) {
		return policy.Decision{Reason: reason, Rule: t.d.Rule, Host: t.host, Port: t.port, Detail: detail}, false
	}
	var he *helloError
	switch {
	case errors.As(err, &he):
		return refusal(policy.ReasonBadClientHello, "the tunnel's TLS bytes cannot be classified: "+he.reason)
	case err != nil && s.kind == streamTLS:
		return refusal(policy.ReasonBadClientHello, "the client's TLS ClientHello could not be read")
	case err != nil:
		return refusal(policy.ReasonUnknownProtocol, "the tunnel's first line is too long to classify")
	case s.kind == streamHTTP:
		return refusal(policy.ReasonTunnelHTTP, fmt.Sprintf(
			"cleartext HTTP in a tunnel to %q is not relayed unchecked; send http:// requests to the proxy in absolute form", t.host))
	case s.kind != streamTLS:
		return policy.Decision{}, true
	case !s.hasSNI:
		if h, err := policy.NormalizeHost(t.host); (err == nil && h.IsIP()) || t.d.AllowMissingSNI {
			return policy.Decision{}, true
		}
		return refusal(policy.ReasonSNIMissing, fmt.Sprintf(
			"the TLS ClientHello names no server (SNI) in a tunnel to %q; the upstream would pick the site (set allowMissingSNI on the rule to allow it)", t.host))
	}
	if h, err := policy.NormalizeHost(s.sni); err != nil || h.Name != t.host {
		return sniMismatch(t, s.sni), false
	}
	return policy.Decision{}, true
}

// sniMismatch is the denial of a TLS server name that differs from the tunnel's host.
func sniMismatch(t *tunnel, sni string) policy.Decision {
	return policy.Decision{Reason: policy.ReasonHostMismatch, Rule: t.d.Rule, Host: t.host, Port: t.port,
		Detail: fmt.Sprintf("TLS server name %q does not match tunnel host %q", sni, t.host)}
}

// hijackNotifier tells the head reader when goproxy hijacks the connection (CONNECT), so it
// stops looking for request heads, and hands back bytes net/http had buffered, which
// goproxy would otherwise drop.
type hijackNotifier struct {
	http.ResponseWriter
	hc *headConn
}

func (w *hijackNotifier) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.hc.passthrough()
	if n := rw.Reader.Buffered(); n > 0 {
		buffered, _ := rw.Reader.Peek(n)
		c = &prefixConn{Conn: c, r: io.MultiReader(strings.NewReader(string(buffered)), c)}
	}
	return c, rw, nil
}

func (w *hijackNotifier) Flush() {
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *hijackNotifier) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// prefixConn reads from r (bytes already taken from Conn, then Conn) and writes to Conn.
type prefixConn struct {
	net.Conn
	r io.Reader
}

func (c *prefixConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// CloseWrite half-closes the underlying connection when it can.
func (c *prefixConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// goproxyLogger sends goproxy's messages to the debug level: they carry no secrets, but are
// noisy and free-form.
type goproxyLogger struct{ l *logrus.Logger }

func (g goproxyLogger) Printf(format string, v ...any) {
	g.l.Debugf("goproxy: "+strings.TrimSpace(format), v...)
}

// logWriter sends net/http's error log to the debug level.
type logWriter struct{ l *logrus.Logger }

func (w logWriter) Write(b []byte) (int, error) {
	w.l.Debug(strings.TrimSpace(string(b)))
	return len(b), nil
}
