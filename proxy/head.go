package proxy

// net/http drops the Host header of an absolute-form request (RFC 9112 section 3.2.2 lets a
// proxy ignore it), but airlock refuses a request whose URL host and Host header disagree:
// an upstream behind a shared front end may route on either. So the explicit listener reads
// each request head itself, before net/http parses the same bytes, and hands the raw Host
// header to the handler. To know where the next head starts it follows the framing of
// simple requests (no body, or one Content-Length); after anything else (Transfer-Encoding,
// folded or conflicting headers) it stops reading heads and the response closes the
// connection.

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
)

var errHeadMalformed = errors.New("malformed request head")

// requestHead is what the explicit listener learns from a request head.
type requestHead struct {
	method  string
	target  string // request-target as sent
	host    string // the Host header, "" when absent
	hosts   int    // how many Host headers
	bodyLen int64  // body length; -1 when the framing is not a plain Content-Length (or none)
}

// parseHead parses the request head b, which must end with its blank line (see headEnd).
// It follows net/textproto: lines end in LF with an optional CR, header values are trimmed
// of spaces and tabs, names compare case-insensitively.
func parseHead(b []byte) (requestHead, error) {
	h := requestHead{}
	line, rest, _ := bytes.Cut(b, []byte("\n"))
	method, after, ok1 := bytes.Cut(bytes.TrimSuffix(line, []byte("\r")), []byte(" "))
	target, proto, ok2 := bytes.Cut(after, []byte(" "))
	if !ok1 || !ok2 || len(method) == 0 || len(target) == 0 || !bytes.HasPrefix(proto, []byte("HTTP/")) {
		return h, errHeadMalformed
	}
	h.method, h.target = string(method), string(target)
	var cl []byte
	clSeen, plain := false, true
	for len(rest) > 0 {
		line, rest, _ = bytes.Cut(rest, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' { // obs-fold: a continuation of the previous field
			plain = false
			continue
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return h, errHeadMalformed
		}
		value = bytes.Trim(value, " \t")
		switch {
		case bytes.EqualFold(name, []byte("Host")):
			h.hosts++
			if h.hosts == 1 {
				h.host = string(value)
			}
		case bytes.EqualFold(name, []byte("Content-Length")):
			if clSeen && !bytes.Equal(cl, value) {
				plain = false
			}
			cl, clSeen = value, true
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			plain = false
		}
	}
	h.bodyLen = bodyLength(plain, clSeen, cl)
	return h, nil
}

