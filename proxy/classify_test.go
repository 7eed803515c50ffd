package proxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

// tlsRecord frames payload as one TLS record of type typ (version 3.1).
func tlsRecord(typ byte, payload []byte) []byte {
	out := []byte{typ, 3, 1, 0, 0}
	binary.BigEndian.PutUint16(out[3:], uint16(len(payload)))
	return append(out, payload...)
}

// u16vec prefixes b with its two-byte length.
func u16vec(b []byte) []byte {
	return append(binary.BigEndian.AppendUint16(nil, uint16(len(b))), b...)
}

// rawExt is one extension.
func rawExt(typ uint16, data []byte) []byte {
	return append(binary.BigEndian.AppendUint16(nil, typ), u16vec(data)...)
}

// sniExt is a server_name extension with one host_name entry per name.
func sniExt(names ...string) []byte {
	var list []byte
	for _, n := range names {
		list = append(list, 0)
		list = append(list, u16vec([]byte(n))...)
	}
	return rawExt(extServerName, u16vec(list))
}

// helloMessage is a ClientHello handshake message with exts (nil: no extensions block).
func helloMessage(exts ...[]byte) []byte {
	body := []byte{3, 3}
	body = append(body, make([]byte, 32)...) // random
	body = append(body, 0)                   // session id
	body = append(body, 0, 2, 0x13, 0x01)    // one cipher suite
	body = append(body, 1, 0)                // null compression
	if exts != nil {
		body = append(body, u16vec(bytes.Join(exts, nil))...)
	}
	return append([]byte{handshakeClientHello, byte(len(body) >> 16), byte(len(body) >> 8), byte(len(body))}, body...)
}

// fragmentHello takes the handshake payload out of hello's records and splits it into
// records of the given sizes (the last one takes the rest).
func fragmentHello(t testing.TB, hello []byte, sizes ...int) []byte {
	t.Helper()
	var msg []byte
	for r := hello; len(r) >= 5; {
		n := int(binary.BigEndian.Uint16(r[3:]))
		msg = append(msg, r[5:5+n]...)
		r = r[5+n:]
	}
	var out []byte
	for _, s := range sizes {
		if s >= len(msg) {
			break
		}
		out = append(out, tlsRecord(recordTypeHandshake, msg[:s])...)
		msg = msg[s:]
	}
	return append(out, tlsRecord(recordTypeHandshake, msg)...)
}

