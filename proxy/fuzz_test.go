package proxy

import (
	"bufio"
	"bytes"
	"io"
	"strings"
	"testing"
)

// maxFuzzInput keeps inputs small: real heads and ClientHellos are, and the fuzzer's
// minimiser stalls for minutes on inputs of tens of kilobytes. Even so, minimising through
// crypto/tls is slow: run with -fuzzminimizetime=0 (or a few seconds) for throughput.
const maxFuzzInput = 4096

// FuzzHeadConn feeds arbitrary client bytes through the explicit listener's head reader: it
// must hand the stream on unchanged, whatever it makes of it, and never panic.
func FuzzHeadConn(f *testing.F) {
	f.Add([]byte("GET http://a.test/ HTTP/1.1\r\nHost: b.test\r\n\r\n"), uint8(3))
	f.Add([]byte("POST http://a.test/ HTTP/1.1\r\nContent-Length: 4\r\n\r\nbodyGET / HTTP/1.1\r\n\r\n"), uint8(1))
	f.Add([]byte("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"), uint8(200))
	f.Add([]byte("CONNECT a.test:443 HTTP/1.1\r\n\r\n\x16\x03\x01"), uint8(7))
	f.Fuzz(func(t *testing.T, stream []byte, chunk uint8) {
		if len(stream) > maxFuzzInput {
			return
		}
		if end := headEnd(stream, 0); end > len(stream) {
			t.Fatalf("headEnd = %d past the input (%d)", end, len(stream))
		} else if end > 0 {
			_, _ = parseHead(stream[:end])
		}
		hc := &headConn{Conn: &chunkConn{r: bytes.NewReader(stream), chunk: int(chunk) + 1}, max: 256}
		got, err := io.ReadAll(bufio.NewReaderSize(hc, 16))
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if !bytes.Equal(got, stream) {
			t.Fatalf("the head reader changed the stream:\n got %q\nwant %q", got, stream)
		}
	})
}

// FuzzClassifyStream classifies arbitrary first bytes of a tunnel: no panic; the bytes it
// took followed by what it left are the input; an accepted ClientHello names at most a
// printable server name and classifies the same from the bytes taken alone; and nothing but
// a handshake record is ever accepted as TLS.
func FuzzClassifyStream(f *testing.F) {
	hello := clientHelloBytes(f, "api.test")
	f.Add(hello)
	f.Add(clientHelloBytes(f, ""))
	f.Add(append(tlsRecord(recordTypeAlert, []byte{1, 90}), hello...))
	f.Add(fragmentHello(f, hello, 1, 3, 40))
	f.Add(tlsRecord(recordTypeHandshake, helloMessage(sniExt("a.test"), sniExt("b.test"))))
	f.Add(tlsRecord(recordTypeHandshake, helloMessage(rawExt(extECH, []byte{0}))))
	f.Add([]byte{0x80, 0x2e, 0x01, 0x03, 0x01})
	f.Add([]byte{0x16, 3, 1, 0, 4, 1, 0, 0, 0})
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > maxFuzzInput {
			return
		}
		br := bufio.NewReader(bytes.NewReader(in))
		s, err := classifyStream(br)
		rest, _ := io.ReadAll(br)
		if !bytes.Equal(append(bytes.Clone(s.first), rest...), in) {
			t.Fatalf("taken %q + rest %q != input %q", s.first, rest, in)
		}
		if err != nil || s.kind != streamTLS {
			return
		}
		if in[0] != recordTypeHandshake {
			t.Fatalf("TLS accepted with first byte %#x", in[0])
		}
		if strings.ContainsFunc(s.sni, func(r rune) bool { return r <= ' ' || r >= 0x7f }) || s.hasSNI != (s.sni != "") {
			t.Fatalf("accepted server name %q (hasSNI %v)", s.sni, s.hasSNI)
		}
		again, err := classifyStream(bufio.NewReader(bytes.NewReader(s.first)))
		if err != nil || again.sni != s.sni || !bytes.Equal(again.first, s.first) {
			t.Fatalf("the bytes taken classify differently: %+v, %v", again, err)
		}
	})
}

// FuzzParseAuthority: no panic; an accepted authority has a host and a valid port, and
// prints back to itself.
func FuzzParseAuthority(f *testing.F) {
	for _, s := range []string{"a.test", "a.test:443", "[::1]:80", "2130706433", "::1", "a@b", "[::1]x", "a:99999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := parseAuthority(s)
		if err != nil {
			return
		}
		if a.host == "" || a.port < 0 || a.port > 65535 || strings.ContainsAny(a.host, "/@ ") {
			t.Fatalf("parseAuthority(%q) accepted %+v", s, a)
		}
		b, err := parseAuthority(a.withPort(1))
		if err != nil || b.host != a.host {
			t.Fatalf("round trip of %+v: %+v, %v", a, b, err)
		}
	})
}
