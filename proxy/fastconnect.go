package proxy

// The CONNECT fast path. Most connections to the explicit listener carry one CONNECT and
// then the tunnel's bytes; net/http's server and goproxy add a connection state machine, a
// background reader, a hijack and deep stacks to every one of them (about a tenth of the
// proxy's CPU per tunnel, measured with the bench's new-tunnels leg). So the listener reads
// the first request head of each connection itself (it already reads every head, see
// head.go) and, when that head is a CONNECT in the plain form below, serves the tunnel from
// here, through the same stages as a CONNECT that came through goproxy (runConnect).
// Everything else (absolute-form requests, heads in any other form, a CONNECT after another
// request) goes to net/http with the bytes read so far, exactly as before.
//
// The plain form is a strict subset of what net/http accepts, chosen so that net/http would
// parse it to the same target and request id and accept it without an error answer:
//
//	"CONNECT" SP target SP ("HTTP/1.1" / "HTTP/1.0") [CR] LF
//	*( token ":" *(HTAB / SP / VCHAR) [CR] LF )
//	[CR] LF
//
// target is a host of letters, digits, "-", "." and "_", or an IPv6 address (not an IPv4
// one) in brackets, with an optional ":" and decimal port; at most one Host header, of the characters a
// target may hold; no Content-Length, Transfer-Encoding or Expect header (net/http frames
// or answers those). TestFastConnectMatchesNetHTTP and FuzzParseConnect hold parseConnect
// to net/http's parser; TestFastConnectSameAnswers sends the same heads through both
// paths.

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"time"
)

// maxConnectTarget bounds the target of a fast-path CONNECT: a DNS name (253 bytes), a
// port and brackets fit; a longer one goes to net/http.
const maxConnectTarget = 300

// connectHead is what the fast path needs from a plain CONNECT head.
type connectHead struct {
	target string // the request-target, which net/http would put in URL.Host
	reqID  string // the first X-Request-Id value (requestIDFrom decides whether to use it)
	hasID  bool   // an X-Request-Id header was present
}

// parseConnect parses head (a complete request head, through its blank line) when it is a
// CONNECT in the plain form; ok is false for anything else.
func parseConnect(head []byte) (ch connectHead, ok bool) {
	line, rest, found := cutLine(head)
	if !found {
		return ch, false
	}
	line, found = bytes.CutPrefix(line, []byte("CONNECT "))
	target, proto, cut := bytes.Cut(line, []byte(" "))
	if !found || !cut || (string(proto) != "HTTP/1.1" && string(proto) != "HTTP/1.0") || !plainTarget(target) {
		return ch, false
	}
	hosts := 0
	for {
		line, rest, found = cutLine(rest)
		if !found {
			return ch, false
		}
		if len(line) == 0 {
			break
		}
		name, value, found := bytes.Cut(line, []byte(":"))
		if !found || !plainName(name) || !plainValue(value) {
			return ch, false
		}
		value = bytes.Trim(value, " \t")
		switch {
		case bytes.EqualFold(name, []byte("Host")):
			if hosts++; hosts > 1 || !plainHostHeader(value) {
				return ch, false
			}
		case bytes.EqualFold(name, []byte("Content-Length")), bytes.EqualFold(name, []byte("Transfer-Encoding")),
			bytes.EqualFold(name, []byte("Expect")):
			return ch, false
		case bytes.EqualFold(name, []byte(headerRequestID)) && !ch.hasID:
			ch.reqID, ch.hasID = string(value), true
		}
	}
	if len(rest) != 0 {
		return ch, false
	}
	ch.target = string(target)
	return ch, true
}

// cutLine splits the first line off b: the line without its LF and an optional CR before
// it, and what follows. found is false when b holds no LF.
func cutLine(b []byte) (line, rest []byte, found bool) {
	line, rest, found = bytes.Cut(b, []byte("\n"))
	return bytes.TrimSuffix(line, []byte("\r")), rest, found
}

