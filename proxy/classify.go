package proxy

// One classifier decides what a client's first bytes are, for every tunnel the proxy does not
// terminate: a CONNECT passthrough tunnel and a transparent connection. A tunnel must know what
// it carries before a byte of it goes upstream, because the upstream routes on what it reads
// (the TLS server name, the HTTP Host header), not on what the proxy decided. So the
// classifier parses the TLS record layer itself (RFC 8446 §5.1) rather than trusting the first
// byte: a ClientHello split over several records is reassembled, and anything a server could
// read differently from the proxy is refused — another record type before or among the
// ClientHello's records (Go's crypto/tls, among others, skips warning alerts before a
// ClientHello), a record that is empty or longer than 2^14 bytes, a handshake message that is
// not a ClientHello, bytes after it in its records, an SSLv2-compatible hello, duplicate
// extensions, a server_name list with more than one name or a name type other than host_name,
// and an encrypted ClientHello (whose inner, real server name the proxy cannot see).

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// TLS record content types (RFC 8446 §5.1).
const (
	recordTypeChangeCipherSpec = 0x14
	recordTypeAlert            = 0x15
	recordTypeHandshake        = 0x16
	recordTypeApplicationData  = 0x17
)

const (
	// maxHelloBytes bounds what the proxy reads to find a ClientHello: crypto/tls accepts a
	// handshake message of up to 64 KiB, which may span several 16 KiB records.
	maxHelloBytes = 80 << 10
	// maxPlaintextRecord is the longest TLSPlaintext fragment (RFC 8446 §5.1).
	maxPlaintextRecord = 1 << 14
	// handshakeClientHello is the ClientHello handshake message type.
	handshakeClientHello = 1
	// extServerName, extECH and extESNI are the extensions the classifier reads or refuses:
	// server_name (RFC 6066), encrypted_client_hello (RFC 9849) and the draft ESNI one.
	extServerName = 0x0000
	extECH        = 0xfe0d
	extESNI       = 0xffce
)

// streamKind is what a client's first bytes are.
type streamKind int

const (
	streamUnknown streamKind = iota // nothing classified (an error, or no bytes)
	streamTLS                       // TLS: a ClientHello, or records that are refused
	streamHTTP                      // text an HTTP server could read as a request
	streamOther                     // another protocol: binary, or text lines that are not HTTP (an SSH banner)
)

// maxLinePeek bounds how far the classifier looks for the end of a first text line. Request
// lines and protocol banners are far shorter; longer text is refused, since an HTTP server
// with a larger limit might still read it as a request.
const maxLinePeek = 8 << 10

// classifyBuffer is the size of the bufio.Reader classifyStream needs: it peeks up to
// maxLinePeek bytes.
const classifyBuffer = maxLinePeek + 1

// stream is what the classifier learned from a client's first bytes.
type stream struct {
	kind   streamKind
	sni    string // the server_name extension's host name ("" when absent)
	hasSNI bool   // the ClientHello carries a server_name extension
	// first holds the bytes taken from the reader (the ClientHello's records); they go
	// upstream first. For HTTP and unknown streams nothing is taken.
	first []byte
}

// helloError says why TLS bytes were refused. Its text is the denial's detail; it never holds
// client data beyond numbers.
type helloError struct{ reason string }

func (e *helloError) Error() string { return e.reason }

func helloErrorf(format string, args ...any) error {
	return &helloError{reason: fmt.Sprintf(format, args...)}
}

// errNothingSent is classifyStream's error when the client sent no byte before EOF.
var errNothingSent = errors.New("the client sent nothing")

// classifyStream reads the start of a client's stream from br, which must buffer at least
// classifyBuffer bytes. HTTP and other streams are only peeked at, so br still holds all
// their bytes. A TLS stream is read up to the end of its ClientHello; the bytes read are in
// the result's first, even on error. Errors: a *helloError (TLS that is refused), errNothingSent,
// errLongLine, or the reader's error (a timeout).
func classifyStream(br *bufio.Reader) (stream, error) {
	b, err := br.Peek(1)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return stream{}, errNothingSent
		}
		return stream{}, fmt.Errorf("read first bytes: %w", err)
	}
	switch c := b[0]; {
	case c == recordTypeHandshake:
		return readClientHello(br)
	case c == recordTypeChangeCipherSpec || c == recordTypeAlert || c == recordTypeApplicationData:
		return stream{kind: streamTLS}, helloErrorf("a TLS record of type %d came before the ClientHello", c)
	case c&0x80 != 0:
		// An SSLv2-compatible ClientHello (RFC 5246 appendix E.2) starts with a two-byte
		// length with the top bit set. It cannot carry extensions, so no server name.
		if h, err := br.Peek(3); err == nil && h[2] == handshakeClientHello {
			return stream{kind: streamTLS}, helloErrorf("an SSLv2-compatible ClientHello carries no server name")
		}
	}
	return classifyText(br)
}

