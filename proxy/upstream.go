package proxy

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"

	"github.com/airlock-dev/airlock/policy"
)

// maxRetired bounds how many transports of replaced policies are remembered for closing.
const maxRetired = 8

// dialFunc connects to host:port for exchange x; it resolves and checks through the guard.
type dialFunc func(ctx context.Context, x *exchange, host string, port int) (net.Conn, error)

// upstreams hands out the http.Transport for the policy in force. A transport's pooled
// connections were dialled (and their addresses checked) under one policy; a request under
// another policy gets a fresh transport, so a reload that withdraws an address is never
// bypassed by a kept-alive connection.
type upstreams struct {
	build func() *http.Transport

	// mu guards pol, cur and retired.
	mu      sync.Mutex
	pol     *policy.Policy
	cur     *http.Transport
	retired []*http.Transport
}

// get returns the transport for pol.
func (u *upstreams) get(pol *policy.Policy) *http.Transport {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.cur != nil && u.pol == pol {
		return u.cur
	}
	if u.cur != nil {
		u.cur.CloseIdleConnections()
		u.retired = append(u.retired, u.cur)
		if len(u.retired) > maxRetired {
			u.retired = u.retired[1:]
		}
		for _, t := range u.retired {
			t.CloseIdleConnections()
		}
	}
	u.pol, u.cur = pol, u.build()
	return u.cur
}

// closeIdle closes the idle connections of every transport.
func (u *upstreams) closeIdle() {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, t := range append(u.retired, u.cur) {
		if t != nil {
			t.CloseIdleConnections()
		}
	}
}

// newUpstreams returns transports that dial through dial. Upstream TLS is always verified
// against Config.UpstreamRoots, and the sidecar's own HTTP(S)_PROXY environment is ignored.
// With h2, HTTPS upstreams that offer HTTP/2 in ALPN are spoken to in HTTP/2; without, always
// HTTP/1.1. An intercepted tunnel's upstream protocol follows its client's: an HTTP/1.1
// client sends one request at a time on a connection, which one HTTP/1.1 upstream connection
// carries at the least cost to both ends (an HTTP/2 server spends a goroutine, a write
// scheduler and flow control per request: measured by make bench, intercepted keep-alive);
// an HTTP/2 client's concurrent streams (gRPC among them, which needs HTTP/2 end to end)
// share one HTTP/2 upstream connection.
func (p *Proxy) newUpstreams(dial dialFunc, h2 bool) *upstreams {
	return &upstreams{build: func() *http.Transport {
		t := &http.Transport{
			Proxy: nil, // never the sidecar's own HTTP(S)_PROXY
			DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
				x := exchangeFrom(ctx)
				if x == nil {
					return nil, errNoExchange
				}
				host, port, err := net.SplitHostPort(addr)
				if err != nil {
					return nil, err
				}
				n, err := strconv.Atoi(port)
				if err != nil {
					return nil, err
				}
				return dial(ctx, x, host, n)
			},
			TLSClientConfig:        &tls.Config{RootCAs: p.cfg.UpstreamRoots, MinVersion: tls.VersionTLS12},
			TLSHandshakeTimeout:    p.cfg.DialTimeout,
			ResponseHeaderTimeout:  p.cfg.ResponseHeaderTimeout,
			IdleConnTimeout:        p.cfg.IdleTimeout,
			MaxIdleConnsPerHost:    maxIdlePerHost,
			MaxIdleConns:           maxIdleTotal,
			MaxResponseHeaderBytes: int64(p.cfg.MaxHeaderBytes),
			DisableCompression:     true, // relay bodies as the upstream sent them
			// HTTP/2 when the upstream offers it in ALPN, else HTTP/1.1; a WebSocket upgrade
			// always goes over HTTP/1.1 (net/http keeps it off HTTP/2).
			ForceAttemptHTTP2: h2,
		}
		if !h2 {
			// A non-nil empty map keeps net/http from adding HTTP/2 on its own.
			t.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		return t
	}}
}

// Upstream keep-alive pool sizes. A sandbox's clients often keep many connections to one host
// (package managers, SDK pools); a pool smaller than that churns a new upstream connection for
// a share of the requests (measured by make bench: 16 per host cost about a third of the
// throughput at 32 client connections).
const (
	maxIdlePerHost = 256
	maxIdleTotal   = 1024
)

// dialResolved returns the dialFunc that resolves the name once, checks every address and
// dials a checked one. With want valid (transparent mode) the name must resolve to want,
// and only want is dialled.
func (p *Proxy) dialResolved(want netip.Addr) dialFunc {
	return func(ctx context.Context, x *exchange, host string, port int) (net.Conn, error) {
		t, err := p.resolve(ctx, x.pol, host, port, want)
		if err != nil {
			return nil, err
		}
		c, ap, err := p.connect(ctx, t)
		if err != nil {
			return nil, err
		}
		return &checkedConn{Conn: c, addr: ap}, nil
	}
}
