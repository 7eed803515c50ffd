//go:build linux

package testnet

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Upstream is one host of the outside world: an address in the upstream namespace serving
// HTTP and HTTPS from the test process. Every response names the upstream, so a test can tell
// which host a request really reached:
//
//	upstream=198.18.0.10 port=80 host=allowed.test method=GET path=/x
type Upstream struct {
	// Addr is the host's address.
	Addr netip.Addr

	ca *CA
	ns *Netns

	// mu guards reqs.
	mu   sync.Mutex
	reqs []UpstreamRequest
}

// UpstreamRequest is what an upstream saw of one request.
type UpstreamRequest struct {
	Port   int
	TLS    bool
	SNI    string // TLS server name the client sent
	Host   string // Host header
	Method string
	Path   string // path and query as received
	Header http.Header
	Remote string // client address (airlock's, when proxied)
}

// ResponseBody is the body an upstream at addr answers on port for a request.
func ResponseBody(addr netip.Addr, port int, host, method, path string) string {
	return fmt.Sprintf("upstream=%s port=%d host=%s method=%s path=%s\n", addr, port, host, method, path)
}

func newUpstream(ns *Netns, ca *CA, addr netip.Addr) *Upstream {
	return &Upstream{Addr: addr, ca: ca, ns: ns}
}

// ListenHTTP starts a plain HTTP server on port until t ends.
func (u *Upstream) ListenHTTP(t testing.TB, port int) {
	t.Helper()
	u.serve(t, port, false)
}

// ListenHTTPS starts an HTTPS server on port until t ends; its certificate, from the test CA,
// names whatever SNI the client sent (the address when it sent none).
func (u *Upstream) ListenHTTPS(t testing.TB, port int) {
	t.Helper()
	u.serve(t, port, true)
}

// Requests returns the requests the upstream has received, oldest first.
func (u *Upstream) Requests() []UpstreamRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]UpstreamRequest(nil), u.reqs...)
}

func (u *Upstream) serve(t testing.TB, port int, useTLS bool) {
	addr := netip.AddrPortFrom(u.Addr, uint16(port)).String()
	l, err := u.ns.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("upstream: listen %s: %v", addr, err)
	}
	if useTLS {
		l = tls.NewListener(l, u.ca.ServerConfig(u.Addr.String()))
	}
	srv := &http.Server{
		Handler:           u.handler(port),
		ReadHeaderTimeout: 10 * time.Second,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("upstream %s: serve: %v", addr, err)
		}
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			srv.Close()
		}
		<-done
	})
}

func (u *Upstream) handler(port int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := UpstreamRequest{
			Port:   port,
			TLS:    r.TLS != nil,
			Host:   r.Host,
			Method: r.Method,
			Path:   r.URL.RequestURI(),
			Header: r.Header.Clone(),
			Remote: r.RemoteAddr,
		}
		if r.TLS != nil {
			rec.SNI = r.TLS.ServerName
		}
		u.mu.Lock()
		u.reqs = append(u.reqs, rec)
		u.mu.Unlock()
		body := ResponseBody(u.Addr, port, r.Host, r.Method, r.URL.Path)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Header().Set("X-Upstream", u.Addr.String())
		_, _ = w.Write([]byte(body))
	})
}

// Tripwire is a TCP listener that must never be connected to: a stand-in for an internal
// service (loopback, metadata, a private address) that airlock must not reach. It never
// accepts on its own; Connections drains the kernel's accept queue when asked, so the count
// does not depend on a goroutine having run.
type Tripwire struct {
	// Addr is the address it listens on.
	Addr string
	l    *net.TCPListener

	// mu guards count.
	mu    sync.Mutex
	count int
}

// NewTripwire listens on addr (ip:port) inside ns until t ends.
func NewTripwire(t testing.TB, ns *Netns, addr string) *Tripwire {
	t.Helper()
	l, err := ns.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("tripwire: listen %s: %v", addr, err)
	}
	t.Cleanup(func() { l.Close() })
	return &Tripwire{Addr: addr, l: l.(*net.TCPListener)}
}

// Connections accepts (and closes) every connection waiting in the accept queue and returns
// how many there have been since the tripwire was created. A connection whose handshake
// completed is in the queue even if the client has closed it since.
func (tw *Tripwire) Connections() (int, error) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	rc, err := tw.l.SyscallConn()
	if err != nil {
		return tw.count, err
	}
	var aerr error
	cerr := rc.Control(func(fd uintptr) {
		for {
			// The listener's socket is non-blocking (Go's poller owns it), so accept4
			// returns EAGAIN once the queue is empty.
			nfd, _, err := unix.Accept4(int(fd), unix.SOCK_CLOEXEC)
			if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ECONNABORTED) {
				continue
			}
			if err != nil {
				if !errors.Is(err, unix.EAGAIN) {
					aerr = fmt.Errorf("tripwire %s: accept: %w", tw.Addr, err)
				}
				return
			}
			unix.Close(nfd)
			tw.count++
		}
	})
	return tw.count, errors.Join(cerr, aerr)
}
