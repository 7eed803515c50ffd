package egress

// The upstream proxy: the corporate (often inspecting) HTTP proxy that every connection the
// sidecar opens goes through when the network reaches the internet only that way (issue 28).
// Both dial paths use it, the sandbox's (Guard) and the operator's (Operator), unless its
// NoProxy list exempts the destination.
//
// Through a proxy, the proxy resolves names itself, which would undo "dial only the checked
// address": a name that resolved to a public address for the guard could resolve to an
// internal one for the proxy (DNS rebinding). So by default the guard resolves and checks
// as without a proxy, and asks the proxy to CONNECT to the checked IP address and the
// destination's own port; the name travels only inside the tunnel (TLS SNI, Host). ByName is
// the documented opt-in for networks where the sidecar cannot resolve external names: it
// sends the name, and the proxy's resolution decides the address.
//
// Only CONNECT is spoken, for https:// and http:// destinations alike: an absolute-form
// request would show the request, injected credentials included, to the proxy. A proxy that
// refuses CONNECT to a port (Squid allows 443 only by default) fails the request closed with
// ErrUpstreamProxy. Basic is the only proxy authentication (NTLM and Negotiate are not
// supported). Nothing the proxy answers (status line aside, for the log) reaches the sandbox:
// its error bodies and headers are discarded, and the connection closed.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultConnectTimeout bounds one CONNECT through the upstream proxy (dialling the proxy,
// its TLS handshake and its answer) when UpstreamConfig.ConnectTimeout is zero.
const DefaultConnectTimeout = 10 * time.Second

// maxProxyHeaderBytes bounds the proxy's CONNECT answer head.
const maxProxyHeaderBytes = 64 << 10

// ProxyCredentials supplies the upstream proxy's Basic credentials (RFC 7617).
type ProxyCredentials interface {
	// ProxyCredentials returns the user and password. fresh asks for a new read past any
	// cache: the proxy answered 407 with the credentials last returned (they may have been
	// rotated). Errors are sent to the log, never the values.
	ProxyCredentials(ctx context.Context, fresh bool) (user, password string, err error)
}

// UpstreamConfig configures an Upstream.
type UpstreamConfig struct {
	// URL is the proxy, http://host:port or https://host:port (no path, query or user
	// information: credentials come from Credentials). A missing port is 80 or 443. Required.
	URL string
	// CAPEM holds PEM certificates (--upstream-proxy-ca) trusted besides the system roots:
	// to verify an https:// proxy's certificate, and, for an inspecting proxy that re-signs
	// the origins' certificates, every origin reached through it (Roots; the sandbox's CA
	// bundle gains them too). Empty means the system roots only.
	CAPEM []byte
	// Credentials supplies Basic credentials. Nil sends none.
	Credentials ProxyCredentials
	// ConnectTimeout bounds each CONNECT: dialling the proxy, the TLS handshake with an
	// https:// proxy, and its answer (a shorter context deadline wins). Zero means
	// DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// ByName asks the proxy to CONNECT to the destination's name instead of the address the
	// guard checked, for networks where the sidecar cannot resolve external names. The
	// guard still decides on the name and still refuses internal addresses it resolves,
	// but the proxy's own resolution decides where the connection goes: a name that
	// resolves to an internal address at the proxy reaches it. False (the default) sends
	// the checked address.
	ByName bool
	// NoProxy lists the destinations dialled directly, not through the proxy. The zero
	// value exempts nothing.
	NoProxy NoProxy
	// Dial connects to the proxy's host and port ("host:port"). Nil means a TCP net.Dialer
	// (the system resolver for a proxy given by name). Tests replace it.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Upstream opens tunnels through one upstream proxy. It is safe for concurrent use.
type Upstream struct {
	url     *url.URL
	addr    string // host:port of the proxy
	tls     *tls.Config
	creds   ProxyCredentials
	timeout time.Duration
	byName  bool
	noProxy NoProxy
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	cas     []*x509.Certificate
	roots   *x509.CertPool // system roots plus cas; nil when cas is empty
}

// NewUpstream validates cfg and returns its Upstream; it has no side effects. Errors wrap
// ErrInvalidConfig.
func NewUpstream(cfg UpstreamConfig) (*Upstream, error) {
	u, err := parseProxyURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	if cfg.ConnectTimeout < 0 {
		return nil, fmt.Errorf("validate upstream proxy: ConnectTimeout %s is negative (use 0 for the default): %w", cfg.ConnectTimeout, ErrInvalidConfig)
	}
	up := &Upstream{url: u, addr: u.Host, creds: cfg.Credentials, timeout: cfg.ConnectTimeout,
		byName: cfg.ByName, noProxy: cfg.NoProxy, dial: cfg.Dial}
	if up.timeout == 0 {
		up.timeout = DefaultConnectTimeout
	}
	if up.dial == nil {
		up.dial = (&net.Dialer{}).DialContext
	}
	if up.cas, err = parseCAs(cfg.CAPEM); err != nil {
		return nil, err
	}
	if len(up.cas) > 0 {
		if up.roots, err = x509.SystemCertPool(); err != nil || up.roots == nil {
			up.roots = x509.NewCertPool() // no system roots: the configured CAs alone
		}
		for _, c := range up.cas {
			up.roots.AddCert(c)
		}
	}
	if u.Scheme == "https" {
		up.tls = &tls.Config{ServerName: u.Hostname(), RootCAs: up.roots, MinVersion: tls.VersionTLS12,
			NextProtos: []string{"http/1.1"}}
	}
	return up, nil
}

// parseCAs parses PEM certificates; anything but CERTIFICATE blocks is an error.
func parseCAs(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for len(bytes.TrimSpace(b)) > 0 {
		blk, rest := pem.Decode(b)
		if blk == nil || blk.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("validate upstream proxy: CA file holds something other than PEM certificates: %w", ErrInvalidConfig)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("validate upstream proxy: CA certificate %d: %w: %w", len(out)+1, ErrInvalidConfig, err)
		}
		out, b = append(out, c), rest
	}
	return out, nil
}

