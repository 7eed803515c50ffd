package proxy

// The HTTP/1.1 fast path. Requests inside intercepted TLS tunnels (and absolute-form http://
// requests to the explicit listener) are read, decided and forwarded here, below net/http:
// one goroutine per client connection reads a head in the strict subset (h1parse.go), runs it
// through the same stages as today's path (onRequest: names, decision, record; the
// exchange's RoundTrip: injection, the upstream, response scrubbing, respond), and writes the
// response itself. The upstream is one HTTP/1.1 connection of the client connection's own
// (h1upstream.go), never shared with another client.
//
// The choice is made per request, once: each head is parsed by the strict parser first, and
// the first head outside the subset (HTTP/1.0, Upgrade, Expect, obs-fold, bare LF, an
// oversized head, anything malformed, ...) hands the connection to net/http for the rest of
// its life, with every byte from that head on (nothing of it was consumed here). So a keep-
// alive connection whose third request needs net/http is served by both in turn, and no byte
// is ever parsed by both parsers: net/http answers a malformed head exactly as it always has.
// The only heads the fast path refuses itself are those whose framing is in doubt and which
// net/http would accept by normalising them (Content-Length with Transfer-Encoding, obs-fold,
// see ambiguousHead), with net/http's 400 answer and a close.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/elazarl/goproxy"
)

// Request paths of HTTP/1.x requests, the label of airlock_proxy_http1_requests_total.
const (
	pathStrict  = "strict"  // the fast path (this file)
	pathNetHTTP = "nethttp" // net/http's server and goproxy
)

// maxDrainBytes is how much of an unread request body is read and dropped to keep a
// connection after its response (net/http's server reads up to 256 KiB).
const maxDrainBytes = 256 << 10

// badRequest is net/http's answer to a request head it cannot read (server.go).
const badRequest = "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request"

// h1Conn is one client connection served by the fast path.
type h1Conn struct {
	p        *Proxy
	conn     net.Conn
	in       *connReader
	out      *bufio.Writer
	client   string
	absolute bool   // the explicit listener: absolute-form http:// targets
	scheme   string // inside a tunnel: the scheme of its requests
	// authority is the tunnel's host:port (tunnel.authority), made once for its requests.
	authority string
	tunnel    *tunnel
	up        *h1Upstream // the upstream of the connection's current origin
	idle      atomic.Bool // waiting for a request head to start
	draining  atomic.Bool // Shutdown asked for no more requests
	// armed says the idle deadline nextHead set on conn is still there: a request whose
	// head came whole with its first read leaves it (one deadline call per request instead
	// of three), and it is cleared (disarm) before anything else reads conn: a body, the
	// client watch, net/http after a hand-off.
	armed bool
}

// newH1Conn wraps conn, whose first bytes (already read) are prefix.
func (p *Proxy) newH1Conn(conn net.Conn, prefix []byte, client string) *h1Conn {
	// armed: whoever read the first bytes (the explicit listener's head read, the tunnel's
	// handshake) may have left a read deadline on conn; it must not bound a body.
	// The requests and responses go through rawIO: below net's Read and Write when conn is
	// the socket itself (the explicit listener's; a tunnel's TLS reaches its socket through
	// headConn's io).
	rw := rawIO(conn)
	return &h1Conn{p: p, conn: conn, in: newConnReader(rw, prefix), out: bufio.NewWriterSize(rw, 16<<10), client: client, armed: true}
}

