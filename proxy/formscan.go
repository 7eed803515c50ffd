package proxy

import (
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"sync/atomic"

	"github.com/airlock-dev/airlock/policy"
)

// overrideRefusal is the Refusal a request body scan returns when it meets a method override:
// the proxy denies the request with policy.ReasonMethodOverride.
type overrideRefusal struct{ detail string }

func (e *overrideRefusal) Error() string { return e.detail }

// DenyReason is the reason of the denial.
func (e *overrideRefusal) DenyReason() policy.Reason { return policy.ReasonMethodOverride }

var _ Refusal = (*overrideRefusal)(nil)

// multipartScanner passes a multipart/form-data body upstream while a multipart reader reads
// the same bytes on the side, looking for a part named like a method override (Rails reads
// _method from multipart forms too). It holds back each chunk until the next one is read,
// and the last until the reader has seen the whole body, so the body's end never leaves
// before the scan is done: a server cannot act on a form it has not received whole. A body
// the reader cannot parse is refused as well, since a lenient server might still find parts
// in it. The side reader starts on the first Read, so an unread body starts nothing.
type multipartScanner struct {
	src      io.ReadCloser
	boundary string
	rule     string
	pw       *io.PipeWriter
	done     chan struct{}
	found    atomic.Pointer[string] // the override part's name, or the parse error's text
	held     []byte                 // the last chunk read, not yet handed out
	out      []byte
	err      error
	started  bool
}

func newMultipartScanner(src io.ReadCloser, boundary, rule string) *multipartScanner {
	return &multipartScanner{src: src, boundary: boundary, rule: rule, done: make(chan struct{})}
}

// start runs the side reader.
func (s *multipartScanner) start() {
	s.started = true
	pr, pw := io.Pipe()
	s.pw = pw
	go func() {
		defer close(s.done)
		defer func() { _, _ = io.Copy(io.Discard, pr) }() // never leave a Write blocked
		mr := multipart.NewReader(pr, s.boundary)
		for {
			p, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				msg := fmt.Sprintf("the multipart form body cannot be parsed to check it for a method override (%v)", err)
				s.found.Store(&msg)
				return
			}
			if name := p.FormName(); policy.FormMethodOverride(name) != "" {
				msg := fmt.Sprintf("rule %q limits methods and the multipart form body carries method override %q", s.rule, name)
				s.found.Store(&msg)
				return
			}
			if _, err := io.Copy(io.Discard, p); err != nil {
				msg := fmt.Sprintf("the multipart form body cannot be parsed to check it for a method override (%v)", err)
				s.found.Store(&msg)
				return
			}
		}
	}()
}

func (s *multipartScanner) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		s.fill()
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
}

// fill reads one chunk, shows it to the side reader and releases the chunk before it.
func (s *multipartScanner) fill() {
	if !s.started {
		s.start()
	}
	buf := make([]byte, relayBuffer)
	n, err := s.src.Read(buf)
	if n > 0 {
		_, _ = s.pw.Write(buf[:n]) // the side reader drains what it no longer parses
		s.out, s.held = s.held, buf[:n]
	}
	if msg := s.found.Load(); msg != nil {
		s.out, s.held, s.err = nil, nil, &overrideRefusal{detail: *msg}
		return
	}
	switch {
	case errors.Is(err, io.EOF):
		_ = s.pw.Close()
		<-s.done
		if msg := s.found.Load(); msg != nil {
			s.out, s.held, s.err = nil, nil, &overrideRefusal{detail: *msg}
			return
		}
		s.out, s.held, s.err = append(s.out, s.held...), nil, io.EOF
	case err != nil:
		s.err = err
	}
}

// Close closes the body and ends the side reader.
func (s *multipartScanner) Close() error {
	err := s.src.Close()
	if s.started {
		_ = s.pw.CloseWithError(io.ErrClosedPipe)
		<-s.done
	}
	return err
}
