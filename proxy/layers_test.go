package proxy

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/binary"
	"io"
	"net/http"
	"strings"
	"testing"
)

func gz(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	_, _ = w.Write(b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func frame(flag byte, msg []byte) []byte {
	out := []byte{flag, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(out[1:], uint32(len(msg)))
	return append(out, msg...)
}

// An upstream echoes the injected credential inside a gzip-compressed gRPC-Web message, in a
// body that is itself gzip-encoded (and, for gRPC-Web text, base64 too). A browser-like
// client undoes every layer: it must find no secret, through a real intercepted tunnel.
func TestLayeredEncodingsThroughTheProxy(t *testing.T) {
	h := newStreamHarness(t)
	h.route(addrAPI, 443, h.upstream.tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		msg := frame(1, gz(t, []byte("echo "+r.Header.Get("Authorization"))))
		body := msg
		w.Header().Set("Content-Type", "application/grpc-web+proto")
		if strings.HasSuffix(r.URL.Path, "/text") {
			body = []byte(base64.StdEncoding.EncodeToString(msg))
			w.Header().Set("Content-Type", "application/grpc-web-text")
		}
		w.Header().Set("Grpc-Encoding", "gzip")
		w.Header().Set("Content-Encoding", "gzip")
		_, _ = w.Write(gz(t, body))
	}), "api.test"))
	c := h.client(h.airlockRoots())
	c.Transport.(*http.Transport).DisableCompression = true // the test undoes every layer itself
	for _, path := range []string{"/ok/binary", "/ok/text"} {
		resp, err := c.Get("https://api.test" + path)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %d %v", path, resp.StatusCode, err)
		}
		if resp.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			body, _ = io.ReadAll(zr)
		}
		if strings.HasSuffix(path, "/text") {
			if body, err = base64.StdEncoding.DecodeString(string(body)); err != nil {
				t.Fatalf("%s: base64: %v", path, err)
			}
		}
		if len(body) < 5 {
			t.Fatalf("%s: body %q", path, body)
		}
		msg := body[5 : 5+binary.BigEndian.Uint32(body[1:5])]
		if body[0]&1 != 0 {
			zr, err := gzip.NewReader(bytes.NewReader(msg))
			if err != nil {
				t.Fatal(err)
			}
			msg, _ = io.ReadAll(zr)
		}
		if bytes.Contains(msg, []byte(streamSecret)) || !bytes.HasPrefix(msg, []byte("echo Bearer ")) {
			t.Errorf("%s: the client reads %q", path, msg)
		}
	}
}
