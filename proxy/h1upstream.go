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
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/airlock-dev/airlock/policy"
)

// max1xx is how many informational responses may precede a final one (net/http's Transport
// allows 5).
const max1xx = 5

// errStale is a kept-alive upstream connection found closed by its server before it
// answered: a request that can be replayed is sent again on a new connection.
var errStale = errors.New("upstream connection closed before the response")

// headerValueReplacer keeps a value on its line (as net/http's Header.Write does).
var headerValueReplacer = strings.NewReplacer("\r", " ", "\n", " ", "\x00", " ")

// h1Upstream is the HTTP/1.1 upstream of one client connection of the fast path: one
// connection at a time, to one origin, dialled through the guard under the policy of the
// request it first carried, and replaced when a request of another policy comes (as the
// transports of upstreams.get are). It is used by one goroutine.
type h1Upstream struct {
	p       *Proxy
	key     string // the origin it reaches (host:port)
	dial    func(ctx context.Context, x *exchange) (net.Conn, error)
	tlsName string // the server name for TLS; "" speaks clear text

	conn   net.Conn
	in     *connReader
	out    *bufio.Writer
	pol    *policy.Policy // the policy conn was dialled under
	addr   string         // the address dialled
	usable bool           // conn may carry another request
}

// tunnelUpstream is the upstream of an intercepted tunnel: its checked addresses only.
func (p *Proxy) tunnelUpstream(t *tunnel, scheme string) *h1Upstream {
	u := &h1Upstream{p: p, dial: func(ctx context.Context, x *exchange) (net.Conn, error) {
		return t.dialPinned(ctx, x, t.host, t.port)
	}}
	if scheme == "https" {
		u.tlsName = t.host
	}
	return u
}

// explicitUpstream is the upstream of an absolute-form http:// request: the name resolved
// once and checked under the request's policy.
func (p *Proxy) explicitUpstream() *h1Upstream {
	dial := p.dialResolved(netip.Addr{})
	return &h1Upstream{p: p, dial: func(ctx context.Context, x *exchange) (net.Conn, error) {
		return dial(ctx, x, x.host, x.port)
	}}
}

// RoundTrip sends r (whose context holds its exchange) and returns the response head with
// a body that reads from the upstream. A kept-alive connection its server closed is replaced
// once for a request without a body.
func (u *h1Upstream) RoundTrip(r *http.Request) (*http.Response, error) {
	x := exchangeFrom(r.Context())
	if x == nil {
		return nil, errNoExchange
	}
	if u.conn != nil && (u.pol != x.pol || !u.usable || len(u.in.buffered()) > 0 || !replayable(r) && !idleConnAlive(u.conn)) {
		u.close() // dialled under another policy, left in doubt (extra bytes), or closed by its server
	}
	for retried := false; ; retried = true {
		reused := u.conn != nil
		if !reused {
			if err := u.connect(r.Context(), x); err != nil {
				return nil, err
			}
		}
		x.mu.Lock()
		x.addr = u.addr
		x.mu.Unlock()
		resp, err := u.exchange(r, reused)
		if err == nil {
			return resp, nil
		}
		u.close()
		if !errors.Is(err, errStale) || retried || !replayable(r) {
			return nil, err
		}
	}
}

