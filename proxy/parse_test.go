package proxy

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func TestParseHead(t *testing.T) {
	tests := []struct {
		name    string
		head    string
		want    requestHead
		wantErr error
	}{
		{name: "absolute form", head: "GET http://a.test/ HTTP/1.1\r\nHost: b.test\r\n\r\n",
			want: requestHead{method: "GET", target: "http://a.test/", host: "b.test", hosts: 1}},
		{name: "no host", head: "GET http://a.test/ HTTP/1.0\r\n\r\n",
			want: requestHead{method: "GET", target: "http://a.test/"}},
		{name: "bare LF and odd spacing", head: "POST http://a.test/ HTTP/1.1\nhOsT:\t a.test \nContent-Length: 12\n\n",
			want: requestHead{method: "POST", target: "http://a.test/", host: "a.test", hosts: 1, bodyLen: 12}},
		{name: "two hosts", head: "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
			want: requestHead{method: "GET", target: "/", host: "a", hosts: 2}},
		{name: "chunked", head: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
			want: requestHead{method: "POST", target: "/", bodyLen: -1}},
		{name: "repeated equal Content-Length", head: "POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n",
			want: requestHead{method: "POST", target: "/", bodyLen: 3}},
		{name: "conflicting Content-Length", head: "POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
			want: requestHead{method: "POST", target: "/", bodyLen: -1}},
		{name: "signed Content-Length", head: "POST / HTTP/1.1\r\nContent-Length: +3\r\n\r\n",
			want: requestHead{method: "POST", target: "/", bodyLen: -1}},
		{name: "folded header", head: "GET / HTTP/1.1\r\nX-A: 1\r\n 2\r\n\r\n",
			want: requestHead{method: "GET", target: "/", bodyLen: -1}},
		{name: "CONNECT", head: "CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n",
			want: requestHead{method: "CONNECT", target: "a.test:443", host: "a.test:443", hosts: 1}},
		{name: "no protocol", head: "GET /\r\n\r\n", wantErr: errHeadMalformed},
		{name: "header without colon", head: "GET / HTTP/1.1\r\nHost a\r\n\r\n", wantErr: errHeadMalformed},
		{name: "empty request line", head: "\r\n\r\n", wantErr: errHeadMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			end := headEnd([]byte(tc.head), 0)
			if end != len(tc.head) {
				t.Fatalf("headEnd = %d, want %d", end, len(tc.head))
			}
			got, err := parseHead([]byte(tc.head))
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("got error %v, want %v", err, tc.wantErr)
			}
			if err == nil && got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestHeadEndIncremental(t *testing.T) {
	// The head ends at 27; a buffer that held any shorter prefix was searched in vain, and a
	// search resuming after it must still find the end.
	head := "GET / HTTP/1.1\r\nHost: a\r\n\r\nrest"
	for split := range 27 {
		if headEnd([]byte(head[:split]), 0) >= 0 {
			t.Fatalf("found a head end in the first %d bytes", split)
		}
		if got := headEnd([]byte(head), split); got != 27 {
			t.Errorf("headEnd from %d = %d, want 27", split, got)
		}
	}
}

// chunkConn is a net.Conn reading a fixed stream in small pieces.
type chunkConn struct {
	net.Conn
	r     io.Reader
	chunk int
}

func (c *chunkConn) Read(p []byte) (int, error) {
	if len(p) > c.chunk {
		p = p[:c.chunk]
	}
	return c.r.Read(p)
}

func TestHeadConnFraming(t *testing.T) {
	stream := "POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 40\r\n\r\n" +
		"GET http://fake.test/ HTTP/1.1\r\n\r\n\r\n\r\n" + // a body that looks like a head
		"GET http://b.test/ HTTP/1.1\r\nHost: c.test\r\n\r\n" +
		"POST http://d.test/ HTTP/1.1\r\nHost: d.test\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"0\r\n\r\nGET http://e.test/ HTTP/1.1\r\nHost: e.test\r\n\r\n"
	for _, chunk := range []int{1, 7, 4096} {
		hc := &headConn{Conn: &chunkConn{r: strings.NewReader(stream), chunk: chunk}, max: 1024}
		got, err := io.ReadAll(iotestOneByte(hc, chunk))
		if err != nil || string(got) != stream {
			t.Fatalf("chunk %d: read %q %v, want the stream unchanged", chunk, got, err)
		}
		var hosts []string
		for {
			h, ok := hc.pop()
			if !ok {
				break
			}
			hosts = append(hosts, h.host)
		}
		// The TE request ends head parsing: e.test is never parsed as a head.
		if strings.Join(hosts, ",") != "a.test,c.test,d.test" {
			t.Errorf("chunk %d: heads %v, want a.test, c.test, d.test", chunk, hosts)
		}
	}
}

// iotestOneByte reads r with buffers of size n, as a server's bufio would.
func iotestOneByte(r io.Reader, n int) io.Reader {
	return bufio.NewReaderSize(r, max(n, 16))
}

func TestHeadConnOversizedHead(t *testing.T) {
	stream := "GET / HTTP/1.1\r\nX: " + strings.Repeat("a", 100) + "\r\n\r\n"
	hc := &headConn{Conn: &chunkConn{r: strings.NewReader(stream), chunk: 10}, max: 64}
	got, err := io.ReadAll(hc)
	if err != nil || string(got) != stream {
		t.Fatalf("read %q %v, want the stream passed through", got, err)
	}
	if _, ok := hc.pop(); ok {
		t.Error("an oversized head was parsed")
	}
}

func TestParseAuthority(t *testing.T) {
	tests := []struct {
		in   string
		want authority
		ok   bool
	}{
		{in: "a.test", want: authority{host: "a.test"}, ok: true},
		{in: "a.test:443", want: authority{host: "a.test", port: 443}, ok: true},
		{in: "[::1]:80", want: authority{host: "::1", port: 80}, ok: true},
		{in: "[::1]", want: authority{host: "::1"}, ok: true},
		{in: "2130706433", want: authority{host: "2130706433"}, ok: true},
		{in: "", ok: false},
		{in: ":80", ok: false},
		{in: "::1", ok: false},
		{in: "a.test:0", ok: false},
		{in: "a.test:65536", ok: false},
		{in: "a.test:+80", ok: false},
		{in: "a.test:080808", ok: false},
		{in: "user@a.test", ok: false},
		{in: "a.test/x", ok: false},
		{in: "[::1]x", ok: false},
		{in: "a test", ok: false},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseAuthority(tc.in)
			if (err == nil) != tc.ok || got != tc.want {
				t.Errorf("parseAuthority(%q) = %+v, %v; want %+v ok=%v", tc.in, got, err, tc.want, tc.ok)
			}
		})
	}
}