// errLongLine is classifyStream's error for text with no line end within maxLinePeek bytes.
var errLongLine = errors.New("the first line is too long to classify")

// classifyText tells HTTP from other protocols without consuming anything. An HTTP/1 request
// is text whose first line (servers skip empty lines before it, RFC 9112 §2.2) holds
// "HTTP/" or starts with a method of letters and a space; an HTTP/0.9 request ("GET /") and
// HTTP/2's preface ("PRI * HTTP/2.0") count too. A byte that is not text before the first
// line end means another protocol: no HTTP server reads that as a request. So does a line
// that meets neither test (an SSH banner "SSH-2.0-OpenSSH_9.6 Ubuntu").
func classifyText(br *bufio.Reader) (stream, error) {
	n := 1
	for {
		b, err := br.Peek(n)
		if len(b) < n {
			if errors.Is(err, io.EOF) && len(b) > 0 {
				return stream{kind: textKind(bytes.TrimLeft(b, "\r\n \t"))}, nil // the client's whole stream
			}
			return stream{}, fmt.Errorf("read first line: %w", err)
		}
		body := bytes.TrimLeft(b, "\r\n \t")
		switch i := bytes.IndexFunc(body, notLineText); {
		case i >= 0:
			return stream{kind: textKind(body[:i+1])}, nil
		case n >= maxLinePeek:
			return stream{}, errLongLine
		}
		n = min(max(n+1, br.Buffered()), maxLinePeek)
	}
}

// notLineText is true for a byte that ends a first line: LF, or a control byte. Bytes past
// ASCII are text: a lenient server may take raw UTF-8 in a request target.
func notLineText(r rune) bool {
	return r == '\n' || (r < ' ' && r != '\t' && r != '\r') || r == 0x7f
}

// textKind classifies a first line (ending in the byte that ended it).
func textKind(line []byte) streamKind {
	if bytes.Contains(bytes.ToUpper(line), []byte("HTTP/")) {
		return streamHTTP
	}
	method := 0
	for method < len(line) && (line[method] >= 'A' && line[method] <= 'Z' || line[method] >= 'a' && line[method] <= 'z') {
		method++
	}
	if method > 0 && method < len(line) && (line[method] == ' ' || line[method] == '\t') {
		return streamHTTP
	}
	return streamOther
}

// readClientHello reads TLS records from br until they hold one whole ClientHello message,
// and parses it.
func readClientHello(br *bufio.Reader) (stream, error) {
	s := stream{kind: streamTLS}
	var msg []byte // the handshake bytes of the records read so far
	for {
		var hdr [5]byte
		n, err := io.ReadFull(br, hdr[:])
		s.first = append(s.first, hdr[:n]...)
		if err != nil {
			return s, fmt.Errorf("read client hello: %w", err)
		}
		length := int(binary.BigEndian.Uint16(hdr[3:]))
		switch {
		case hdr[0] != recordTypeHandshake:
			return s, helloErrorf("a TLS record of type %d is interleaved with the ClientHello's records", hdr[0])
		case hdr[1] != 3:
			return s, helloErrorf("a TLS record with version %d.%d", hdr[1], hdr[2])
		case length == 0:
			return s, helloErrorf("an empty TLS handshake record")
		case length > maxPlaintextRecord:
			return s, helloErrorf("a TLS record of %d bytes, over the limit of %d", length, maxPlaintextRecord)
		case len(s.first)+length > maxHelloBytes:
			return s, helloErrorf("a ClientHello longer than %d bytes", maxHelloBytes)
		}
		start := len(s.first)
		s.first = append(s.first, make([]byte, length)...)
		n, err = io.ReadFull(br, s.first[start:])
		s.first = s.first[:start+n]
		if err != nil {
			return s, fmt.Errorf("read client hello: %w", err)
		}
		msg = append(msg, s.first[start:]...)
		if len(msg) < 4 {
			continue
		}
		if msg[0] != handshakeClientHello {
			return s, helloErrorf("a TLS handshake message of type %d came before the ClientHello", msg[0])
		}
		size := 4 + (int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3]))
		switch {
		case size > maxHelloBytes:
			return s, helloErrorf("a ClientHello longer than %d bytes", maxHelloBytes)
		case len(msg) < size:
			continue
		case len(msg) > size:
			return s, helloErrorf("more handshake bytes follow the ClientHello in its records")
		}
		s.sni, s.hasSNI, err = parseClientHello(msg[4:])
		return s, err
	}
}

