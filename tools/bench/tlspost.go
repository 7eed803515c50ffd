package main

// The HTTPS section's request-shape legs, all to the intercepted host (the proxies inject
// the credential, the direct leg sends it itself): a JSON POST of 1 to 4 KiB framed by
// Content-Length, the same framed chunked, and a GET whose response is gzip-encoded JSON
// sent chunked. The upstream refuses a POST body that is not the JSON it expects (400) and,
// as for every request to the intercepted host, one without the injected header (403), so
// a counted request is a 2xx with the credential seen upstream.

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Paths of the request-shape legs on the TLS upstream.
const (
	postPath = "/post" // a JSON body of 1-4 KiB, answered with upstreamBody
	gzipPath = "/gzip" // gzipJSON, gzip-encoded, in two chunks
)

// postBodies are the POST legs' bodies, 1, 2, 3 and 4 KiB of JSON, sent in turn.
var postBodies = func() [][]byte {
	var out [][]byte
	for kib := 1; kib <= 4; kib++ {
		b := []byte(`{"model":"bench","messages":[{"role":"user","content":"`)
		b = append(b, strings.Repeat("x", kib<<10-len(b)-4)...)
		out = append(out, append(b, `"}]}`...))
	}
	return out
}()

// gzipJSON is the gzip leg's decoded body: about 9 KiB of JSON.
var gzipJSON = []byte("[" + strings.Repeat(`{"id":12345,"name":"airlock","tags":["egress","proxy"]},`, 160) + `{}]`)

// gzipped is gzipJSON compressed, as the upstream sends it.
var gzipped = func() []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	_, _ = zw.Write(gzipJSON)
	_ = zw.Close()
	return b.Bytes()
}()

// serveShape answers the request-shape legs' paths on the upstream; false for other paths.
func serveShape(w http.ResponseWriter, r *http.Request, served *atomic.Int64) bool {
	switch r.URL.Path {
	case postPath:
		b, err := io.ReadAll(r.Body)
		if err != nil || len(b) < 1<<10 || len(b) > 4<<10 || !bytes.HasPrefix(b, []byte(`{"model":"bench"`)) || !bytes.HasSuffix(b, []byte(`}]}`)) {
			http.Error(w, "not the bench's JSON body", http.StatusBadRequest)
			return true
		}
		served.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(upstreamBody)))
		_, _ = io.WriteString(w, upstreamBody)
		return true
	case gzipPath:
		served.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip")
		half := len(gzipped) / 2
		_, _ = w.Write(gzipped[:half])
		w.(http.Flusher).Flush() // no Content-Length: chunked
		_, _ = w.Write(gzipped[half:])
		return true
	}
	return false
}

// runPosts opens conns tunnels to the intercepted host and sends JSON POSTs on each, one
// at a time, for d: with Content-Length, or chunked.
func runPosts(ctx context.Context, c tlsClient, conns int, d time.Duration, chunked bool) (tlsResult, error) {
	return parallel(ctx, conns, d, func(ctx context.Context, more func() bool, ops *atomic.Int64) error {
		conn, err := c.open(ctx, tlsInjectHost, []string{"http/1.1"})
		if err != nil {
			return err
		}
		defer conn.Close()
		br := bufio.NewReaderSize(conn, 4096)
		for i := 0; more(); i++ {
			if err := c.post(conn, br, postBodies[i%len(postBodies)], chunked); err != nil {
				return err
			}
			ops.Add(1)
		}
		return nil
	})
}

// runGzip opens conns tunnels to the intercepted host and GETs the gzip-encoded chunked
// response on each, one at a time, for d.
func runGzip(ctx context.Context, c tlsClient, conns int, d time.Duration) (tlsResult, error) {
	return parallel(ctx, conns, d, func(ctx context.Context, more func() bool, ops *atomic.Int64) error {
		conn, err := c.open(ctx, tlsInjectHost, []string{"http/1.1"})
		if err != nil {
			return err
		}
		defer conn.Close()
		br := bufio.NewReaderSize(conn, 16<<10)
		for more() {
			if err := c.getGzip(conn, br); err != nil {
				return err
			}
			ops.Add(1)
		}
		return nil
	})
}

// requestHead is the head of a request to the intercepted host.
func (c tlsClient) requestHead(method, path string) string {
	_, port, _ := strings.Cut(c.upstream, ":")
	h := method + " " + path + " HTTP/1.1\r\nHost: " + net.JoinHostPort(tlsInjectHost, port) + "\r\n"
	if c.inject {
		h += "Authorization: Bearer " + tlsToken + "\r\n"
	}
	return h
}

// post sends one JSON POST; anything but 200 with the upstream's body is an error.
func (c tlsClient) post(conn net.Conn, br *bufio.Reader, body []byte, chunked bool) error {
	var req bytes.Buffer
	req.WriteString(c.requestHead(http.MethodPost, postPath))
	req.WriteString("Content-Type: application/json\r\n")
	if chunked {
		half := len(body) / 2
		fmt.Fprintf(&req, "Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n", half, body[:half], len(body)-half, body[half:])
	} else {
		fmt.Fprintf(&req, "Content-Length: %d\r\n\r\n%s", len(body), body)
	}
	if _, err := conn.Write(req.Bytes()); err != nil {
		return fmt.Errorf("send request: %w", err)
	}
	got, _, err := readOK(br, http.MethodPost)
	if err == nil && string(got) != upstreamBody {
		err = fmt.Errorf("body %q, want %q", got, upstreamBody)
	}
	return err
}

// getGzip GETs the gzip leg's response and checks it decodes to gzipJSON (a proxy that
// scrubs responses may pass it decoded).
func (c tlsClient) getGzip(conn net.Conn, br *bufio.Reader) error {
	if _, err := io.WriteString(conn, c.requestHead(http.MethodGet, gzipPath)+"Accept-Encoding: gzip\r\n\r\n"); err != nil {
		return fmt.Errorf("send request: %w", err)
	}
	got, resp, err := readOK(br, http.MethodGet)
	if err != nil {
		return err
	}
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(got))
		if err != nil {
			return fmt.Errorf("gunzip: %w", err)
		}
		if got, err = io.ReadAll(zr); err != nil {
			return fmt.Errorf("gunzip: %w", err)
		}
	}
	if !bytes.Equal(got, gzipJSON) {
		return fmt.Errorf("decoded body of %d bytes, want %d", len(got), len(gzipJSON))
	}
	return nil
}

// readOK reads a response that must be 200, and its body.
func readOK(br *bufio.Reader, method string) ([]byte, *http.Response, error) {
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		return nil, nil, fmt.Errorf("read response: %w", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	switch {
	case err != nil:
		return nil, nil, fmt.Errorf("read body: %w", err)
	case resp.StatusCode != http.StatusOK:
		return nil, nil, fmt.Errorf("status %s", resp.Status)
	}
	return body, resp, nil
}
