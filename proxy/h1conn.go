package proxy

import (
	"errors"
	"fmt"
	"io"
)

// connReader buffers one connection (a client's or an upstream's) for the strict grammar:
// heads are found in the buffer (which grows up to the head limit), bodies are read from
// the buffer and then straight from the connection.
type connReader struct {
	c    io.Reader // the connection (or rawIO of it)
	buf  []byte
	r, w int
	// onBlock, when set, runs before a read that may wait for the connection: while a
	// request body is forwarded, it flushes what was written upstream so far, so a body
	// that arrives at once goes out in one write and a body that trickles in still streams.
	onBlock func()
}

func newConnReader(c io.Reader, prefix []byte) *connReader {
	b := &connReader{c: c, buf: make([]byte, max(4096, len(prefix)))}
	b.w = copy(b.buf, prefix)
	return b
}

// buffered is what was read and not yet consumed.
func (b *connReader) buffered() []byte { return b.buf[b.r:b.w] }

// appendRead adds p, read from the connection by someone else (clientWatch), after the
// buffered bytes.
func (b *connReader) appendRead(p []byte) {
	if len(p) == 0 {
		return
	}
	rest := b.buffered()
	buf := make([]byte, max(len(b.buf), len(rest)+len(p)))
	n := copy(buf, rest)
	n += copy(buf[n:], p)
	b.buf, b.r, b.w = buf, 0, n
}

// consume drops n buffered bytes.
func (b *connReader) consume(n int) {
	if b.r += n; b.r == b.w {
		b.r, b.w = 0, 0
	}
}

// fill reads once more from the connection, making room (up to limit bytes buffered) first.
// It returns errHeadTooLarge when limit bytes are buffered already.
func (b *connReader) fill(limit int) error {
	if b.w == len(b.buf) {
		n := b.w - b.r
		switch {
		case b.r > 0:
			copy(b.buf, b.buf[b.r:b.w])
		case n >= limit:
			return errHeadTooLarge
		default:
			grown := make([]byte, min(2*len(b.buf), limit))
			copy(grown, b.buf[b.r:b.w])
			b.buf = grown
		}
		b.r, b.w = 0, n
	}
	if b.onBlock != nil {
		b.onBlock()
	}
	n, err := b.c.Read(b.buf[b.w:])
	b.w += n
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// head returns the next head in the buffer (through its blank line, where net/http's reader
// would end it, see headEnd), reading until it is complete. It is not consumed. More than
// limit bytes without the end of a head is errHeadTooLarge.
func (b *connReader) head(limit int) ([]byte, error) {
	scanned := 0
	for {
		if end := headEnd(b.buffered(), scanned); end >= 0 {
			if end > limit {
				return nil, errHeadTooLarge
			}
			return b.buf[b.r : b.r+end], nil
		}
		scanned = b.w - b.r
		if scanned >= limit {
			return nil, errHeadTooLarge
		}
		if err := b.fill(limit + 4); err != nil {
			return nil, err
		}
	}
}

// readLine returns the next line without its CRLF, consumed; a line longer than max, or
// ending in a bare LF or holding a CR, is errFraming.
func (b *connReader) readLine(max int) ([]byte, error) {
	scanned := 0
	for {
		buf := b.buffered()
		if i := indexFrom(buf, scanned, '\n'); i >= 0 {
			line, _, ok := cutCRLF(buf[:i+1])
			if !ok || len(line) > max {
				return nil, fmt.Errorf("line %q: %w", truncate(buf[:i]), errFraming)
			}
			b.consume(i + 1)
			return line, nil
		}
		scanned = len(buf)
		if scanned > max+2 {
			return nil, fmt.Errorf("line longer than %d bytes: %w", max, errFraming)
		}
		if err := b.fill(max + 2); err != nil {
			if errors.Is(err, errHeadTooLarge) {
				return nil, fmt.Errorf("line longer than %d bytes: %w", max, errFraming)
			}
			return nil, err
		}
	}
}

func indexFrom(b []byte, from int, c byte) int {
	for i := from; i < len(b); i++ {
		if b[i] == c {
			return i
		}
	}
	return -1
}

// Read reads buffered bytes, then from the connection.
func (b *connReader) Read(p []byte) (int, error) {
	if b.r < b.w {
		n := copy(p, b.buf[b.r:b.w])
		b.consume(n)
		return n, nil
	}
	if b.onBlock != nil {
		b.onBlock()
	}
	return b.c.Read(p)
}

// lengthReader reads exactly n bytes of a Content-Length body; the connection ending
// earlier is io.ErrUnexpectedEOF, not a short body.
type lengthReader struct {
	r    io.Reader
	left int64
}

func (l *lengthReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	switch {
	case l.left == 0:
		return n, io.EOF
	case err == io.EOF:
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

// trackedBody is a request or response body that remembers whether it was read to its
// end, and the first error it met.
type trackedBody struct {
	r    io.Reader
	done bool
	err  error
}

func (t *trackedBody) Read(p []byte) (int, error) {
	if t.done {
		return 0, io.EOF
	}
	n, err := t.r.Read(p)
	switch {
	case err == io.EOF:
		t.done = true
	case err != nil && t.err == nil:
		t.err = err
	}
	return n, err
}

func (t *trackedBody) Close() error { return nil }
