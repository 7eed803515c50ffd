package proxy

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"

	"github.com/airlock-dev/airlock/credentials"
)

// echoSecret is the secret the broker injects and the upstream echoes back.
const echoSecret = "s3cret-token-value-0123456789"

const echoEgress = `    - name: echo
      hosts: ["api.test"]
      ports: [443]
      inject:
        - header: Authorization
          value: 'Bearer {{ secret "tok" }}'
  secrets:
    tok: {env: TEST_TOK}
`

// echoingUpstream sends the injected token back in the form the "mode" query parameter
// names, whatever the request's Accept-Encoding says.
func echoingUpstream() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		text := []byte("you sent " + tok + " to me")
		mode := r.URL.Query().Get("mode")
		var enc func(io.Writer) io.WriteCloser
		switch mode {
		case "gzip":
			enc = func(w io.Writer) io.WriteCloser { return gzip.NewWriter(w) }
		case "deflate":
			enc = func(w io.Writer) io.WriteCloser { return zlib.NewWriter(w) }
		case "br":
			enc = func(w io.Writer) io.WriteCloser { return brotli.NewWriter(w) }
		case "zstd":
			enc = func(w io.Writer) io.WriteCloser { z, _ := zstd.NewWriter(w); return z }
		case "gzip, br":
			enc = func(w io.Writer) io.WriteCloser { return stacked(w) }
		case "compress":
			w.Header().Set("Content-Encoding", "compress")
			w.Write(text) // not really LZW: the proxy must not pass it either way
			return
		case "trailer":
			w.Header().Set("Trailer", "X-Echo")
			io.WriteString(w, "body first\n")
			w.(http.Flusher).Flush()
			w.Header().Set("X-Echo", tok)
			return
		default:
			if strings.HasPrefix(mode, "b64") { // b64-{std,url}-{raw,pad}-OFFSET
				f := strings.Split(mode, "-")
				e := map[string]*base64.Encoding{"std-pad": base64.StdEncoding, "std-raw": base64.RawStdEncoding,
					"url-pad": base64.URLEncoding, "url-raw": base64.RawURLEncoding}[f[1]+"-"+f[2]]
				prefix := strings.Repeat("\xfb", int(f[3][0]-'0'))
				io.WriteString(w, e.EncodeToString([]byte(prefix+tok+"\xfe,\"more\":1}"))) // the token at byte offset OFFSET
				return
			}
			w.Write(text)
			return
		}
		w.Header().Set("Content-Encoding", mode)
		var buf bytes.Buffer
		zw := enc(&buf)
		zw.Write(text)
		zw.Close()
		w.Write(buf.Bytes())
	})
}

// stacked is gzip inside br: "Content-Encoding: gzip, br".
func stacked(w io.Writer) io.WriteCloser {
	b := brotli.NewWriter(w)
	return &stackWriter{gz: gzip.NewWriter(b), br: b}
}

type stackWriter struct {
	gz *gzip.Writer
	br *brotli.Writer
}

func (s *stackWriter) Write(p []byte) (int, error) { return s.gz.Write(p) }
func (s *stackWriter) Close() error {
	s.gz.Close()
	return s.br.Close()
}

// decodeAll undoes codings as a client would, so the test sees what the sandbox reads.
func decodeAll(t *testing.T, body []byte, codings string) string {
	t.Helper()
	parts := strings.Split(codings, ",")
	for i := len(parts) - 1; i >= 0; i-- {
		var r io.Reader
		var err error
		switch strings.TrimSpace(parts[i]) {
		case "":
			continue
		case "gzip":
			r, err = gzip.NewReader(bytes.NewReader(body))
		case "deflate":
			r, err = zlib.NewReader(bytes.NewReader(body))
		case "br":
			r = brotli.NewReader(bytes.NewReader(body))
		case "zstd":
			var z *zstd.Decoder
			z, err = zstd.NewReader(bytes.NewReader(body))
			if err == nil {
				defer z.Close()
			}
			r = z
		default:
			return string(body)
		}
		if err != nil {
			t.Fatalf("decode %s: %v", parts[i], err)
		}
		if body, err = io.ReadAll(r); err != nil {
			t.Fatalf("decode %s: %v", parts[i], err)
		}
	}
	return string(body)
}