// plainTarget reports whether t is host[:port] in the plain form (see the file comment).
func plainTarget(t []byte) bool {
	if len(t) == 0 || len(t) > maxConnectTarget {
		return false
	}
	var port []byte
	if t[0] == '[' {
		// net/url takes only an IPv6 address in brackets (RFC 3986 section 3.2.2).
		end := bytes.IndexByte(t, ']')
		if end < 0 || !allBytes(t[1:end], isIPv6Byte) {
			return false
		}
		if a, err := netip.ParseAddr(string(t[1:end])); err != nil || a.Is4() {
			return false
		}
		port = t[end+1:]
	} else {
		host := t
		if i := bytes.IndexByte(t, ':'); i >= 0 {
			host, port = t[:i], t[i:]
		}
		if len(host) == 0 || !allBytes(host, isNameByte) {
			return false
		}
	}
	if len(port) == 0 {
		return true
	}
	return port[0] == ':' && len(port) > 1 && allBytes(port[1:], isDigit)
}

// plainHostHeader reports whether a Host header value is made of the bytes a plain target
// may hold (net/http checks the header's syntax on a CONNECT too).
func plainHostHeader(v []byte) bool {
	return allBytes(v, func(c byte) bool { return isNameByte(c) || isIPv6Byte(c) || c == '[' || c == ']' })
}

// plainName reports whether a header name is a non-empty token (RFC 9110 section 5.6.2).
func plainName(b []byte) bool {
	return len(b) > 0 && allBytes(b, func(c byte) bool {
		return c < 0x80 && (isNameByte(c) || bytes.IndexByte([]byte("!#$%&'*+^`|~"), c) >= 0)
	})
}

// plainValue reports whether a header value holds only HTAB, SP and visible ASCII.
func plainValue(b []byte) bool {
	return allBytes(b, func(c byte) bool { return c == '\t' || (c >= ' ' && c < 0x7f) })
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || isDigit(c) || c == '-' || c == '.' || c == '_'
}

func isIPv6Byte(c byte) bool {
	return isDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' || c == ':' || c == '.'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func allBytes(b []byte, ok func(byte) bool) bool {
	for _, c := range b {
		if !ok(c) {
			return false
		}
	}
	return true
}

// serveFirst reads the first request head of a new explicit connection and serves it: a
// plain CONNECT here, anything else through net/http (hand). Until the head is complete the
// connection is tracked for Shutdown, and Close closes it if no byte of it has arrived (as
// net/http does with a new idle connection).
func (p *Proxy) serveFirst(hc *headConn, hand func(net.Conn) bool) {
	e := p.active.addFresh(hc)
	defer p.active.remove(e)
	defer func() {
		// As net/http does for a handler: a bug ends this connection, not the sidecar.
		if v := recover(); v != nil {
			_ = hc.Close()
			buf := make([]byte, 64<<10)
			buf = buf[:runtime.Stack(buf, false)]
			p.errorLog.Printf("http: panic serving %v: %v\n%s", hc.RemoteAddr(), v, buf)
		}
	}()
	_ = hc.SetReadDeadline(time.Now().Add(p.cfg.headTimeout()))
	if err := hc.readHead(); err != nil {
		// The head did not arrive in time: net/http closes such a connection unanswered.
		_ = hc.Close()
		return
	}
	var ch connectHead
	ok := false
	if !p.slowConnect.Load() {
		ch, ok = hc.takeConnect()
	}
	if !ok && !p.cfg.DisableHTTP1FastPath {
		raw, buf, v := hc.takeRequest()
		switch v {
		case headStrict:
			p.serveExplicitH1(raw, buf, hc.max, hand)
			return
		case headRefuse:
			_, _ = io.WriteString(hc, badRequest)
			_ = hc.Close()
			return
		}
	}
	if !ok {
		if !hand(hc) {
			_ = hc.Close() // the proxy closed while the head was being read
		}
		return
	}
	_ = hc.SetReadDeadline(time.Time{})
	p.runConnect(hc, ch.target, requestIDFrom(ch.reqID, ch.hasID))
}

// takeConnect returns the connection's first head when it is a plain CONNECT (parseConnect)
// and nothing else was queued; the head's bytes are consumed and the connection passes
// every later byte through as tunnel bytes (bytes sent after the head, already read, come
// first).
func (c *headConn) takeConnect() (connectHead, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.heads) != 1 || c.mode != modeCopy || c.heads[0].method != "CONNECT" || c.heads[0].bodyLen != 0 ||
		c.left > int64(len(c.buf)) {
		return connectHead{}, false
	}
	ch, ok := parseConnect(c.buf[:c.left])
	if !ok {
		return connectHead{}, false
	}
	c.buf = c.buf[c.left:]
	c.heads, c.left, c.mode = c.heads[:0], 0, modePass
	c.io = rawIO(c.Conn)
	return ch, true
}

