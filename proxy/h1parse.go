package proxy

// The strict HTTP/1.1 grammar of the fast path (h1serve.go). It parses request heads, response
// heads and chunked bodies itself, in a plain subset of RFC 9112 chosen so that every request
// head it accepts is one net/http's server accepts and reads the same way:
//
//	request-line = token SP target SP "HTTP/1.1" CRLF
//	field-line   = token ":" OWS *( HTAB / SP / VCHAR ) OWS CRLF
//	head         = request-line *field-line CRLF
//
// Lines end in CRLF, never a bare CR or LF; no obs-fold; no obs-text in requests (responses
// may carry it in values, as RFC 9110 allows); at most MaxHeaderBytes+4096 bytes (net/http's
// bound). A request head outside the subset is not refused here: parseRequestHead says so and
// the connection goes on through net/http, which answers it as it always has (h1serve.go).
// Only a head that is in the subset but frames its body ambiguously (Content-Length and
// Transfer-Encoding together) is refused here, with net/http's 400.
//
// Chunked bodies follow RFC 9112 section 7.1 with CRLF only, at most 15 hex digits of size
// (no overflow), extensions as `;` token [ "=" ( token / quoted-string ) ] without white
// space, and trailer fields as field-lines, all within bounded lines. TestStrictHeadMatchesNetHTTP
// and FuzzStrictRequestHead hold the request grammar to net/http's; FuzzChunkedReader holds the
// chunked reader to net/http's decoding of the same bytes.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
)

// Errors of the strict grammar. A response or body that breaks it fails its exchange (502)
// and closes the connection it came on.
var (
	errFraming      = errors.New("malformed HTTP/1.1 framing")
	errHeadTooLarge = errors.New("message head too large")
)

// maxChunkLine bounds a chunk-size line with its extensions.
const maxChunkLine = 4096

// h1Request is what the fast path takes from a request head in the strict subset.
type h1Request struct {
	method  string
	target  string
	header  http.Header
	host    string // the Host header ("" when absent)
	bodyLen int64  // Content-Length, or -1 for chunked
	close   bool   // Connection: close
}

// headVerdict is parseRequestHead's answer on a head.
type headVerdict int

const (
	headStrict  headVerdict = iota // in the subset: the fast path serves it
	headHandOff                    // outside the subset: net/http serves it and the rest of the connection
	headRefuse                     // ambiguous body framing: refused with 400, the connection closed
)

// parseRequestHead parses head (through its blank line). absolute says the target must be in
// absolute form with the http scheme (the explicit listener); else it must be in origin form
// (inside an intercepted tunnel).
func parseRequestHead(head []byte, absolute bool) (h1Request, headVerdict) {
	r := h1Request{bodyLen: 0}
	line, rest, ok := cutCRLF(head)
	if !ok {
		return r, headHandOff
	}
	method, after, ok1 := bytes.Cut(line, []byte(" "))
	target, proto, ok2 := bytes.Cut(after, []byte(" "))
	if !ok1 || !ok2 || string(proto) != "HTTP/1.1" || len(method) > 32 || !plainName(method) ||
		string(method) == http.MethodConnect || string(method) == "PRI" || !plainRequestTarget(target, absolute) {
		return r, headHandOff
	}
	hs := newHeadStrings(head, rest)
	r.method, r.target = hs.of(method), hs.of(target)
	r.header = hs.header()
	f := fieldState{}
	for {
		line, rest, ok = cutCRLF(rest)
		if !ok {
			return r, headHandOff
		}
		if len(line) == 0 {
			break
		}
		name, value, ok := parseFieldLine(line, false)
		if !ok {
			return r, headHandOff
		}
		if v := f.request(&r, &hs, name, value); v != headStrict {
			return r, v
		}
	}
	if len(rest) != 0 || f.hosts != 1 {
		// HTTP/1.1 needs exactly one Host (net/http answers 400 otherwise).
		return r, headHandOff
	}
	switch {
	case f.te && f.cl:
		return r, headRefuse
	case f.te:
		r.bodyLen = -1
	}
	return r, headStrict
}

// fieldState follows the fields of a request head that frame it or send it elsewhere.
type fieldState struct {
	hosts  int
	cl, te bool
}