// TestEchoedSecretScrubbed: a secret a bound upstream echoes reaches the sandbox in no form:
// compressed whatever Accept-Encoding said (gzip, deflate, br, zstd, stacked), in a trailer,
// or base64 of a larger blob at offsets 0, 1 and 2, standard and URL alphabets, padded or
// not. A body the proxy cannot decode is refused.
func TestEchoedSecretScrubbed(t *testing.T) {
	doc := policyDoc("echo", "enforce", echoEgress)
	pol := mustPolicy(t, doc)
	h := newHarness(t, pol, func(c *Config) {
		b, err := credentials.New(credentials.Config{Policy: c.Policy,
			Env: credentials.EnvSource{Lookup: func(k string) (string, bool) { return echoSecret, k == "TEST_TOK" }}})
		if err != nil {
			t.Fatal(err)
		}
		c.Injector = b
	})
	h.route(addrAPI, 443, h.upstream.tlsServer(t, echoingUpstream(), "api.test"))
	c := h.client(h.airlockRoots())
	c.Transport.(*http.Transport).DisableCompression = true // see the bytes as sent
	modes := []string{"plain", "gzip", "deflate", "br", "zstd", "gzip, br", "trailer"}
	for _, alpha := range []string{"std", "url"} {
		for _, pad := range []string{"pad", "raw"} {
			for off := range 3 {
				modes = append(modes, fmt.Sprintf("b64-%s-%s-%d", alpha, pad, off))
			}
		}
	}
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			req, _ := http.NewRequest("GET", "https://api.test/echo?mode="+strings.ReplaceAll(mode, " ", "%20"), nil)
			req.Header.Set("Accept-Encoding", "identity")
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("got %d %q, %v", resp.StatusCode, raw, err)
			}
			seen := decodeAll(t, raw, resp.Header.Get("Content-Encoding")) + " " + strings.Join(resp.Trailer.Values("X-Echo"), " ")
			// A body of known length keeps it (the value masked with '*'); others get [REDACTED].
			marker := credentials.Redacted
			if resp.ContentLength >= 0 {
				marker = "****"
				if resp.ContentLength != int64(len(raw)) {
					t.Fatalf("Content-Length %d for a body of %d bytes", resp.ContentLength, len(raw))
				}
			}
			if strings.Contains(seen, echoSecret) || !strings.Contains(seen, marker) {
				t.Fatalf("the sandbox reads %q", seen)
			}
			if strings.HasPrefix(mode, "b64") {
				for off := range 3 {
					padded := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("\xfb", off) + echoSecret + "\xfe,\"more\":1}"))
					for _, s := range []string{padded, strings.NewReplacer("+", "-", "/", "_").Replace(padded)} {
						if strings.Contains(seen, strings.TrimRight(s, "=")) {
							t.Fatalf("the encoded echo passed: %q", seen)
						}
					}
				}
				if dec := decodeLoose(seen); strings.Contains(dec, "s3cret-token") {
					t.Fatalf("the scrubbed text still decodes to the secret: %q", dec)
				}
			}
		})
	}
	t.Run("undecodable", func(t *testing.T) {
		resp, body := get(t, c, "GET", "https://api.test/echo?mode=compress", nil)
		if resp.StatusCode != http.StatusForbidden || deniedJSON(t, body).Reason != "response_undecodable" {
			t.Fatalf("got %d %s, want 403 response_undecodable", resp.StatusCode, body)
		}
	})
}

// decodeLoose decodes every base64 run in s it can, in both alphabets, at every start.
func decodeLoose(s string) string {
	var out strings.Builder
	for _, run := range strings.FieldsFunc(s, func(r rune) bool {
		return !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || strings.ContainsRune("+/-_", r))
	}) {
		for start := range 4 {
			if start >= len(run) {
				break
			}
			r := run[start:]
			r = r[:len(r)/4*4]
			for _, e := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
				if b, err := e.DecodeString(r); err == nil {
					out.Write(b)
				}
			}
		}
	}
	return out.String()
}