// serve serves requests until the connection ends (false) or a head outside the subset
// hands it over (true): then rest is every byte read and not consumed, to be read first.
func (c *h1Conn) serve() (handOff bool, rest []byte) {
	stop := c.p.active.onDrain(func() {
		c.draining.Store(true)
		if c.idle.Load() {
			_ = c.conn.SetReadDeadline(time.Now()) // wake the wait for a head
		}
	})
	defer stop()
	defer func() {
		if c.up != nil {
			c.up.close()
		}
	}()
	for {
		head, err := c.nextHead()
		switch {
		case errors.Is(err, errHeadTooLarge):
			c.disarm()
			return true, c.in.buffered() // net/http answers 431
		case err != nil:
			return false, nil // gone, or idle too long: net/http closes these without an answer
		}
		req, verdict := parseRequestHead(head, c.absolute)
		if verdict == headHandOff && ambiguousHead(head) {
			verdict = headRefuse
		}
		switch verdict {
		case headHandOff:
			c.disarm()
			return true, c.in.buffered()
		case headRefuse:
			_, _ = io.WriteString(c.conn, badRequest)
			return false, nil
		}
		c.in.consume(len(head))
		if !c.serveRequest(req) {
			return false, nil
		}
	}
}

// nextHead waits up to IdleTimeout for the next request to start, and then up to the head
// timeout for its head.
func (c *h1Conn) nextHead() ([]byte, error) {
	limit := c.p.cfg.MaxHeaderBytes + 4096 // net/http's bound on a request head
	if end := headEnd(c.in.buffered(), 0); end >= 0 {
		return c.in.head(limit)
	}
	if len(c.in.buffered()) == 0 {
		if c.draining.Load() {
			return nil, ErrClosed
		}
		c.idle.Store(true)
		_ = c.conn.SetReadDeadline(time.Now().Add(c.p.cfg.IdleTimeout))
		c.armed = true
		err := c.in.fill(limit)
		c.idle.Store(false)
		if err != nil || c.draining.Load() && len(c.in.buffered()) == 0 {
			return nil, errors.Join(err, ErrClosed)
		}
		if headEnd(c.in.buffered(), 0) >= 0 {
			return c.in.head(limit) // whole: no read left to bound (the deadline stays armed)
		}
	}
	_ = c.conn.SetReadDeadline(time.Now().Add(c.p.cfg.headTimeout()))
	head, err := c.in.head(limit)
	_ = c.conn.SetReadDeadline(time.Time{})
	c.armed = false
	return head, err
}

// disarm clears the deadline nextHead left on the connection, before anything else reads it.
func (c *h1Conn) disarm() {
	if c.armed {
		_ = c.conn.SetReadDeadline(time.Time{})
		c.armed = false
	}
}

// serveRequest runs one request through today's stages with this connection's upstream and
// writes its response. It reports whether the connection may carry another request.
func (c *h1Conn) serveRequest(h h1Request) bool {
	r, body, err := c.request(h)
	if err != nil {
		_, _ = io.WriteString(c.conn, badRequest)
		return false
	}
	gctx := &goproxy.ProxyCtx{Req: r, Proxy: c.p.gp}
	r, resp := c.p.onRequest(r, gctx)
	if resp == nil {
		x, _ := gctx.RoundTripper.(*exchange)
		if x == nil { // cannot happen: onRequest sets it whenever it lets a request through
			_, _ = io.WriteString(c.conn, badRequest)
			return false
		}
		removeProxyHeaders(r)
		if body != nil {
			c.in.onBlock = c.flushUpstream
		}
		resp, _ = x.RoundTrip(r, gctx) // it answers every failure itself
		c.in.onBlock = nil
	}
	keep := !h.close && !c.draining.Load()
	if body != nil && !body.done && (h.bodyLen < 0 || h.bodyLen > maxDrainBytes || body.err != nil) {
		keep = false // the rest of an unread body is not worth reading
	}
	if !c.writeResponse(r, resp, keep) {
		return false
	}
	if keep && body != nil && !body.done {
		n, err := io.Copy(io.Discard, io.LimitReader(body, maxDrainBytes+1))
		return err == nil && n <= maxDrainBytes && body.done
	}
	return keep
}