// replayable reports whether r may be sent again after its connection turned out closed:
// no body, and a method that is safe to repeat (as net/http's Transport decides).
func replayable(r *http.Request) bool {
	if r.Body != nil && r.Body != http.NoBody {
		return false
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, key := r.Header["Idempotency-Key"]
	_, xkey := r.Header["X-Idempotency-Key"]
	return key || xkey
}

// connect dials the origin (and shakes hands with it over TLS, verifying its certificate).
// For a request with nothing left to read of it, the client's leaving ends the dial.
func (u *h1Upstream) connect(ctx context.Context, x *exchange) error {
	if x.o.watchClient != nil {
		held, stop := x.o.watchClient(ctx)
		defer stop()
		ctx = held
	}
	c, err := u.dial(ctx, x)
	if err != nil {
		return err
	}
	cc, _ := c.(*checkedConn)
	if cc != nil {
		u.addr = cc.addr.String()
	}
	rw := upstreamIO(c)
	if u.tlsName != "" {
		tc := tls.Client(&ioConn{Conn: c, rw: rw}, &tls.Config{RootCAs: u.p.cfg.UpstreamRoots, MinVersion: tls.VersionTLS12, ServerName: u.tlsName})
		hctx, cancel := context.WithTimeout(ctx, u.p.cfg.DialTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			_ = c.Close()
			return fmt.Errorf("upstream TLS handshake: %w", err)
		}
		c, rw = tc, tc
	}
	u.conn, u.pol, u.usable = c, x.pol, true
	u.in = newConnReader(rw, nil)
	if u.out == nil {
		u.out = bufio.NewWriterSize(rw, 16<<10)
	} else {
		u.out.Reset(rw)
	}
	return nil
}

// upstreamIO is the reader and writer of an upstream connection: rawIO of its socket when it
// is one the guard checked, else the connection itself.
func upstreamIO(c net.Conn) io.ReadWriter {
	if cc, ok := c.(*checkedConn); ok {
		return rawIO(cc.Conn)
	}
	return c
}

// ioConn is a connection whose Read and Write go through rw (upstreamIO), for crypto/tls.
type ioConn struct {
	net.Conn
	rw io.ReadWriter
}

func (c *ioConn) Read(p []byte) (int, error)  { return c.rw.Read(p) }
func (c *ioConn) Write(p []byte) (int, error) { return c.rw.Write(p) }

// exchange writes r and reads the response head, skipping informational responses.
func (u *h1Upstream) exchange(r *http.Request, reused bool) (*http.Response, error) {
	if err := validHeader(r.Header); err != nil {
		return nil, err
	}
	var rec *trackedBody
	if r.Body != nil && r.Body != http.NoBody {
		rec = &trackedBody{r: r.Body}
		r.Body = struct {
			io.Reader
			io.Closer
		}{rec, r.Body}
	}
	// Not the *bufio.Writer itself: Request.Write would flush it after every chunk of a
	// chunked body (one write per chunk); connReader.onBlock flushes when the client's
	// bytes run out instead.
	var err error
	if !writeBodylessHead(u.out, r) {
		err = r.Write(unflushed{u.out})
	}
	if err == nil {
		err = u.out.Flush()
	}
	if err != nil {
		if rec != nil && rec.err != nil {
			return nil, rec.err // the client's body failed: its error decides the answer
		}
		if reused && (rec == nil || !rec.done) && isStale(err) {
			return nil, fmt.Errorf("write request: %w: %w", errStale, err)
		}
		return nil, fmt.Errorf("write request: %w", err)
	}
	_ = u.conn.SetReadDeadline(time.Now().Add(u.p.cfg.ResponseHeaderTimeout))
	defer u.conn.SetReadDeadline(time.Time{}) //nolint:errcheck // best effort
	for n := 0; ; n++ {
		head, err := u.in.head(u.p.cfg.MaxHeaderBytes)
		if err != nil {
			if reused && n == 0 && len(u.in.buffered()) == 0 && isStale(err) {
				return nil, fmt.Errorf("read response: %w: %w", errStale, err)
			}
			return nil, fmt.Errorf("read response head: %w", err)
		}
		h, err := parseResponseHead(head)
		if err != nil {
			return nil, err
		}
		u.in.consume(len(head))
		switch {
		case h.status == http.StatusSwitchingProtocols:
			// Never asked for (Upgrade goes to net/http): the exchange refuses it as
			// net/http's path does (upgrade_unsupported), and the connection is closed.
			h.close = true
			return u.response(r, h), nil
		case h.status/100 == 1:
			if n >= max1xx {
				return nil, fmt.Errorf("more than %d informational responses: %w", max1xx, errFraming)
			}
			continue
		}
		return u.response(r, h), nil
	}
}

// validHeader refuses a request whose fields could not go on the wire as they are (a value
// holding CR, LF or NUL, an injected credential among them), as net/http's Transport does
// before it writes: Request.Write alone would turn CR and LF into spaces and pass NUL.
// The error names the field, never its value.
func validHeader(h http.Header) error {
	for k, vs := range h {
		if !httpguts.ValidHeaderFieldName(k) {
			return fmt.Errorf("net/http: invalid header field name %q", k)
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return fmt.Errorf("net/http: invalid header field value for %q", k)
			}
		}
	}
	return nil
}