// request adds one field to r, or says the head leaves the subset.
func (f *fieldState) request(r *h1Request, hs *headStrings, name, value []byte) headVerdict {
	key := http.CanonicalHeaderKey(hs.of(name))
	switch key {
	case "Host":
		if f.hosts++; f.hosts > 1 || len(value) == 0 || !plainHostHeader(value) {
			return headHandOff
		}
		r.host = hs.of(value)
		return headStrict // net/http takes Host out of the header map
	case "Content-Length":
		n, ok := parseDecimal(value)
		if f.cl || !ok {
			return headHandOff
		}
		f.cl, r.bodyLen = true, n
	case "Transfer-Encoding":
		if f.te || string(value) != "chunked" {
			return headHandOff
		}
		f.te = true
		return headStrict // net/http keeps it out of the header map (Request.TransferEncoding)
	case "Connection":
		switch {
		case bytes.EqualFold(value, []byte("close")):
			r.close = true
		case !bytes.EqualFold(value, []byte("keep-alive")):
			return headHandOff // other connection options (Upgrade among them) stay with net/http
		}
	case "Expect", "Upgrade", "Trailer", "Http2-Settings":
		return headHandOff
	}
	hs.add(r.header, key, value)
	return headStrict
}

// headStrings gives the strings of one head's parts (subslices of it) as substrings of one
// copy of the head, and the values of its header map from one backing array: a head costs
// a few allocations, not two or three per field.
type headStrings struct {
	head []byte
	s    string
	vals []string
	n    int // field lines in the head (at most)
}

// newHeadStrings copies head once; fields is the part of it holding the field lines.
func newHeadStrings(head, fields []byte) headStrings {
	n := bytes.Count(fields, []byte("\n"))
	return headStrings{head: head, s: string(head), vals: make([]string, 0, n), n: n}
}

// of returns b, a subslice of the head, as a string.
func (hs *headStrings) of(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	off := cap(hs.head) - cap(b)
	if off < 0 || off+len(b) > len(hs.s) { // not a part of the head: cannot happen
		return string(b)
	}
	return hs.s[off : off+len(b)]
}

// header is an empty map sized for the head's fields.
func (hs *headStrings) header() http.Header { return make(http.Header, hs.n) }

// add appends value (a subslice of the head) to h[key].
func (hs *headStrings) add(h http.Header, key string, value []byte) {
	v := hs.of(value)
	if old, ok := h[key]; ok {
		h[key] = append(old, v)
		return
	}
	i := len(hs.vals)
	hs.vals = append(hs.vals, v)
	h[key] = hs.vals[i : i+1 : i+1]
}

// cutCRLF splits the first CRLF-terminated line off b. ok is false when b holds no CRLF or
// the line holds a bare CR or LF.
func cutCRLF(b []byte) (line, rest []byte, ok bool) {
	i := bytes.IndexByte(b, '\n')
	if i < 1 || b[i-1] != '\r' {
		return nil, nil, false
	}
	line = b[:i-1]
	if bytes.IndexByte(line, '\r') >= 0 {
		return nil, nil, false
	}
	return line, b[i+1:], true
}

// parseFieldLine splits a field line into its name and trimmed value. obsText allows bytes
// 0x80-0xFF in the value (responses).
func parseFieldLine(line []byte, obsText bool) (name, value []byte, ok bool) {
	name, value, found := bytes.Cut(line, []byte(":"))
	if !found || !plainName(name) {
		return nil, nil, false
	}
	value = bytes.Trim(value, " \t")
	for _, c := range value {
		if c != '\t' && (c < ' ' || c == 0x7f || (c >= 0x80 && !obsText)) {
			return nil, nil, false
		}
	}
	return name, value, true
}