// request builds the http.Request the stages take from a head in the subset, as net/http's
// server would, with its origin.
func (c *h1Conn) request(h h1Request) (*http.Request, *trackedBody, error) {
	u, err := url.ParseRequestURI(h.target)
	if err != nil {
		return nil, nil, fmt.Errorf("parse request target: %w", err)
	}
	r := http.Request{Method: h.method, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h.header, Host: h.host, RemoteAddr: c.client, RequestURI: h.target, Close: h.close,
		ContentLength: h.bodyLen, Body: http.NoBody}
	o := &origin{client: c.client, hostHeader: h.host, headKnown: true, tunnel: c.tunnel, path: pathStrict}
	if c.tunnel != nil {
		u.Scheme, u.Host = c.scheme, c.authority
		o.ups = c.tunnel.ups
		o.h1 = c.upstream(u.Host, func() *h1Upstream { return c.p.tunnelUpstream(c.tunnel, c.scheme) })
	} else {
		r.Host = u.Host // net/http: an absolute-form target overrides Host (RFC 9112 section 3.2.2)
		o.ups = c.p.explicit
		o.h1 = c.upstream(u.Host, func() *h1Upstream { return c.p.explicitUpstream() })
	}
	var body *trackedBody
	if h.bodyLen == 0 {
		o.watchClient = c.watchClient
	} else {
		c.disarm() // the body is read from conn
	}
	switch {
	case h.bodyLen < 0:
		r.TransferEncoding = []string{"chunked"}
		body = &trackedBody{r: &chunkedReader{r: c.in, maxTrailer: c.p.cfg.MaxHeaderBytes}}
	case h.bodyLen > 0:
		body = &trackedBody{r: &lengthReader{r: c.in, left: h.bodyLen}}
	}
	if body != nil {
		r.Body = body
	}
	return r.WithContext(withOrigin(context.Background(), o)), body, nil
}

// upstream returns the connection's upstream for origin key, replacing (and closing) the
// one of another origin: an upstream connection carries one client connection's requests
// to one origin.
func (c *h1Conn) upstream(key string, build func() *h1Upstream) *h1Upstream {
	if c.up != nil && c.up.key != key {
		c.up.close()
		c.up = nil
	}
	if c.up == nil {
		c.up = build()
		c.up.key = key
	}
	return c.up
}

// flushUpstream sends what was written to the upstream so far (connReader.onBlock).
func (c *h1Conn) flushUpstream() {
	if u := c.up; u != nil && u.out != nil && u.conn != nil && u.out.Buffered() > 0 {
		_ = u.out.Flush() // a failure shows in the next write
	}
}

// removeProxyHeaders drops what goproxy drops before forwarding (Proxy-* and Connection).
func removeProxyHeaders(r *http.Request) {
	r.RequestURI = ""
	for _, k := range []string{"Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization", "Connection"} {
		delete(r.Header, k)
	}
}

// responseExcluded are the response fields the fast path writes itself (framing and
// connection management) instead of relaying them.
var responseExcluded = map[string]bool{"Connection": true, "Keep-Alive": true, "Proxy-Connection": true,
	"Transfer-Encoding": true, "Trailer": true, "Content-Length": true}

// bodylessExcluded is responseExcluded for a response without a body: its Content-Length
// (of a HEAD or 304) is relayed.
var bodylessExcluded = map[string]bool{"Connection": true, "Keep-Alive": true, "Proxy-Connection": true,
	"Transfer-Encoding": true, "Trailer": true}

