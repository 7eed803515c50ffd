package main

import (
	"context"
	"io"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// targetNetHTTP is the reference leg: the thinnest forwarding proxy Go's net/http allows,
// with no policy, no audit and no SSRF guard. airlock is built on goproxy and net/http, so
// this leg shows the ceiling any net/http-based proxy reaches on the machine. It is not a
// competitor: it has no audit trail, and that check does not apply to it.
const targetNetHTTP = "go-nethttp"

// nethttpRole is the first argument that turns this binary into the reference proxy.
const nethttpRole = "nethttp-proxy-child"

// runNetHTTPProxyChild serves the reference proxy on 127.0.0.1:0, prints "listening ADDR"
// on stdout, and exits when its stdin reaches EOF (the bench closed it, or died). GOGC is
// left at Go's default (the bench starts it without GOGC or GOMEMLIMIT); airlock runs with
// a GC target of 400 unless GOGC is set.
func runNetHTTPProxyChild() int {
	srv := &http.Server{
		Handler: &netHTTPProxy{transport: &http.Transport{
			Proxy:               nil, // never the caller's HTTP_PROXY
			MaxIdleConnsPerHost: 256,
			DisableCompression:  true, // pass bodies through as the upstream sent them
		}},
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          log.New(os.Stderr, "go-nethttp: ", 0),
	}
	return serveChild(targetNetHTTP, srv)
}

// netHTTPProxy forwards absolute-form http:// requests (RFC 9112 §3.2.2) and answers
// anything else, CONNECT included, with 400. It removes hop-by-hop headers, which every
// HTTP/1.1 proxy must, and does nothing more.
type netHTTPProxy struct {
	transport http.RoundTripper
}

func (p *netHTTPProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !isAbsoluteHTTP(r) {
		http.Error(w, "go-nethttp: only absolute-form http:// requests", http.StatusBadRequest)
		return
	}
	out := r.Clone(r.Context())
	out.RequestURI = "" // a client request must not have one
	removeHopByHop(out.Header)
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		http.Error(w, "go-nethttp: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	removeHopByHop(resp.Header)
	h := w.Header()
	for k, vs := range resp.Header {
		h[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

// isAbsoluteHTTP reports whether r is an absolute-form request for an http:// URL.
func isAbsoluteHTTP(r *http.Request) bool {
	return r.Method != http.MethodConnect && r.URL.IsAbs() && r.URL.Scheme == "http" && r.URL.Host != ""
}

// hopByHop are the headers RFC 9110 §7.6.1 says a proxy must not forward, plus the
// non-standard Proxy-Connection that clients still send.
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// removeHopByHop deletes the hop-by-hop headers and those the Connection header names.
func removeHopByHop(h http.Header) {
	for _, v := range h["Connection"] {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				h.Del(f)
			}
		}
	}
	for _, k := range hopByHop {
		h.Del(k)
	}
}

// startNetHTTP re-executes this binary as the reference proxy, with GOGC and GOMEMLIMIT
// removed from its environment so that the Go runtime's defaults apply.
func startNetHTTP(ctx context.Context, e *env, dir string) (*proxyRun, error) {
	var environ []string
	for _, kv := range withoutProxyEnv(os.Environ()) {
		if k, _, _ := strings.Cut(kv, "="); k != "GOGC" && k != "GOMEMLIMIT" {
			environ = append(environ, kv)
		}
	}
	p, addr, err := startSelf(ctx, targetNetHTTP, nethttpRole, environ, filepath.Join(dir, "go-nethttp.log"))
	if err != nil {
		return nil, err
	}
	e.progress("%s: listening on %s (bare net/http forwarder, GOGC default)", targetNetHTTP, addr)
	return &proxyRun{addr: addr, p: p}, nil
}