// parseDecimal parses a Content-Length: 1 to 18 digits.
func parseDecimal(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 || !allBytes(v, isDigit) {
		return 0, false
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	return n, err == nil
}

// plainRequestTarget reports whether t is an origin-form target ("/" path ["?" query]) or,
// with absolute, "http://" host[:port] followed by one, made of RFC 3986 characters only.
func plainRequestTarget(t []byte, absolute bool) bool {
	if absolute {
		rest, ok := bytes.CutPrefix(t, []byte("http://"))
		if !ok {
			return false
		}
		slash := bytes.IndexByte(rest, '/')
		if slash < 0 || !plainTarget(rest[:slash]) {
			return false
		}
		t = rest[slash:]
	}
	if len(t) == 0 || t[0] != '/' {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		switch {
		case c == '%':
			if i+2 >= len(t) || !isHex(t[i+1]) || !isHex(t[i+2]) {
				return false
			}
			i += 2
		case isNameByte(c), bytes.IndexByte([]byte("~!$&'()*+,;=:@/?"), c) >= 0:
		default:
			return false
		}
	}
	return true
}

func isHex(c byte) bool { return isDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// h1Response is a response head in the strict grammar.
type h1Response struct {
	proto  string // HTTP/1.1 or HTTP/1.0
	status int
	header http.Header
	cl     int64 // -1 when absent
	te     bool  // Transfer-Encoding: chunked
	close  bool  // the upstream closes after this response
}

// parseResponseHead parses a response head (through its blank line). Framing it cannot
// follow safely is an error (errFraming): Content-Length with Transfer-Encoding, a coding
// other than chunked, Content-Length repeated or not a number.
func parseResponseHead(head []byte) (h1Response, error) {
	r := h1Response{cl: -1}
	line, rest, ok := cutCRLF(head)
	if !ok || len(line) < 12 || (len(line) > 12 && line[12] != ' ') ||
		bytes.ContainsFunc(line, func(c rune) bool { return c != '\t' && (c < ' ' || c == 0x7f) }) {
		return r, fmt.Errorf("response status line: %w", errFraming)
	}
	r.proto = httpVersion(line[:8])
	code := line[9:12]
	if (r.proto != "HTTP/1.1" && r.proto != "HTTP/1.0") || line[8] != ' ' || !allBytes(code, isDigit) || code[0] == '0' {
		return r, fmt.Errorf("response status line: %w", errFraming)
	}
	r.status = int(code[0]-'0')*100 + int(code[1]-'0')*10 + int(code[2]-'0')
	r.close = r.proto == "HTTP/1.0"
	hs := newHeadStrings(head, rest)
	r.header = hs.header()
	for {
		line, rest, ok = cutCRLF(rest)
		if !ok {
			return r, fmt.Errorf("response head line: %w", errFraming)
		}
		if len(line) == 0 {
			break
		}
		name, value, ok := parseFieldLine(line, true)
		if !ok {
			return r, fmt.Errorf("response field line: %w", errFraming)
		}
		key := http.CanonicalHeaderKey(hs.of(name))
		if err := r.field(key, value); err != nil {
			return r, err
		}
		hs.add(r.header, key, value)
	}
	switch {
	case r.te && r.cl >= 0:
		return r, fmt.Errorf("response has Content-Length and Transfer-Encoding: %w", errFraming)
	case r.te && r.proto == "HTTP/1.0":
		// RFC 9112 section 6.1: faulty framing (net/http ignores the field instead).
		return r, fmt.Errorf("HTTP/1.0 response with Transfer-Encoding: %w", errFraming)
	}
	return r, nil
}

// httpVersion returns v as a string, without allocating for the two versions a response
// may name.
func httpVersion(v []byte) string {
	switch string(v) {
	case "HTTP/1.1":
		return "HTTP/1.1"
	case "HTTP/1.0":
		return "HTTP/1.0"
	}
	return string(v)
}

// field notes a framing field of a response head.
func (r *h1Response) field(key string, value []byte) error {
	switch key {
	case "Content-Length":
		n, ok := parseDecimal(value)
		if r.cl >= 0 || !ok {
			return fmt.Errorf("response Content-Length %q: %w", value, errFraming)
		}
		r.cl = n
	case "Transfer-Encoding":
		if r.te || !bytes.EqualFold(value, []byte("chunked")) {
			return fmt.Errorf("response Transfer-Encoding %q: %w", value, errFraming)
		}
		r.te = true
	case "Connection":
		for _, opt := range bytes.Split(value, []byte(",")) {
			opt = bytes.TrimSpace(opt)
			switch {
			case bytes.EqualFold(opt, []byte("close")):
				r.close = true
			case bytes.EqualFold(opt, []byte("keep-alive")) && r.proto == "HTTP/1.0":
				r.close = false
			}
		}
	}
	return nil
}

// lineReader is what the chunked reader reads from: lines bounded by max, then raw bytes.
type lineReader interface {
	io.Reader
	readLine(max int) ([]byte, error) // through CRLF, without it
}

// chunkedReader decodes a chunked body (RFC 9112 section 7.1) strictly. Trailer fields are
// added to trailer when it is not nil, within maxTrailer bytes.
type chunkedReader struct {
	r          lineReader
	left       int64 // bytes left in the current chunk
	inChunk    bool
	done       bool
	err        error
	trailer    *http.Header // where trailer fields go (created when the first arrives); nil drops them
	maxTrailer int
}

func (c *chunkedReader) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if c.done {
		return 0, io.EOF
	}
	if !c.inChunk {
		if c.err = c.next(); c.err != nil {
			return 0, c.err
		}
		if c.done {
			return 0, io.EOF
		}
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if c.left == 0 {
		if c.err = c.endChunk(); c.err != nil {
			return n, c.err
		}
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		c.err = err
	}
	return n, err
}

// next reads a chunk-size line, and the trailer section after the last chunk.
func (c *chunkedReader) next() error {
	line, err := c.r.readLine(maxChunkLine)
	if err != nil {
		return noEOF(err)
	}
	size, ext := line, []byte(nil)
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		size, ext = line[:i], line[i:]
	}
	if len(size) == 0 || len(size) > 15 || !allBytes(size, isHex) || !chunkExtensions(ext) {
		return fmt.Errorf("chunk size line %q: %w", truncate(line), errFraming)
	}
	n, _ := strconv.ParseInt(string(size), 16, 64)
	if n == 0 {
		c.done = true
		return c.readTrailer()
	}
	c.left, c.inChunk = n, true
	return nil
}

// endChunk reads the CRLF after a chunk's data.
func (c *chunkedReader) endChunk() error {
	c.inChunk = false
	line, err := c.r.readLine(2)
	if err != nil {
		return noEOF(err)
	}
	if len(line) != 0 {
		return fmt.Errorf("chunk data not followed by CRLF: %w", errFraming)
	}
	return nil
}

// readTrailer reads the trailer section and its closing CRLF.
func (c *chunkedReader) readTrailer() error {
	total := 0
	for {
		line, err := c.r.readLine(maxChunkLine)
		if err != nil {
			return noEOF(err)
		}
		if len(line) == 0 {
			return nil
		}
		if total += len(line) + 2; total > c.maxTrailer {
			return fmt.Errorf("trailer section: %w", errHeadTooLarge)
		}
		name, value, ok := parseFieldLine(line, true)
		if !ok {
			return fmt.Errorf("trailer field line: %w", errFraming)
		}
		if c.trailer != nil {
			if *c.trailer == nil {
				*c.trailer = make(http.Header)
			}
			c.trailer.Add(string(name), string(value))
		}
	}
}

// chunkExtensions reports whether ext is *( ";" token [ "=" ( token / quoted-string ) ] ).
func chunkExtensions(ext []byte) bool {
	for len(ext) > 0 {
		if ext[0] != ';' {
			return false
		}
		ext = ext[1:]
		i := 0
		for i < len(ext) && ext[i] != '=' && ext[i] != ';' {
			i++
		}
		if !plainName(ext[:i]) {
			return false
		}
		ext = ext[i:]
		if len(ext) == 0 || ext[0] == ';' {
			continue
		}
		ext = ext[1:] // "="
		n := extValue(ext)
		if n <= 0 {
			return false
		}
		ext = ext[n:]
	}
	return true
}

// extValue returns the length of the token or quoted-string at the start of b, or 0.
func extValue(b []byte) int {
	if len(b) > 0 && b[0] == '"' {
		for i := 1; i < len(b); i++ {
			switch c := b[i]; {
			case c == '"':
				return i + 1
			case c == '\\':
				if i+1 >= len(b) || (b[i+1] != '\t' && (b[i+1] < ' ' || b[i+1] == 0x7f)) {
					return 0
				}
				i++
			case c != '\t' && (c < ' ' || c == 0x7f):
				return 0
			}
		}
		return 0
	}
	i := 0
	for i < len(b) && b[i] != ';' {
		i++
	}
	if !plainName(b[:i]) {
		return 0
	}
	return i
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

func truncate(b []byte) []byte {
	if len(b) > 40 {
		return b[:40]
	}
	return b
}

// ambiguousHead reports whether a request head outside the subset is one net/http would
// accept by normalising it, where the request's framing is in doubt: an obs-fold line
// (RFC 9112 section 5.2 lets a server refuse it, net/http joins it) or Content-Length with
// Transfer-Encoding (section 6.3: "ought to be handled as an error", net/http drops
// Content-Length). The fast path refuses these with 400 before handing a head over, so no
// head that a front end and a back end might frame differently reaches net/http either.
func ambiguousHead(head []byte) bool {
	cl, te := false, false
	lines := bytes.Split(head, []byte("\n"))
	for i, line := range lines {
		if i == 0 || len(line) == 0 {
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			return i < len(lines)-2 || len(bytes.TrimSpace(line)) > 0 // a folded line, not the blank one
		}
		name, _, _ := bytes.Cut(line, []byte(":"))
		name = bytes.TrimRight(name, " \t")
		cl = cl || bytes.EqualFold(name, []byte("Content-Length"))
		te = te || bytes.EqualFold(name, []byte("Transfer-Encoding"))
	}
	return cl && te
}