// writeResponse writes resp to the client and closes its body (which ends the exchange).
// The body goes with Content-Length when its length is known and it has no trailers, else
// chunked with its trailers. It reports whether the connection is still usable.
func (c *h1Conn) writeResponse(r *http.Request, resp *http.Response, keep bool) bool {
	defer resp.Body.Close()
	bodyless := r.Method == http.MethodHead || resp.StatusCode/100 == 1 ||
		resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified
	chunked := !bodyless && (resp.ContentLength < 0 || len(resp.Trailer) > 0)
	w := c.out
	w.WriteString("HTTP/1.1 ")
	w.Write(strconv.AppendInt(w.AvailableBuffer(), int64(resp.StatusCode), 10))
	w.WriteByte(' ')
	if text := http.StatusText(resp.StatusCode); text != "" {
		w.WriteString(text)
	} else {
		w.WriteString("status code " + strconv.Itoa(resp.StatusCode))
	}
	w.WriteString("\r\n")
	excluded := responseExcluded
	if bodyless {
		excluded = bodylessExcluded
	}
	_ = resp.Header.WriteSubset(w, excluded)
	if _, ok := resp.Header["Date"]; !ok {
		w.WriteString(dateField())
	}
	switch {
	case chunked:
		w.WriteString("Transfer-Encoding: chunked\r\n")
		writeTrailerNames(w, resp.Trailer)
	case !bodyless:
		w.WriteString("Content-Length: ")
		w.Write(strconv.AppendInt(w.AvailableBuffer(), resp.ContentLength, 10))
		w.WriteString("\r\n")
	}
	if !keep {
		w.WriteString("Connection: close\r\n")
	}
	w.WriteString("\r\n")
	if bodyless {
		return w.Flush() == nil && keep
	}
	return c.writeBody(resp, chunked) && keep
}

// dateLine is a Date field line and the second it names.
type dateLine struct {
	sec  int64
	line string
}

// lastDate is the Date field line made last: the responses of one second share it.
var lastDate atomic.Pointer[dateLine]

// dateField returns "Date: <now>\r\n" (as net/http's server writes it), formatted once a
// second rather than once a response.
func dateField() string {
	now := time.Now()
	if d := lastDate.Load(); d != nil && d.sec == now.Unix() {
		return d.line
	}
	d := &dateLine{sec: now.Unix(), line: "Date: " + now.UTC().Format(http.TimeFormat) + "\r\n"}
	lastDate.Store(d)
	return d.line
}

// writeTrailerNames announces the trailers known before the body.
func writeTrailerNames(w *bufio.Writer, trailer http.Header) {
	if len(trailer) == 0 {
		return
	}
	w.WriteString("Trailer: ")
	first := true
	for k := range trailer {
		if !first {
			w.WriteString(", ")
		}
		w.WriteString(k)
		first = false
	}
	w.WriteString("\r\n")
}

// writeBody copies resp's body to the client, flushing after every read (streams reach the
// client as they arrive). A body that ends early or breaks its framing leaves the response
// unfinished (no last chunk) and the connection unusable.
func (c *h1Conn) writeBody(resp *http.Response, chunked bool) bool {
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	buf := *bp
	w := c.out
	var written int64
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if chunked {
				w.WriteString(strconv.FormatInt(int64(n), 16))
				w.WriteString("\r\n")
			}
			w.Write(buf[:n])
			if chunked {
				w.WriteString("\r\n")
			}
			written += int64(n)
			if w.Flush() != nil {
				return false
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return false
		}
	}
	if !chunked {
		return written == resp.ContentLength && w.Flush() == nil
	}
	w.WriteString("0\r\n")
	for k, vs := range resp.Trailer {
		if responseExcluded[k] || bodylessExcluded[k] {
			continue
		}
		for _, v := range vs {
			w.WriteString(k + ": " + headerValueReplacer.Replace(v) + "\r\n")
		}
	}
	w.WriteString("\r\n")
	return w.Flush() == nil
}

// watchClient watches the client's connection while a request (with nothing of it left to
// read) is held (clientWatch): the held context ends when the client goes. Bytes that arrive
// instead (a pipelined request) are kept for the next head. stop ends the watch and waits
// for it.
func (c *h1Conn) watchClient(ctx context.Context) (held context.Context, stop func()) {
	c.disarm()
	w := watchClient(ctx, c.conn, c.conn)
	return w.ctx, func() { c.in.appendRead(w.stop()) }
}