// requestExcluded are the fields Request.Write writes itself or leaves out
// (net/http's reqWriteExcludeHeader).
var requestExcluded = map[string]bool{"Host": true, "User-Agent": true, "Content-Length": true,
	"Transfer-Encoding": true, "Trailer": true}

// writeBodylessHead writes r as Request.Write would when r is a GET or HEAD without a body,
// trailer or Connection: close, to an ASCII host without a zone: the bytes are the same
// (TestWriteBodylessHeadSameAsRequestWrite), without the transfer writer, the formatting and
// their allocations of every request. It reports false, having written nothing, for any
// other request: Request.Write writes those.
func writeBodylessHead(w *bufio.Writer, r *http.Request) bool {
	if (r.Method != http.MethodGet && r.Method != http.MethodHead) || (r.Body != nil && r.Body != http.NoBody) ||
		r.ContentLength != 0 || r.Close || r.Trailer != nil || r.TransferEncoding != nil || r.URL == nil || r.URL.Opaque != "" {
		return false
	}
	host := r.Host
	if host == "" {
		host = r.URL.Host
	}
	if !plainASCII(host) || strings.IndexByte(host, '%') >= 0 || !httpguts.ValidHostHeader(host) {
		return false
	}
	uri := r.URL.RequestURI()
	if !plainASCII(uri) {
		return false
	}
	ua := "Go-http-client/1.1" // net/http's default
	if _, ok := r.Header["User-Agent"]; ok {
		ua = r.Header.Get("User-Agent")
	}
	w.WriteString(r.Method)
	w.WriteByte(' ')
	w.WriteString(uri)
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(host)
	w.WriteString("\r\n")
	if ua != "" { // as Request.Write: an agent of white space only is written, empty
		w.WriteString("User-Agent: ")
		w.WriteString(strings.Trim(headerNewlineToSpace.Replace(ua), " \t\r\n"))
		w.WriteString("\r\n")
	}
	_ = r.Header.WriteSubset(w, requestExcluded) // a failure shows in the flush
	w.WriteString("\r\n")
	return true
}

// headerNewlineToSpace is net/http's replacement of CR and LF in a User-Agent.
var headerNewlineToSpace = strings.NewReplacer("\n", " ", "\r", " ")

// plainASCII reports whether s holds printable ASCII only (no control byte, no byte above
// 0x7e): what Request.Write takes as it is.
func plainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// unflushed hides a *bufio.Writer's type from Request.Write (see exchange). It has no
// ReadFrom on purpose: bufio.Writer.ReadFrom reads the body into the writer's own buffer,
// and connReader.onBlock flushing that buffer in the middle of the read would corrupt it;
// Request.Write copies through a buffer of its own instead.
type unflushed struct{ w *bufio.Writer }

func (u unflushed) Write(p []byte) (int, error)       { return u.w.Write(p) }
func (u unflushed) WriteByte(c byte) error            { return u.w.WriteByte(c) }
func (u unflushed) WriteString(s string) (int, error) { return u.w.WriteString(s) }

// isStale reports whether err is the end of a connection its server closed.
func isStale(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE)
}