// Roots returns the system roots plus the configured CAs (UpstreamConfig.CAPEM), for TLS to
// origins reached through the proxy; nil (the system roots) when no CA is configured or
// the Upstream is nil.
func (u *Upstream) Roots() *x509.CertPool {
	if u == nil {
		return nil
	}
	return u.roots
}

// CAs returns the configured CAs (for the sandbox's CA bundle).
func (u *Upstream) CAs() []*x509.Certificate {
	if u == nil {
		return nil
	}
	return u.cas
}

// parseProxyURL checks an upstream proxy URL and fills in its default port.
func parseProxyURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	switch {
	case raw == "":
		return nil, fmt.Errorf("validate upstream proxy: URL is empty: %w", ErrInvalidConfig)
	case err != nil:
		return nil, fmt.Errorf("validate upstream proxy: URL %q does not parse (use http://host:port): %w", raw, ErrInvalidConfig)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("validate upstream proxy: URL %q: scheme %q is not supported (use http:// or https://; socks is not): %w", raw, u.Scheme, ErrInvalidConfig)
	case u.User != nil:
		return nil, fmt.Errorf("validate upstream proxy: URL has user information (give the credentials in a file or from the credential broker, never in the URL): %w", ErrInvalidConfig)
	case u.Hostname() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("validate upstream proxy: URL %q: use scheme://host:port and nothing else: %w", raw, ErrInvalidConfig)
	}
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		u.Host = net.JoinHostPort(u.Hostname(), port)
	} else if p, err := strconv.ParseUint(u.Port(), 10, 16); err != nil || p == 0 {
		return nil, fmt.Errorf("validate upstream proxy: URL %q: bad port %q: %w", raw, u.Port(), ErrInvalidConfig)
	}
	u.Path = ""
	return u, nil
}

// String returns the proxy's URL (it never holds credentials).
func (u *Upstream) String() string { return u.url.String() }

// ByName reports whether tunnels are asked for by name (UpstreamConfig.ByName).
func (u *Upstream) ByName() bool { return u.byName }

// Direct reports whether a destination is exempt from the proxy (UpstreamConfig.NoProxy):
// its host (a name or IP literal) or addr (the checked address; the zero Addr when none)
// matches. A nil Upstream sends everything direct.
func (u *Upstream) Direct(host string, addr netip.Addr) bool {
	return u == nil || u.noProxy.Match(host, addr)
}

// Connect opens a tunnel to authority ("ip:port", or "name:port" with ByName) through the
// proxy and returns the connection, ready for the destination's bytes. On 407 with
// Credentials it reads them again (fresh) and tries once more. Errors wrap ErrUpstreamProxy:
// a *ProxyError for an answer other than 2xx, else the dial, TLS or read error (timeouts
// included, with context.DeadlineExceeded or a net.Error that says Timeout).
func (u *Upstream) Connect(ctx context.Context, authority string) (net.Conn, error) {
	c, err := u.connectOnce(ctx, authority, false)
	var pe *ProxyError
	if u.creds != nil && errors.As(err, &pe) && pe.Status == http.StatusProxyAuthRequired {
		c, err = u.connectOnce(ctx, authority, true)
	}
	return c, err
}

