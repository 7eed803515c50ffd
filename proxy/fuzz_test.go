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

// FuzzReadClientHello parses arbitrary first bytes of a tunnel: no panic, and the bytes it
// consumed followed by what it left must be the input.
func FuzzReadClientHello(f *testing.F) {
	f.Add(clientHelloBytes(f, "api.test"))
	f.Add(clientHelloBytes(f, ""))
	f.Add([]byte{0x16, 3, 1, 0, 4, 1, 0, 0, 0})
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > maxFuzzInput {
			return
		}
		br := bufio.NewReader(bytes.NewReader(in))
		hello, consumed, err := readClientHello(br)
		rest, _ := io.ReadAll(br)
		if !bytes.Equal(append(bytes.Clone(consumed), rest...), in) {
			t.Fatalf("consumed %q + rest %q != input %q", consumed, rest, in)
		}
		if err == nil && hello.tls && len(in) > 0 && in[0] != recordTypeHandshake {
			t.Fatalf("TLS reported for first byte %#x", in[0])
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