// headListener wraps the explicit listener's connections in headConns. A goroutine per
// connection (Proxy.serveFirst) reads its first head; Accept returns the connections that
// go on to net/http.
type headListener struct {
	net.Listener
	max    int
	handed chan net.Conn // connections for net/http
	fatal  chan error    // the listener's error that ends Serve
	done   chan struct{} // closed by Close
	once   sync.Once
}

func newHeadListener(l net.Listener, maxHead int) *headListener {
	return &headListener{Listener: l, max: maxHead, handed: make(chan net.Conn), fatal: make(chan error, 1),
		done: make(chan struct{})}
}

// Accept returns the next connection for net/http.
func (l *headListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.handed:
		return c, nil
	case err := <-l.fatal:
		return nil, err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// hand passes c to net/http; false when the listener was closed first.
func (l *headListener) hand(c net.Conn) bool {
	select {
	case l.handed <- c:
		return true
	case <-l.done:
		return false
	}
}

// Close closes the listener; Accept returns net.ErrClosed from then on. It is idempotent.
func (l *headListener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		err = l.Listener.Close()
	})
	return err
}

// acceptExplicit accepts connections on hl until it is closed, and starts serveFirst for
// each. A failed Accept backs off as net/http does; the listener's closing ends the loop
// and Serve.
func (p *Proxy) acceptExplicit(hl *headListener) {
	var delay time.Duration
	for {
		c, err := hl.Listener.Accept()
		if err != nil {
			select {
			case <-hl.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				hl.fatal <- err
				return
			}
			// Out of file descriptors and the like: back off (as ServeTransparent).
			delay = min(max(2*delay, 5*time.Millisecond), maxAcceptDelay)
			p.cfg.Logger.WithError(err).Warn("explicit proxy: accept failed; retrying")
			select {
			case <-time.After(delay):
			case <-hl.done:
				return
			}
			continue
		}
		delay = 0
		go p.serveFirst(&headConn{Conn: c, max: hl.max}, hl.hand)
	}
}

// requestIDFrom is requestID for a head whose X-Request-Id, when present, is id.
func requestIDFrom(id string, present bool) string {
	if present && id != "" && len(id) <= maxRequestID && printable(id) {
		return id
	}
	return requestID(nil)
}

// takeRequest returns the connection and every byte read from it (headStrict) when its
// first head is an absolute-form request in the fast path's subset (parseRequestHead) and
// nothing went wrong reading it; the headConn gives them up. headRefuse is a head to refuse
// (ambiguous framing); headHandOff leaves the connection to net/http.
func (c *headConn) takeRequest() (net.Conn, []byte, headVerdict) {
	c.mu.Lock()
	defer c.mu.Unlock()
	end := headEnd(c.buf, 0)
	if len(c.heads) != 1 || c.err != nil || end < 0 {
		return nil, nil, headHandOff
	}
	switch _, v := parseRequestHead(c.buf[:end], true); {
	case v == headRefuse || v == headHandOff && ambiguousHead(c.buf[:end]):
		return nil, nil, headRefuse
	case v == headHandOff:
		return nil, nil, headHandOff
	}
	buf := c.buf
	c.buf, c.store, c.heads, c.mode = nil, nil, nil, modePass
	return c.Conn, buf, headStrict
}

// serveExplicitH1 serves an explicit connection whose first head is in the fast path's
// subset (buf: the bytes read so far) and hands it to net/http (hand) at the first head
// that is not, with the bytes from that head on.
func (p *Proxy) serveExplicitH1(raw net.Conn, buf []byte, maxHead int, hand func(net.Conn) bool) {
	c := p.newH1Conn(raw, buf, raw.RemoteAddr().String())
	c.absolute = true
	handOff, rest := c.serve()
	if !handOff {
		_ = raw.Close()
		return
	}
	next := &headConn{Conn: raw, max: maxHead, buf: bytes.Clone(rest)}
	next.got.Store(true)
	if !hand(next) {
		_ = raw.Close()
	}
}
