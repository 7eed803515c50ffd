package credentials

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
)

// encoders compress with one coding, as an upstream would (the same names serve
// Content-Encoding and grpc-encoding).
var encoders = map[string]func(io.Writer) io.WriteCloser{
	"gzip": func(w io.Writer) io.WriteCloser { return gzip.NewWriter(w) },
	"deflate": func(w io.Writer) io.WriteCloser {
		return zlib.NewWriter(w)
	},
	"rawdeflate": func(w io.Writer) io.WriteCloser { fw, _ := flate.NewWriter(w, 5); return fw },
	"br":         func(w io.Writer) io.WriteCloser { return brotli.NewWriter(w) },
	"zstd": func(w io.Writer) io.WriteCloser {
		zw, _ := zstd.NewWriter(w, zstd.WithEncoderConcurrency(1))
		return zw
	},
}

func encode(t *testing.T, coding string, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := encoders[coding](&buf)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// clientView is what a client that undoes every layer reads: the body with the codings its
// response still declares undone, then (for gRPC) each message unframed (base64 first for
// gRPC-Web text) and decompressed with the response's grpc-encoding.
func clientView(t *testing.T, resp *http.Response, body []byte, grpc, text bool) []byte {
	t.Helper()
	codings := contentCodings(resp.Header)
	for i := len(codings) - 1; i >= 0; i-- {
		d, err := decodeBody(bytes.NewReader(body), codings[i:i+1])
		if err != nil {
			t.Fatalf("client cannot decode %q: %v", codings[i], err)
		}
		if body, err = io.ReadAll(d); err != nil {
			t.Fatalf("client decode %q: %v", codings[i], err)
		}
	}
	if !grpc {
		return body
	}
	if text { // four characters at a time: each message may end in its own padding
		var dec []byte
		for i := 0; i+4 <= len(body); i += 4 {
			var q [3]byte
			n, err := base64.StdEncoding.Decode(q[:], body[i:i+4])
			if err != nil {
				t.Fatalf("client base64: %v (%q)", err, body)
			}
			dec = append(dec, q[:n]...)
		}
		body = dec
	}
	var out []byte
	for len(body) > 0 {
		if len(body) < 5 {
			t.Fatalf("client: truncated frame %q", body)
		}
		n := binary.BigEndian.Uint32(body[1:5])
		if int64(n) > int64(len(body)-5) {
			t.Fatalf("client: frame of %d bytes in %d", n, len(body)-5)
		}
		msg := body[5 : 5+n]
		if body[0]&1 != 0 {
			d, err := decodeBody(bytes.NewReader(msg), []string{resp.Header.Get("Grpc-Encoding")})
			if err != nil {
				t.Fatalf("client message decode: %v", err)
			}
			if msg, err = io.ReadAll(d); err != nil {
				t.Fatalf("client message decode: %v", err)
			}
		}
		out = append(append(out, msg...), '|')
		body = body[5+n:]
	}
	return out
}

// A secret an upstream echoes must not reach the client through any stack of encodings the
// client undoes: content codings in any order over gRPC or gRPC-Web messages (binary or
// base64 text) compressed with any grpc-encoding, and over SSE.
func TestLayeredEncodingsScrubbed(t *testing.T) {
	h := newHarness(t)
	if _, err := h.b.Value(context.Background(), "tok"); err != nil {
		t.Fatal(err)
	}
	const secret = "tok-value-123"
	msg := []byte("echo [" + secret + "] done")
	framesOf := func(flag byte, msgs ...[]byte) []byte {
		var out []byte
		for _, m := range msgs {
			out = append(out, grpcFrame(flag, m)...)
		}
		return out
	}
	textOf := func(frames ...[]byte) []byte { // each frame base64-encoded on its own, padding and all
		var out []byte
		for _, f := range frames {
			out = base64.StdEncoding.AppendEncode(out, f)
		}
		return out
	}
	trailerFrame := grpcFrame(0x80, []byte("grpc-status: 0\r\ngrpc-message: "+secret+"\r\n"))
	for _, tc := range []struct {
		name, ctype, grpcEnc string
		codings              []string
		body                 func() []byte
	}{
		{"grpc gzip message under gzip body", "application/grpc", "gzip", []string{"gzip"},
			func() []byte { return framesOf(1, encode(t, "gzip", msg)) }},
		{"grpc deflate message under br body", "application/grpc+proto", "deflate", []string{"br"},
			func() []byte { return framesOf(1, encode(t, "deflate", msg)) }},
		{"grpc zstd message under deflate then gzip", "application/grpc", "zstd", []string{"deflate", "gzip"},
			func() []byte { return framesOf(1, encode(t, "zstd", msg)) }},
		{"grpc br message under zstd, gzip, deflate", "Application/GRPC; charset=utf-8", "br", []string{"zstd", "gzip", "deflate"},
			func() []byte { return framesOf(1, encode(t, "br", msg), encode(t, "br", []byte("second "+secret))) }},
		{"grpc plain message under x-gzip", "application/grpc", "", []string{"x-gzip"},
			func() []byte { return framesOf(0, msg) }},
		{"grpc gzip message under raw deflate", "application/grpc", "gzip", []string{"rawdeflate"},
			func() []byte { return framesOf(0, msg) }},
		{"grpc-web gzip message and trailer frame under gzip", "application/grpc-web+proto", "gzip", []string{"gzip"},
			func() []byte { return append(framesOf(1, encode(t, "gzip", msg)), trailerFrame...) }},
		{"grpc-web-text gzip message", "application/grpc-web-text", "gzip", nil,
			func() []byte { return textOf(framesOf(1, encode(t, "gzip", msg)), trailerFrame) }},
		{"grpc-web-text plain messages under br", "application/grpc-web-text+proto", "", []string{"br"},
			func() []byte { return textOf(framesOf(0, msg), framesOf(0, []byte("x"+secret)), trailerFrame) }},
		{"grpc-web-text zstd message under gzip, identity, deflate", "application/grpc-web-text", "zstd", []string{"gzip", "identity", "deflate"},
			func() []byte { return textOf(framesOf(1, encode(t, "zstd", msg)), trailerFrame) }},
		{"sse under gzip then br", "text/event-stream", "", []string{"gzip", "br"},
			func() []byte { return []byte("event: m\ndata: " + string(msg) + "\n\n") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := tc.body()
			for _, c := range tc.codings {
				if c != "identity" {
					body = encode(t, strings.TrimPrefix(c, "x-"), body)
				}
			}
			hdr := http.Header{"Content-Type": {tc.ctype}}
			if tc.grpcEnc != "" {
				hdr.Set("Grpc-Encoding", tc.grpcEnc)
			}
			if len(tc.codings) > 0 {
				// Raw deflate is sent as "deflate" by some servers; clients accept both.
				hdr.Set("Content-Encoding", strings.ReplaceAll(strings.Join(tc.codings, ", "), "rawdeflate", "deflate"))
			}
			resp := &http.Response{StatusCode: 200, Header: hdr, ContentLength: int64(len(body)),
				Body: io.NopCloser(bytes.NewReader(body))}
			resp, err := h.b.FilterResponse(resp, true)
			if err != nil {
				t.Fatalf("FilterResponse: %v", err)
			}
			got, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			ct := strings.ToLower(tc.ctype)
			seen := clientView(t, resp, got, strings.HasPrefix(ct, "application/grpc"), strings.Contains(ct, "grpc-web-text"))
			if bytes.Contains(seen, []byte(secret)) {
				t.Fatalf("the client reads the secret: %q", seen)
			}
			if !bytes.Contains(seen, []byte("echo [")) || !bytes.Contains(seen, []byte("] done")) {
				t.Fatalf("the client lost the message around the secret: %q", seen)
			}
		})
	}
}

// After an injection, a layer the broker cannot undo refuses the response or ends it with an
// error, whichever layer it is: never passes it on unscrubbed.
func TestLayeredUndecodableRefused(t *testing.T) {
	h := newHarness(t)
	if _, err := h.b.Value(context.Background(), "tok"); err != nil {
		t.Fatal(err)
	}
	msg := grpcFrame(1, []byte("snappy-ish tok-value-123"))
	for _, tc := range []struct {
		name, ctype, grpcEnc, codings string
		body                          []byte
	}{
		{"unknown message encoding under gzip", "application/grpc", "snappy", "gzip", encode(t, "gzip", msg)},
		{"compressed message, no grpc-encoding, under br", "application/grpc-web", "", "br", encode(t, "br", msg)},
		{"unknown message encoding in grpc-web-text", "application/grpc-web-text", "lz4", "", base64.StdEncoding.AppendEncode(nil, msg)},
		{"grpc-web-text that is not base64", "application/grpc-web-text", "", "", []byte("AAAA!!!!")},
		{"grpc-web-text cut inside a group", "application/grpc-web-text", "", "", []byte("AAAAAA")},
		{"unknown content coding over grpc", "application/grpc", "gzip", "gzip, compress", msg},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := http.Header{"Content-Type": {tc.ctype}, "Grpc-Encoding": {tc.grpcEnc}}
			if tc.codings != "" {
				hdr.Set("Content-Encoding", tc.codings)
			}
			resp, err := h.b.FilterResponse(&http.Response{StatusCode: 200, Header: hdr, ContentLength: -1,
				Body: io.NopCloser(bytes.NewReader(tc.body))}, true)
			if err == nil {
				var got []byte
				got, err = io.ReadAll(resp.Body)
				if err == nil {
					t.Fatalf("got %q, want a refusal or a read error", got)
				}
			}
			if !errors.Is(err, ErrUndecodable) {
				t.Fatalf("got %v, want ErrUndecodable", err)
			}
		})
	}
}
