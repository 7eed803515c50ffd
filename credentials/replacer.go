package credentials

import (
	"bytes"
	"errors"
	"io"
	"slices"
)

// rule is one pattern of a Replacer: its bytes are replaced by with, or, when fail is set,
// meeting it is an error.
type pattern struct {
	find []byte
	with []byte
	fail error
}

// Replacer replaces byte patterns, in a whole buffer or in a stream split at any point.
// At each position the longest pattern that matches wins; matches do not overlap. It is
// immutable and safe for concurrent use.
type Replacer struct {
	pats   []pattern
	maxLen int
	// skip, when set, makes contains skip through text instead of searching it once per
	// pattern (skipTable); nil when the patterns are too few or too short for it to pay.
	skip *skipTable
}

// newReplacer builds a Replacer; empty patterns are dropped, and a pattern given twice keeps
// its first replacement.
func newReplacer(pats []pattern) *Replacer {
	r := &Replacer{}
	seen := map[string]bool{}
	for _, p := range pats {
		if len(p.find) == 0 || seen[string(p.find)] {
			continue
		}
		seen[string(p.find)] = true
		r.pats = append(r.pats, p)
		r.maxLen = max(r.maxLen, len(p.find))
	}
	// Longest first, so the first pattern found at a position is the longest there.
	slices.SortStableFunc(r.pats, func(a, b pattern) int { return len(b.find) - len(a.find) })
	r.skip = newSkipTable(r.pats)
	return r
}

// Empty reports whether the Replacer has no patterns (and so changes nothing).
func (r *Replacer) Empty() bool { return r == nil || len(r.pats) == 0 }

// next finds the earliest match in b that starts before limit: its start and pattern, or
// -1. Of matches starting at the same position, the longest wins.
func (r *Replacer) next(b []byte, limit int) (int, *pattern) {
	best, bp := -1, (*pattern)(nil)
	for i := range r.pats {
		p := &r.pats[i]
		end := min(len(b), limit+len(p.find)-1)
		j := bytes.Index(b[:end], p.find)
		if j < 0 || j >= limit {
			continue
		}
		if best < 0 || j < best || (j == best && len(p.find) > len(bp.find)) {
			best, bp = j, p
		}
	}
	return best, bp
}

// apply replaces matches starting before limit, appending to dst. It returns dst, how many
// bytes of b were consumed (at least limit unless an error stopped it) and the error of a
// fail pattern met.
func (r *Replacer) apply(dst, b []byte, limit int) ([]byte, int, error) {
	i := 0
	for i < limit {
		j, p := r.next(b[i:], limit-i)
		if j < 0 {
			dst = append(dst, b[i:limit]...)
			return dst, limit, nil
		}
		dst = append(dst, b[i:i+j]...)
		if p.fail != nil {
			return dst, i + j, p.fail
		}
		dst = append(dst, p.with...)
		i += j + len(p.find)
	}
	return dst, i, nil
}

// Bytes returns b with every match replaced, or the error of a fail pattern met. b itself is
// returned when nothing matches.
func (r *Replacer) Bytes(b []byte) ([]byte, error) {
	if r.Empty() || !r.contains(b) {
		return b, nil
	}
	out, _, err := r.apply(make([]byte, 0, len(b)), b, len(b))
	return out, err
}

// String is Bytes for strings.
func (r *Replacer) String(s string) (string, error) {
	if r.Empty() {
		return s, nil
	}
	b, err := r.Bytes([]byte(s))
	return string(b), err
}

// contains reports whether any pattern occurs in b.
func (r *Replacer) contains(b []byte) bool {
	if r.skip != nil {
		return r.skip.contains(b, r.pats)
	}
	for _, p := range r.pats {
		if bytes.Contains(b, p.find) {
			return true
		}
	}
	return false
}

// held is the length of the longest tail of b that is a proper prefix of a pattern: bytes
// that may be the start of a match the next read completes.
func (r *Replacer) held(b []byte) int {
	best := 0
	for _, p := range r.pats {
		for k := min(len(p.find)-1, len(b)); k > best; k-- {
			if bytes.Equal(b[len(b)-k:], p.find[:k]) {
				best = k
				break
			}
		}
	}
	return best
}

// Reader returns a reader of rc's bytes with every match replaced, however rc splits them:
// it holds back a tail of what it has read that could start a match (at most len(longest
// pattern)-1 bytes) until it knows whether one starts there. Meeting a fail pattern makes
// Read return that error (the bytes before the match are delivered first). Close closes rc.
func (r *Replacer) Reader(rc io.ReadCloser) io.ReadCloser {
	if r.Empty() {
		return rc
	}
	return &streamReader{r: r, src: rc, size: -1}
}

// ReaderOfLength is Reader for a body of n bytes (n < 0: unknown): a short body is read
// through a buffer of its size instead of a 4 KiB one, allocated per body.
func (r *Replacer) ReaderOfLength(rc io.ReadCloser, n int64) io.ReadCloser {
	if r.Empty() {
		return rc
	}
	return &streamReader{r: r, src: rc, size: n}
}

// streamReader is Replacer.Reader's reader.
type streamReader struct {
	r    *Replacer
	src  io.ReadCloser
	in   []byte // read from src, not yet processed
	out  []byte // processed, not yet returned
	eof  bool
	err  error // the error to return once out is drained
	rbuf []byte
	size int64 // the body's length, or -1
}

func (s *streamReader) Read(p []byte) (int, error) {
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

// fill reads once from the source and processes what is safe to process.
func (s *streamReader) fill() {
	if !s.eof {
		if s.rbuf == nil {
			// Not pooled: Close may race a Read (a client going away), and a recycled
			// buffer could then carry one response's bytes into another.
			n := int64(4 << 10)
			if s.size >= 0 && s.size < n {
				n = s.size + 1 // room for the end to show with the last bytes
			}
			s.rbuf = make([]byte, n)
		}
		n, err := s.src.Read(s.rbuf)
		s.in = append(s.in, s.rbuf[:n]...)
		if errors.Is(err, io.EOF) {
			s.eof = true
		} else if err != nil {
			s.err = err
		}
	}
	// Hold back only a tail that could still start a match: a stream (SSE, a long poll)
	// whose last bytes start no pattern is handed on at once, not when more arrives.
	limit := len(s.in) - s.r.held(s.in)
	if s.eof || s.err != nil {
		limit = len(s.in)
	}
	if limit <= 0 {
		if s.eof && s.err == nil {
			s.err = io.EOF
		}
		return
	}
	out, used, ferr := s.r.apply(s.out[:0], s.in, limit)
	s.out = out
	s.in = append(s.in[:0], s.in[used:]...)
	switch {
	case ferr != nil:
		s.err, s.in = ferr, nil
	case s.eof && len(s.in) == 0 && s.err == nil:
		s.err = io.EOF
	}
}

func (s *streamReader) Close() error { return s.src.Close() }