func TestAgree(t *testing.T) {
	tests := []struct {
		name, host string
		port       int
		hdr        string
		ok         bool
	}{
		{name: "same", host: "a.test", port: 443, hdr: "a.test", ok: true},
		{name: "case and trailing dot", host: "a.test", port: 443, hdr: "A.Test.:443", ok: true},
		{name: "IP spelling", host: "127.0.0.1", port: 80, hdr: "2130706433", ok: true},
		{name: "other name", host: "a.test", port: 443, hdr: "b.test", ok: false},
		{name: "other port", host: "a.test", port: 443, hdr: "a.test:8443", ok: false},
		{name: "garbage", host: "a.test", port: 443, hdr: "a.test:x", ok: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := agree(tc.host, tc.port, tc.hdr); (got == "") != tc.ok {
				t.Errorf("agree(%q, %d, %q) = %q, want ok=%v", tc.host, tc.port, tc.hdr, got, tc.ok)
			}
		})
	}
}

// clientHelloBytes captures the first flight of a crypto/tls client for serverName.
func clientHelloBytes(t testing.TB, serverName string) []byte {
	t.Helper()
	client, server := net.Pipe()
	defer server.Close()
	go func() {
		tc := tls.Client(client, &tls.Config{ServerName: serverName, InsecureSkipVerify: true})
		tc.SetDeadline(time.Now().Add(waitTimeout))
		_ = tc.Handshake()
		client.Close()
	}()
	buf := make([]byte, 64<<10)
	server.SetReadDeadline(time.Now().Add(waitTimeout))
	n, err := server.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}