// bodyLength is the length a plain head frames, or -1.
func bodyLength(plain, clSeen bool, cl []byte) int64 {
	switch {
	case !plain:
		return -1
	case !clSeen:
		return 0
	}
	if len(cl) == 0 || len(cl) > 18 || bytes.ContainsFunc(cl, func(r rune) bool { return r < '0' || r > '9' }) {
		return -1
	}
	n, err := strconv.ParseInt(string(cl), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// headEnd returns the length of the head at the start of b (through its blank line), or -1
// when b holds no complete head. It searches from about index from, so a head arriving in
// many small reads is scanned once, not once per read.
func headEnd(b []byte, from int) int {
	for i := max(from-2, 0); i < len(b); i++ {
		if b[i] != '\n' {
			continue
		}
		switch {
		case i+1 < len(b) && b[i+1] == '\n':
			return i + 2
		case i+2 < len(b) && b[i+1] == '\r' && b[i+2] == '\n':
			return i + 3
		}
	}
	return -1
}

type headMode int

const (
	modeHead headMode = iota // the next bytes start a request head
	modeCopy                 // handing out the rest of a framed request (left bytes)
	modePass                 // no more heads: pass everything through
)

// headConn is a client connection of the explicit listener that reads each request head
// before net/http does.
type headConn struct {
	net.Conn
	max int    // the largest head it reads (net/http's MaxHeaderBytes plus its 4 KiB slack)
	buf []byte // bytes read from Conn and not yet handed out
	// store is buf's reusable backing array: a keep-alive connection reads every head into
	// the same memory instead of allocating per request.
	store []byte
	err   error // a read error to return once buf is drained
	// got is set once a byte has arrived: Close spares a connection whose first request
	// has begun (serveFirst).
	got atomic.Bool

	// io, once the connection passes its bytes through (a CONNECT taken by takeConnect),
	// reads and writes the socket below net (rawIO); nil: Conn's own Read and Write.
	io io.ReadWriter

	// mu guards mode, left and heads: handlers pop heads while a background read may be
	// parsing the next one.
	mu    sync.Mutex
	mode  headMode
	left  int64
	heads []requestHead
}

// Read hands out the connection's bytes, parsing each request head first.
func (c *headConn) Read(p []byte) (int, error) {
	if c.modeNow() == modeHead {
		if err := c.readHead(); err != nil {
			return 0, err
		}
	}
	c.mu.Lock()
	mode, left := c.mode, c.left
	c.mu.Unlock()
	if mode == modeCopy && int64(len(p)) > left {
		p = p[:left]
	}
	n, err := c.readBuffered(p)
	if mode == modeCopy {
		c.mu.Lock()
		if c.mode == modeCopy {
			if c.left -= int64(n); c.left == 0 {
				c.mode = modeHead
			}
		}
		c.mu.Unlock()
	}
	return n, err
}

func (c *headConn) modeNow() headMode {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mode
}

// readBuffered reads from buf, then err, then Conn.
func (c *headConn) readBuffered(p []byte) (int, error) {
	if len(c.buf) > 0 {
		n := copy(p, c.buf)
		if c.buf = c.buf[n:]; len(c.buf) == 0 {
			c.buf = c.store[:0]
		}
		return n, nil
	}
	if c.err != nil {
		err := c.err
		c.err = nil
		return 0, err
	}
	if c.io != nil {
		return c.io.Read(p)
	}
	return c.Conn.Read(p)
}

// Write writes to the connection (through io once it is set).
func (c *headConn) Write(p []byte) (int, error) {
	if c.io != nil {
		return c.io.Write(p)
	}
	return c.Conn.Write(p)
}

// readHead reads until buf holds a complete head and queues it. A timeout is returned (the
// server set the deadline, or aborts a background read) with the partial head kept; a
// malformed or oversized head, or any other error, switches to passing bytes through, and
// net/http answers the request with 400 or 431 or sees the error.
func (c *headConn) readHead() error {
	scanned := 0
	for {
		if end := headEnd(c.buf, scanned); end >= 0 {
			h, err := parseHead(c.buf[:end])
			if err != nil {
				c.passthrough()
				return nil
			}
			c.push(h, end)
			return nil
		}
		scanned = len(c.buf)
		if len(c.buf) >= c.max {
			c.passthrough()
			return nil
		}
		if cap(c.buf)-len(c.buf) == 0 {
			c.buf = c.room()
		}
		n, err := c.Conn.Read(c.buf[len(c.buf):cap(c.buf)])
		c.buf = c.buf[:len(c.buf)+n]
		if n > 0 && !c.got.Load() {
			c.got.Store(true)
		}
		if err != nil && n == 0 {
			if isTimeout(err) {
				return err
			}
			c.err = err
			c.passthrough()
			return nil
		}
	}
}

// room returns buf's bytes with free capacity after them: moved to the front of store when
// they leave room there, else in a store twice as large (up to max).
func (c *headConn) room() []byte {
	if len(c.buf) < cap(c.store) {
		return c.store[:copy(c.store[:cap(c.store)], c.buf)]
	}
	grown := make([]byte, len(c.buf), min(max(2*cap(c.store), 4096), c.max))
	copy(grown, c.buf)
	c.store = grown
	return grown
}

// push queues a parsed head of size bytes and frames what follows it.
func (c *headConn) push(h requestHead, size int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.heads = append(c.heads, h)
	if h.bodyLen < 0 {
		c.mode = modePass
		return
	}
	c.mode, c.left = modeCopy, int64(size)+h.bodyLen
}

// passthrough stops parsing heads: after a hijack (CONNECT) or a head it cannot frame.
func (c *headConn) passthrough() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mode = modePass
}

// pop returns the oldest head not yet claimed by a handler.
func (c *headConn) pop() (requestHead, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.heads) == 0 {
		return requestHead{}, false
	}
	h := c.heads[0]
	c.heads = c.heads[1:]
	return h, true
}

// rawTCP returns the TCP socket under c once c passes bytes through with none buffered, so
// reading the socket is reading c; else nil.
func (c *headConn) rawTCP() *net.TCPConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mode != modePass || len(c.buf) > 0 || c.err != nil {
		return nil
	}
	tc, _ := c.Conn.(*net.TCPConn)
	return tc
}

// CloseWrite half-closes the underlying connection when it can.
func (c *headConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