// connectOnce dials the proxy and asks it for one tunnel.
func (u *Upstream) connectOnce(ctx context.Context, authority string, fresh bool) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, u.timeout)
	defer cancel()
	auth, err := u.authorization(ctx, fresh)
	if err != nil {
		return nil, err
	}
	raw, err := u.dial(ctx, "tcp", u.addr)
	if err != nil {
		return nil, fmt.Errorf("dial upstream proxy %s: %w: %w", u.addr, ErrUpstreamProxy, err)
	}
	// Bound the whole exchange by ctx: a proxy that accepts and never answers is cut off.
	stop := context.AfterFunc(ctx, func() { _ = raw.SetDeadline(time.Unix(1, 0)) })
	conn, err := u.handshake(ctx, raw, authority, auth)
	if !stop() || err != nil {
		raw.Close()
		switch {
		case err == nil: // the deadline passed just as the answer came
			err = fmt.Errorf("upstream proxy %s: CONNECT %s: %w: %w", u.addr, authority, ErrUpstreamProxy, ctx.Err())
		case ctx.Err() != nil: // keep the deadline in the chain: callers tell timeouts apart
			err = fmt.Errorf("%w (%w)", err, ctx.Err())
		}
		return nil, err
	}
	return conn, nil
}

// authorization returns the Proxy-Authorization value ("" without Credentials).
func (u *Upstream) authorization(ctx context.Context, fresh bool) (string, error) {
	if u.creds == nil {
		return "", nil
	}
	user, pass, err := u.creds.ProxyCredentials(ctx, fresh)
	if err != nil {
		return "", fmt.Errorf("upstream proxy credentials: %w: %w", ErrUpstreamProxy, err)
	}
	if strings.Contains(user, ":") || strings.ContainsAny(user+pass, "\r\n") {
		return "", fmt.Errorf("upstream proxy credentials: the user name holds a colon or a line break: %w", ErrUpstreamProxy)
	}
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass)), nil
}

// handshake speaks TLS to an https:// proxy, sends the CONNECT and reads the answer.
func (u *Upstream) handshake(ctx context.Context, raw net.Conn, authority, auth string) (net.Conn, error) {
	conn := raw
	if u.tls != nil {
		tc := tls.Client(raw, u.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, fmt.Errorf("upstream proxy %s: TLS handshake: %w: %w", u.addr, ErrUpstreamProxy, err)
		}
		conn = tc
	}
	var b strings.Builder
	fmt.Fprintf(&b, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: airlock\r\n", authority, authority)
	if auth != "" {
		fmt.Fprintf(&b, "Proxy-Authorization: %s\r\n", auth)
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return nil, fmt.Errorf("upstream proxy %s: send CONNECT %s: %w: %w", u.addr, authority, ErrUpstreamProxy, err)
	}
	lim := &limitReader{r: conn, n: maxProxyHeaderBytes}
	br := bufio.NewReader(lim)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return nil, fmt.Errorf("upstream proxy %s: read answer to CONNECT %s: %w: %w", u.addr, authority, ErrUpstreamProxy, err)
	}
	if resp.StatusCode/100 != 2 {
		// The body, the headers and the reason phrase are the proxy's: none of it goes on.
		return nil, &ProxyError{Proxy: u.addr, Authority: authority, Status: resp.StatusCode}
	}
	lim.unlimit()
	if br.Buffered() == 0 {
		return conn, nil
	}
	return &bufferedConn{Conn: conn, r: br}, nil
}

// ProxyError is an upstream proxy's refusal of a CONNECT: any answer other than 2xx. It
// unwraps to ErrUpstreamProxy.
type ProxyError struct {
	// Proxy is the proxy's host:port.
	Proxy string
	// Authority is what the CONNECT asked for.
	Authority string
	// Status is the proxy's status code (407: authentication, 403: refused by its policy,
	// 502/503/504: it could not reach the destination).
	Status int
}

func (e *ProxyError) Error() string {
	return fmt.Sprintf("upstream proxy %s: CONNECT %s: %d %s", e.Proxy, e.Authority, e.Status, http.StatusText(e.Status))
}

// Unwrap returns ErrUpstreamProxy.
func (e *ProxyError) Unwrap() error { return ErrUpstreamProxy }

// limitReader reads at most n bytes until unlimit is called (the proxy's answer head is
// bounded; the tunnel's bytes are not).
type limitReader struct {
	r  io.Reader
	mu sync.Mutex // guards n
	n  int64      // bytes left; <0 means no limit
}

func (l *limitReader) Read(p []byte) (int, error) {
	l.mu.Lock()
	n := l.n
	l.mu.Unlock()
	if n == 0 {
		return 0, errors.New("upstream proxy answer head is too large")
	}
	if n > 0 && int64(len(p)) > n {
		p = p[:n]
	}
	k, err := l.r.Read(p)
	if n > 0 {
		l.mu.Lock()
		l.n -= int64(k)
		l.mu.Unlock()
	}
	return k, err
}

func (l *limitReader) unlimit() {
	l.mu.Lock()
	l.n = -1
	l.mu.Unlock()
}

// bufferedConn is a tunnel whose first bytes were read with the proxy's answer.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) {
	if c.r.Buffered() > 0 {
		return c.r.Read(p)
	}
	return c.Conn.Read(p)
}
