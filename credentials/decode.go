package credentials

import (
	"bufio"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
)

// Response bodies are scrubbed as the sandbox will read them: a secret an upstream echoes
// inside a compressed body would pass a scrubber that reads the compressed bytes. So every
// Content-Encoding the broker can decode is decoded before scrubbing, and the body is sent
// on in identity encoding.

// maxEncodings bounds stacked content codings ("gzip, br"); more is refused as undecodable.
const maxEncodings = 3

// maxZstdWindow bounds the memory a zstd frame may ask for (RFC 8878 §3.1.1.1.2 recommends
// decoders support at least 8 MiB windows; HTTP's zstd coding caps it at 8 MiB, RFC 9659).
const maxZstdWindow = 8 << 20

// maxTrailerDrain bounds what is read past the end of a decoded stream to reach the body's
// trailers.
const maxTrailerDrain = 64 << 10

// contentCodings returns the response's content codings in the order they were applied,
// lower case, without "identity". An empty list means the body is not encoded.
func contentCodings(h http.Header) []string {
	var out []string
	for _, v := range h.Values("Content-Encoding") {
		for _, c := range strings.Split(v, ",") {
			c = strings.ToLower(strings.TrimSpace(c))
			if c != "" && c != "identity" {
				out = append(out, c)
			}
		}
	}
	return out
}

// decodeBody returns a reader of body with codings undone (the last applied first). It fails
// with ErrUndecodable for a coding it does not know, or more than maxEncodings of them. The
// decoders start on first Read, so decodeBody itself never reads.
func decodeBody(body io.Reader, codings []string) (io.ReadCloser, error) {
	if len(codings) > maxEncodings {
		return nil, fmt.Errorf("%d stacked content codings: %w", len(codings), ErrUndecodable)
	}
	r := io.NopCloser(body)
	for i := len(codings) - 1; i >= 0; i-- {
		open, ok := decoders[codings[i]]
		if !ok {
			return nil, fmt.Errorf("content coding %q: %w", codings[i], ErrUndecodable)
		}
		r = &lazyDecoder{src: r, open: open}
	}
	return r, nil
}

// decoders open a reader of one content coding's decoded bytes.
var decoders = map[string]func(io.Reader) (io.ReadCloser, error){
	"gzip":   openGzip,
	"x-gzip": openGzip,
	"deflate": func(r io.Reader) (io.ReadCloser, error) {
		// HTTP's deflate is zlib (RFC 9110 §8.4.1.2), but some servers send raw deflate:
		// a zlib stream starts with a header whose 16-bit value is a multiple of 31.
		br := bufio.NewReader(r)
		if h, err := br.Peek(2); err == nil && h[0]&0x0f == 8 && (uint16(h[0])<<8|uint16(h[1]))%31 == 0 {
			return zlib.NewReader(br)
		}
		return flate.NewReader(br), nil
	},
	"br": func(r io.Reader) (io.ReadCloser, error) { return io.NopCloser(brotli.NewReader(r)), nil },
	"zstd": func(r io.Reader) (io.ReadCloser, error) {
		d, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxZstdWindow))
		if err != nil {
			return nil, err
		}
		return d.IOReadCloser(), nil
	},
}

func openGzip(r io.Reader) (io.ReadCloser, error) { return gzip.NewReader(r) }

// lazyDecoder opens its decoder on the first Read.
type lazyDecoder struct {
	src  io.ReadCloser
	open func(io.Reader) (io.ReadCloser, error)
	dec  io.ReadCloser
	err  error
}

func (l *lazyDecoder) Read(p []byte) (int, error) {
	if l.dec == nil && l.err == nil {
		l.dec, l.err = l.open(l.src)
		if l.err != nil {
			l.err = fmt.Errorf("decode response body: %w: %w", l.err, ErrUndecodable)
		}
	}
	if l.err != nil {
		return 0, l.err
	}
	n, err := l.dec.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = fmt.Errorf("decode response body: %w: %w", err, ErrUndecodable)
	}
	return n, err
}

func (l *lazyDecoder) Close() error {
	if l.dec != nil {
		_ = l.dec.Close()
	}
	return l.src.Close()
}

// scrubbedBody is a filtered response body: scrubbed reads of the (decoded) body; at its end
// the raw body is read to its end too, so net/http has filled in the trailers, and the
// trailers are scrubbed before the reader reports EOF (goproxy copies them after that).
type scrubbedBody struct {
	io.Reader // the scrubbed, decoded body
	dec       io.Closer
	raw       io.ReadCloser
	resp      *http.Response
	red       *Redactor
	done      bool
}

func (s *scrubbedBody) Read(p []byte) (int, error) {
	n, err := s.Reader.Read(p)
	if errors.Is(err, io.EOF) && !s.done {
		s.done = true
		_, _ = io.Copy(io.Discard, io.LimitReader(s.raw, maxTrailerDrain))
		s.red.Header(s.resp.Trailer)
	}
	return n, err
}

func (s *scrubbedBody) Close() error {
	if s.dec != nil {
		_ = s.dec.Close()
	}
	return s.raw.Close()
}