// response builds the http.Response of head h, with a body framed as RFC 9112 section 6.3
// says.
func (u *h1Upstream) response(r *http.Request, h h1Response) *http.Response {
	resp := &http.Response{Status: statusString(h.status), StatusCode: h.status,
		Proto: h.proto, ProtoMajor: 1, ProtoMinor: 1, Header: h.header, ContentLength: h.cl, Request: r,
		Close: h.close || r.Close}
	if h.proto == "HTTP/1.0" {
		resp.ProtoMinor = 0
	}
	for _, v := range h.header["Trailer"] {
		for _, k := range strings.Split(v, ",") {
			if k = strings.TrimSpace(k); k != "" {
				if resp.Trailer == nil {
					resp.Trailer = make(http.Header)
				}
				resp.Trailer[http.CanonicalHeaderKey(k)] = nil
			}
		}
	}
	delete(h.header, "Trailer") // as net/http: the names are resp.Trailer's keys
	b := &upstreamBody{u: u, resp: resp}
	switch {
	case r.Method == http.MethodHead || h.status/100 == 1 || h.status == http.StatusNoContent || h.status == http.StatusNotModified:
		b.r, b.done = eofReader{}, true
		if r.Method != http.MethodHead {
			resp.ContentLength = 0
		}
	case h.te:
		resp.TransferEncoding = []string{"chunked"}
		b.r = &chunkedReader{r: u.in, trailer: &resp.Trailer, maxTrailer: u.p.cfg.MaxHeaderBytes}
	case h.cl >= 0:
		b.lr = lengthReader{r: u.in, left: h.cl}
		b.r = &b.lr // one allocation with the body
		if h.cl == 0 {
			b.done = true
		}
	default: // delimited by the connection's close
		resp.Close = true
		b.r = u.in
	}
	resp.Body = b
	return resp
}

// statusStrings are http.Response.Status of the codes net/http names, made once.
var statusStrings = func() map[int]string {
	m := make(map[int]string)
	for code := 100; code < 600; code++ {
		if text := http.StatusText(code); text != "" {
			m[code] = strconv.Itoa(code) + " " + text
		}
	}
	return m
}()

// statusString is http.Response.Status for code ("999 " for a code without a name, as
// net/http's client makes it).
func statusString(code int) string {
	if s, ok := statusStrings[code]; ok {
		return s
	}
	return strconv.Itoa(code) + " " + http.StatusText(code)
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// upstreamBody is a response body read from the upstream connection. Closing it before its
// end, or after a response that closes the connection, closes the connection; bytes waiting
// after its end (an upstream sending more than it framed) do too.
type upstreamBody struct {
	u    *h1Upstream
	resp *http.Response
	r    io.Reader
	lr   lengthReader // r for a Content-Length body
	done bool
	err  error
}

func (b *upstreamBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.r.Read(p)
	switch {
	case err == io.EOF:
		b.done = true
	case err != nil:
		b.err = err
	}
	return n, err
}

func (b *upstreamBody) Close() error {
	u := b.u
	if u.conn == nil {
		return nil
	}
	if !b.done || b.resp.Close || len(u.in.buffered()) > 0 {
		u.close()
	}
	return nil
}

// close closes the upstream connection; the next request dials a new one.
func (u *h1Upstream) close() {
	if u.conn != nil {
		_ = u.conn.Close()
	}
	u.conn, u.in, u.usable = nil, nil, false
}

// idleConnAlive reports whether an idle upstream connection can carry a request: its server
// has neither closed it nor sent anything unasked (a peek that does not wait, one system
// call). net/http's Transport learns the same from the read goroutine it keeps on every
// connection; a request that is not replayable (a body, or a method not safe to repeat)
// could not be sent again after finding out the hard way, so it is checked first (a
// replayable one is simply sent again, RoundTrip). A connection that is no TCP socket
// (through an upstream proxy) is taken as alive.
func idleConnAlive(c net.Conn) bool {
	for {
		switch cc := c.(type) {
		case *tls.Conn:
			c = cc.NetConn()
			continue
		case *checkedConn:
			c = cc.Conn
			continue
		case *ioConn:
			c = cc.Conn
			continue
		}
		break
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		alive = errors.Is(err, syscall.EAGAIN) // nothing to read: neither bytes nor the end
		return true                            // never wait for readiness
	})
	return err == nil && alive
}
