package proxy

// WebSocket over HTTP/2 (RFC 8441 extended CONNECT) on intercepted connections. The HTTP/2
// server advertises SETTINGS_ENABLE_CONNECT_PROTOCOL (net/http turns it on when GODEBUG
// holds http2xconnect=1 as it initialises, which proxy/internal/xconnect arranges), so a
// client may open a WebSocket as a stream: HEADERS with :method CONNECT, :protocol
// websocket, :scheme, :path and :authority, then WebSocket frames in the stream's DATA both
// ways once the server answers 200.
//
// The proxy turns such a stream into the HTTP/1.1 upgrade it already relays: a GET of
// :path with Upgrade: websocket and a fresh Sec-WebSocket-Key (RFC 8441 has none), which
// goes through goproxy and the exchange like any request in the tunnel (L7 rules decide it
// as a GET, credentials are injected, extensions are removed), and upstream over HTTP/1.1.
// Only the upstream's real 101 with a valid Sec-WebSocket-Accept (switchProtocols) becomes
// the client's 200; the frames then pass through the same relay (wsRelay) as over HTTP/1.1,
// with the stream standing in for the hijacked connection. A denial or failure is the
// stream's response as for any request. Any other :protocol is refused
// (upgrade_unsupported).

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/proxy/internal/xconnect"
)

func init() { xconnect.Restore() } // net/http, which this package imports, has read GODEBUG

// h2WebSocket serves an extended CONNECT stream with :protocol websocket through h (the
// tunnel's handler) as an HTTP/1.1 WebSocket upgrade of :path.
func (p *Proxy) h2WebSocket(w http.ResponseWriter, r *http.Request, h http.Handler) {
	var key [16]byte
	_, _ = rand.Read(key[:])
	up := r.Clone(r.Context())
	up.Method, up.Proto, up.ProtoMajor, up.ProtoMinor = http.MethodGet, "HTTP/1.1", 1, 1
	up.Header.Del(":protocol")
	up.Header.Set("Upgrade", "websocket")
	up.Header.Set("Connection", "Upgrade")
	up.Header.Set("Sec-WebSocket-Key", base64.StdEncoding.EncodeToString(key[:]))
	up.Body, up.ContentLength, up.RequestURI = http.NoBody, 0, r.URL.RequestURI()
	s := &h2Stream{w: w, body: r.Body, sem: make(chan struct{}, 1)}
	h.ServeHTTP(&h2WSWriter{ResponseWriter: w, s: s}, up)
	s.end()
}

// h2WSWriter is the response writer goproxy gets for an extended CONNECT stream: a 101 (the
// relayed upgrade, checked by switchProtocols) is written as 200 without the HTTP/1.1
// handshake headers, and Hijack then hands out the stream as the client connection.
type h2WSWriter struct {
	http.ResponseWriter
	s        *h2Stream
	switched bool
}

// WriteHeader writes the stream's response head: 200 for the relayed 101, code otherwise.
func (w *h2WSWriter) WriteHeader(code int) {
	if code != http.StatusSwitchingProtocols {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	for _, k := range []string{"Upgrade", "Connection", "Sec-Websocket-Accept", "Content-Length"} {
		w.Header().Del(k)
	}
	w.switched = true
	w.ResponseWriter.WriteHeader(http.StatusOK)
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack returns the stream as a connection, after the relayed 101 only.
func (w *h2WSWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if !w.switched {
		return nil, nil, errors.New("hijack an HTTP/2 stream that has not switched to WebSocket")
	}
	return w.s, bufio.NewReadWriter(bufio.NewReader(w.s), bufio.NewWriter(w.s)), nil
}

// Flush flushes what was written.
func (w *h2WSWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

// Unwrap is for http.ResponseController.
func (w *h2WSWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// h2Stream is an extended CONNECT stream as a net.Conn for the WebSocket relay: Read reads
// the stream's DATA (the request body), Write writes and flushes the response body. The
// response writer must not be used once the handler has returned, so writes stop then:
// end (the handler's last step) waits for a write in flight, resetting the stream if one is
// (a client that reads nothing would hold it forever).
type h2Stream struct {
	w    http.ResponseWriter
	body io.ReadCloser

	sem    chan struct{} // held by a write in flight
	closed atomic.Bool   // no more writes

	mu   sync.Mutex // guards done; held while the stream is reset
	done bool       // the handler has returned
}

// Read reads the client's bytes from the stream.
func (s *h2Stream) Read(b []byte) (int, error) { return s.body.Read(b) }

// Write sends b to the client on the stream.
func (s *h2Stream) Write(b []byte) (int, error) {
	s.sem <- struct{}{}
	defer func() { <-s.sem }()
	if s.closed.Load() {
		return 0, net.ErrClosed
	}
	n, err := s.w.Write(b)
	if err == nil {
		err = http.NewResponseController(s.w).Flush()
	}
	return n, err
}

// Close stops the stream both ways: reads fail, writes stop, and a write in flight is cut
// off by resetting the stream.
func (s *h2Stream) Close() error {
	s.closed.Store(true)
	_ = s.body.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return nil
	}
	select {
	case s.sem <- struct{}{}:
		<-s.sem
	default: // a write is in flight: a past write deadline resets the stream, which ends it
		_ = http.NewResponseController(s.w).SetWriteDeadline(time.Unix(1, 0))
	}
	return nil
}

// end closes the stream and waits for a write in flight, before the handler returns.
func (s *h2Stream) end() {
	_ = s.Close()
	s.sem <- struct{}{}
	<-s.sem
	s.mu.Lock()
	s.done = true
	s.mu.Unlock()
}

// LocalAddr is the tunnel's address; the relay does not use it.
func (s *h2Stream) LocalAddr() net.Addr { return h2StreamAddr{} }

// RemoteAddr is the client's address; the relay does not use it.
func (s *h2Stream) RemoteAddr() net.Addr { return h2StreamAddr{} }

// SetDeadline is not supported on a stream; the relay's idle timer closes it instead.
func (s *h2Stream) SetDeadline(time.Time) error { return errors.ErrUnsupported }

// SetReadDeadline is not supported on a stream.
func (s *h2Stream) SetReadDeadline(time.Time) error { return errors.ErrUnsupported }

// SetWriteDeadline is not supported on a stream.
func (s *h2Stream) SetWriteDeadline(time.Time) error { return errors.ErrUnsupported }

// h2StreamAddr is the address of an HTTP/2 stream.
type h2StreamAddr struct{}

func (h2StreamAddr) Network() string { return "h2" }
func (h2StreamAddr) String() string  { return "http2-stream" }

// isWebSocketProtocol reports whether an extended CONNECT's :protocol is websocket.
func isWebSocketProtocol(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get(":protocol"), "websocket")
}