func TestClassifyStream(t *testing.T) {
	hello := clientHelloBytes(t, "api.test")
	noSNI := clientHelloBytes(t, "")
	alert := tlsRecord(recordTypeAlert, []byte{1, 90}) // warning, user_canceled
	frag := fragmentHello(t, hello, 1, 2, 3, 50)
	tests := []struct {
		name    string
		in      []byte
		kind    streamKind
		sni     string
		hasSNI  bool
		refused bool // a *helloError
		err     bool // any other error
	}{
		{name: "crypto/tls hello", in: hello, kind: streamTLS, sni: "api.test", hasSNI: true},
		{name: "bytes after the hello stay", in: append(bytes.Clone(hello), "after"...), kind: streamTLS, sni: "api.test", hasSNI: true},
		{name: "no SNI", in: noSNI, kind: streamTLS},
		{name: "fragmented over records", in: frag, kind: streamTLS, sni: "api.test", hasSNI: true},
		{name: "one byte per record", in: fragmentHello(t, hello, ones(len(hello))...), kind: streamTLS, sni: "api.test", hasSNI: true},
		{name: "built hello", in: tlsRecord(recordTypeHandshake, helloMessage(sniExt("a.test"))), kind: streamTLS, sni: "a.test", hasSNI: true},
		{name: "no extensions block", in: tlsRecord(recordTypeHandshake, helloMessage()), kind: streamTLS},
		{name: "warning alert first", in: append(bytes.Clone(alert), hello...), kind: streamTLS, refused: true},
		{name: "change cipher spec first", in: append(tlsRecord(recordTypeChangeCipherSpec, []byte{1}), hello...), kind: streamTLS, refused: true},
		{name: "application data first", in: append(tlsRecord(recordTypeApplicationData, []byte("x")), hello...), kind: streamTLS, refused: true},
		{name: "alert between fragments", in: append(append(tlsRecord(recordTypeHandshake, helloMessage(sniExt("a.test"))[:10]), alert...),
			tlsRecord(recordTypeHandshake, helloMessage(sniExt("a.test"))[10:])...), kind: streamTLS, refused: true},
		{name: "empty handshake record", in: append(tlsRecord(recordTypeHandshake, nil), hello...), kind: streamTLS, refused: true},
		{name: "oversized record", in: append([]byte{0x16, 3, 1, 0x40, 0x01}, make([]byte, 1<<14+1)...), kind: streamTLS, refused: true},
		{name: "record version 2", in: []byte{0x16, 2, 0, 0, 4, 1, 0, 0, 0}, kind: streamTLS, refused: true},
		{name: "not a ClientHello", in: tlsRecord(recordTypeHandshake, []byte{2, 0, 0, 0}), kind: streamTLS, refused: true},
		{name: "two messages in the records", in: tlsRecord(recordTypeHandshake, append(helloMessage(sniExt("a.test")), 1, 0, 0, 0)), kind: streamTLS, refused: true},
		{name: "two server names", in: tlsRecord(recordTypeHandshake, helloMessage(sniExt("a.test", "b.test"))), kind: streamTLS, refused: true},
		{name: "two SNI extensions", in: tlsRecord(recordTypeHandshake, helloMessage(sniExt("a.test"), sniExt("b.test"))), kind: streamTLS, refused: true},
		{name: "empty server name", in: tlsRecord(recordTypeHandshake, helloMessage(sniExt(""))), kind: streamTLS, refused: true},
		{name: "server name with NUL", in: tlsRecord(recordTypeHandshake, helloMessage(sniExt("a.test\x00.evil.test"))), kind: streamTLS, refused: true},
		{name: "server name type 1", in: tlsRecord(recordTypeHandshake, helloMessage(rawExt(extServerName, u16vec([]byte{1, 0, 1, 'x'})))), kind: streamTLS, refused: true},
		{name: "empty server_name extension", in: tlsRecord(recordTypeHandshake, helloMessage(rawExt(extServerName, nil))), kind: streamTLS, refused: true},
		{name: "encrypted ClientHello", in: tlsRecord(recordTypeHandshake, helloMessage(sniExt("public.test"), rawExt(extECH, []byte{0, 1}))), kind: streamTLS, refused: true},
		{name: "draft ESNI", in: tlsRecord(recordTypeHandshake, helloMessage(rawExt(extESNI, []byte{0}))), kind: streamTLS, refused: true},
		{name: "truncated extension", in: tlsRecord(recordTypeHandshake, helloMessageTruncatedExt()), kind: streamTLS, refused: true},
		{name: "SSLv2 compatible hello", in: []byte{0x80, 0x2e, 0x01, 0x03, 0x01, 0, 0x15, 0, 0, 0, 0x10}, kind: streamTLS, refused: true},
		{name: "truncated hello", in: hello[:len(hello)/2], kind: streamTLS, err: true},
		{name: "HTTP", in: []byte("GET http://a.test/ HTTP/1.1\r\n\r\n"), kind: streamHTTP},
		{name: "HTTP after empty lines", in: []byte("\r\n\r\nGET / HTTP/1.1\r\nHost: evil.test\r\n\r\n"), kind: streamHTTP},
		{name: "HTTP with an odd method", in: []byte("X-Y / HTTP/1.1\r\nHost: evil.test\r\n\r\n"), kind: streamHTTP},
		{name: "HTTP lower-case version", in: []byte("FOO-1 / http/1.1\r\n"), kind: streamHTTP},
		{name: "HTTP/0.9", in: []byte("GET /\r\n"), kind: streamHTTP},
		{name: "lower-case method", in: []byte("get / HTTP/1.1\r\n\r\n"), kind: streamHTTP},
		{name: "HTTP/2 preface", in: []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), kind: streamHTTP},
		{name: "HTTP in one byte at a time", in: []byte("G"), kind: streamOther},
		{name: "raw UTF-8 target", in: []byte("X-Y /caf\xc3\xa9 HTTP/1.1\r\n"), kind: streamHTTP},
		{name: "tab separated", in: []byte("GET\t/ HTTP/1.1\r\n"), kind: streamHTTP},
		{name: "SSH banner", in: []byte("SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13\r\n"), kind: streamOther},
		{name: "binary", in: []byte{0x00, 0x01}, kind: streamOther},
		{name: "postgres startup", in: []byte{0, 0, 0, 8, 4, 0xd2, 0x16, 0x2f}, kind: streamOther},
		{name: "endless line", in: bytes.Repeat([]byte("a"), maxLinePeek+10), kind: streamUnknown, err: true},
		{name: "nothing", in: nil, kind: streamUnknown, err: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			br := bufio.NewReader(bytes.NewReader(tc.in))
			s, err := classifyStream(br)
			var he *helloError
			if errors.As(err, &he) != tc.refused || (err != nil && he == nil) != tc.err {
				t.Fatalf("error %v, want refused=%v other=%v", err, tc.refused, tc.err)
			}
			if s.kind != tc.kind || s.sni != tc.sni || s.hasSNI != tc.hasSNI {
				t.Fatalf("got kind %d sni %q hasSNI %v, want %d %q %v", s.kind, s.sni, s.hasSNI, tc.kind, tc.sni, tc.hasSNI)
			}
			rest, _ := io.ReadAll(br)
			if !bytes.Equal(append(bytes.Clone(s.first), rest...), tc.in) {
				t.Error("bytes taken and the rest do not rebuild the input")
			}
		})
	}
}

// helloMessageTruncatedExt is a ClientHello whose extensions block announces more than it
// holds.
func helloMessageTruncatedExt() []byte {
	m := helloMessage(sniExt("a.test"))
	m = m[:len(m)-2]
	n := len(m) - 4
	m[1], m[2], m[3] = byte(n>>16), byte(n>>8), byte(n)
	return m
}

// ones is n sizes of one byte.
func ones(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = 1
	}
	return out
}
