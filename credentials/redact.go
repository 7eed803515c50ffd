package credentials

import (
	"bytes"
	"encoding/base64"
	"io"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
)

// Redacted replaces a secret value (or an encoded form of it) in redacted output.
const Redacted = "[REDACTED]"

// MinRedactLen is the shortest secret value that is redacted: shorter values would garble
// unrelated text, and are not secrets worth the name. The broker logs a warning for them.
const MinRedactLen = 4

// Redactor scrubs every secret value it was told about — and the value's base64 (standard
// and URL alphabets, padded and not) and URL-encoded forms — from bytes, strings, headers,
// writers and streams. Values stay known for the Redactor's life, so a rotated-out value
// is still scrubbed. The zero value is not usable; use NewRedactor. It is safe for
// concurrent use.
type Redactor struct {
	// mu guards values (writers of the set); readers use cur.
	mu     sync.Mutex
	values map[string]bool
	cur    atomic.Pointer[Replacer]
	mask   atomic.Pointer[Replacer] // the same patterns, replaced by as many '*'
}

// NewRedactor returns a Redactor that knows no value yet.
func NewRedactor() *Redactor {
	r := &Redactor{values: map[string]bool{}}
	r.cur.Store(newReplacer(nil))
	r.mask.Store(newReplacer(nil))
	return r
}

// Add makes the Redactor scrub v (and its encodings) from now on. Values shorter than
// MinRedactLen are ignored; Add reports whether v is redacted.
func (r *Redactor) Add(v string) bool {
	if len(v) < MinRedactLen {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.values[v] {
		return true
	}
	r.values[v] = true
	var pats, masks []pattern
	for val := range r.values {
		for _, f := range forms(val) {
			pats = append(pats, pattern{find: []byte(f), with: []byte(Redacted)})
			masks = append(masks, pattern{find: []byte(f), with: bytes.Repeat([]byte{'*'}, len(f))})
		}
	}
	r.cur.Store(newReplacer(pats))
	r.mask.Store(newReplacer(masks))
	return true
}

// forms are the spellings of v that are scrubbed: v itself, its URL escapes, and its base64
// (standard and URL alphabets, padded or not) wherever it sits in the encoded text.
func forms(v string) []string {
	b := []byte(v)
	out := []string{
		v,
		base64.StdEncoding.EncodeToString(b),
		base64.RawStdEncoding.EncodeToString(b),
		base64.URLEncoding.EncodeToString(b),
		base64.RawURLEncoding.EncodeToString(b),
		url.QueryEscape(v),
		url.PathEscape(v),
	}
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		for offset := range 3 {
			if core := base64Core(enc, b, offset); len(core) >= MinRedactLen {
				out = append(out, core)
			}
		}
	}
	return out
}

// base64Core is the part of the base64 text of any data holding v at a byte offset ≡ offset
// (mod 3) that depends on v alone: the characters whose six bits all come from v. A secret
// embedded in a larger blob (a JSON echo of the request, "user:secret" at offset 5) is
// encoded with its first and last characters mixed with its neighbours' bits, so the plain
// base64 of v never appears; its core always does.
func base64Core(enc *base64.Encoding, v []byte, offset int) string {
	s := enc.EncodeToString(append(make([]byte, offset), v...))
	first := (8*offset + 5) / 6       // first character starting at or after v's first bit
	last := (8*offset + 8*len(v)) / 6 // characters wholly inside v end here
	if last <= first {
		return ""
	}
	return s[first:last]
}

// Replacer returns the current replacer (a snapshot).
func (r *Redactor) Replacer() *Replacer { return r.cur.Load() }

// Bytes returns b with every known value scrubbed (b itself when none occurs).
func (r *Redactor) Bytes(b []byte) []byte {
	out, _ := r.cur.Load().Bytes(b) // redaction patterns never fail
	return out
}

// String returns s with every known value scrubbed.
func (r *Redactor) String(s string) string {
	out, _ := r.cur.Load().String(s)
	return out
}

// maskReplacer returns the current masking replacer (a snapshot): same patterns as
// Replacer, each replaced by as many '*' as it has bytes.
func (r *Redactor) maskReplacer() *Replacer { return r.mask.Load() }

// Mask returns b with every known value (and its encodings) replaced by as many '*' as it
// has bytes (b itself when none occurs): for framed data whose lengths must not change.
func (r *Redactor) Mask(b []byte) []byte {
	out, _ := r.mask.Load().Bytes(b) // masking patterns never fail
	return out
}

// Header scrubs every value of h in place.
func (r *Redactor) Header(h http.Header) {
	rep := r.cur.Load()
	if rep.Empty() {
		return
	}
	for k, vs := range h {
		for i, v := range vs {
			if out, _ := rep.String(v); out != v {
				h[k][i] = out
			}
		}
	}
}

// Body returns rc with every value known now scrubbed, across read boundaries.
func (r *Redactor) Body(rc io.ReadCloser) io.ReadCloser { return r.cur.Load().Reader(rc) }

// Writer returns a writer that scrubs each Write before passing it on. It suits writers
// that get whole lines per Write (logrus, the audit logger): a value split across two
// Writes is not seen.
func (r *Redactor) Writer(w io.Writer) io.Writer { return &redactWriter{r: r, w: w} }

type redactWriter struct {
	r *Redactor
	w io.Writer
}

func (w *redactWriter) Write(p []byte) (int, error) {
	if _, err := w.w.Write(w.r.Bytes(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}