// parseClientHello parses a ClientHello body (RFC 8446 §4.1.2, and the TLS 1.0-1.2 form
// without extensions) and returns its server name.
func parseClientHello(body []byte) (string, bool, error) {
	r := byteReader{b: body}
	r.skip(2 + 32) // legacy_version, random
	if sid := r.vec8(); len(sid) > 32 {
		return "", false, helloErrorf("a ClientHello session id of %d bytes", len(sid))
	}
	if suites := r.vec16(); len(suites) < 2 || len(suites)%2 != 0 {
		return "", false, helloErrorf("a ClientHello with malformed cipher suites")
	}
	if comp := r.vec8(); len(comp) == 0 {
		return "", false, helloErrorf("a ClientHello without compression methods")
	}
	if r.bad {
		return "", false, helloErrorf("a truncated ClientHello")
	}
	if len(r.b) == 0 {
		return "", false, nil // no extensions at all (TLS 1.0-1.2)
	}
	exts := byteReader{b: r.vec16()}
	if r.bad || len(r.b) != 0 {
		return "", false, helloErrorf("a ClientHello with malformed extensions")
	}
	seen := map[uint16]bool{}
	sni, has := "", false
	for len(exts.b) > 0 {
		typ, data := exts.u16(), exts.vec16()
		if exts.bad {
			return "", false, helloErrorf("a ClientHello with a truncated extension")
		}
		if seen[typ] {
			return "", false, helloErrorf("a ClientHello with extension %d twice", typ)
		}
		seen[typ] = true
		switch typ {
		case extECH, extESNI:
			return "", false, helloErrorf("an encrypted ClientHello hides the real server name")
		case extServerName:
			name, err := parseServerName(data)
			if err != nil {
				return "", false, err
			}
			sni, has = name, true
		}
	}
	return sni, has, nil
}

// parseServerName parses a server_name extension from a client (RFC 6066 §3): exactly one
// host_name entry, a non-empty name of printable ASCII (IDNs travel as punycode).
func parseServerName(data []byte) (string, error) {
	r := byteReader{b: data}
	list := byteReader{b: r.vec16()}
	if r.bad || len(r.b) != 0 || len(list.b) == 0 {
		return "", helloErrorf("a malformed server_name extension")
	}
	name := ""
	for len(list.b) > 0 {
		typ, n := list.u8(), list.vec16()
		switch {
		case list.bad:
			return "", helloErrorf("a malformed server_name extension")
		case typ != 0:
			return "", helloErrorf("a server_name entry of type %d, not host_name", typ)
		case name != "":
			return "", helloErrorf("a server_name extension with more than one host name")
		case len(n) == 0:
			return "", helloErrorf("an empty server name")
		}
		for _, c := range n {
			if c <= ' ' || c >= 0x7f {
				return "", helloErrorf("a server name with a byte outside printable ASCII")
			}
		}
		name = string(n)
	}
	return name, nil
}

// byteReader reads TLS's big-endian integers and length-prefixed vectors. A read past the
// end sets bad and returns zero values.
type byteReader struct {
	b   []byte
	bad bool
}

func (r *byteReader) take(n int) []byte {
	if r.bad || n > len(r.b) {
		r.bad = true
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *byteReader) skip(n int) { r.take(n) }

func (r *byteReader) u8() int {
	if b := r.take(1); b != nil {
		return int(b[0])
	}
	return 0
}

func (r *byteReader) u16() uint16 {
	if b := r.take(2); b != nil {
		return binary.BigEndian.Uint16(b)
	}
	return 0
}

func (r *byteReader) vec8() []byte { return r.take(r.u8()) }

func (r *byteReader) vec16() []byte { return r.take(int(r.u16())) }
