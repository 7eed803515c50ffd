package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/policy"
)

// intercept terminates the client's TLS with a leaf for the tunnel's host (after checking
// its server name) and serves the requests inside, each decided with its method and path.
// A client that speaks plain HTTP in the tunnel is served the same way, without TLS.
func (p *Proxy) intercept(t *tunnel, client net.Conn) {
	_ = client.SetReadDeadline(time.Now().Add(p.cfg.headTimeout()))
	br := bufio.NewReader(client)
	first, err := br.Peek(1)
	if err != nil {
		return
	}
	conn, scheme := net.Conn(&prefixConn{Conn: client, r: br}), "http"
	if first[0] == recordTypeHandshake {
		cfg := &tls.Config{
			MinVersion:       tls.VersionTLS12,
			NextProtos:       []string{"h2", "http/1.1"}, // HTTP/2 when the client offers it (h2.go)
			GetCertificate:   t.certificate,
			VerifyConnection: t.verifyServerName,
		}
		cfg.SetSessionTicketKeys(p.cfg.CA.ticketKeys())
		tc := tls.Server(conn, cfg)
		ctx, cancel := context.WithTimeout(context.Background(), p.cfg.headTimeout())
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			if !errors.Is(err, errSNIMismatch) {
				t.setError(err)
			}
			return
		}
		conn, scheme = tc, "https"
	}
	_ = client.SetReadDeadline(time.Time{})
	p.serveInner(t, conn, scheme)
}

// certificate is the intercepting server's GetCertificate: the client's server name must be
// the tunnel's host; a client that sends none (an IP host, or an old client) gets the
// tunnel host's leaf all the same.
func (t *tunnel) certificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if hello.ServerName != "" {
		if h, err := policy.NormalizeHost(hello.ServerName); err != nil || h.Name != t.host {
			t.refuse(sniMismatch(t, hello.ServerName))
			return nil, errSNIMismatch
		}
	}
	return t.p.cfg.CA.leaf(t.host)
}

// verifyServerName holds the server-name rule of certificate for a resumed session too,
// where the certificate is not asked for again.
func (t *tunnel) verifyServerName(cs tls.ConnectionState) error {
	if !cs.DidResume || cs.ServerName == "" {
		return nil
	}
	if h, err := policy.NormalizeHost(cs.ServerName); err != nil || h.Name != t.host {
		t.refuse(sniMismatch(t, cs.ServerName))
		return errSNIMismatch
	}
	return nil
}

// serveInner serves the requests inside an intercepted tunnel (HTTP/1.1, or HTTP/2 streams
// when TLS negotiated h2) until the connection closes or idles out. Each request goes through
// goproxy like an absolute-form one, with the tunnel's host as its URL host, and upstream
// connections go to the tunnel's checked addresses only.
func (p *Proxy) serveInner(t *tunnel, conn net.Conn, scheme string) {
	tc, _ := conn.(*tls.Conn)
	clientH2 := tc != nil && tc.ConnectionState().NegotiatedProtocol == "h2"
	t.ups = p.newUpstreams(t.dialPinned, clientH2) // the upstream protocol follows the client's
	defer t.ups.closeIdle()
	authority := t.authority()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &streamWriter{ResponseWriter: w}
		o := &origin{client: t.client, hostHeader: r.Host, headKnown: true, ups: t.ups, tunnel: t, stream: sw, path: pathNetHTTP}
		u := *r.URL
		u.Scheme, u.Host, u.User = scheme, authority, nil
		r.URL = &u
		p.gp.ServeHTTP(sw, r.WithContext(withOrigin(r.Context(), o)))
	})
	if clientH2 {
		p.serveH2(conn, p.h2Handler(t, conn, h))
		return
	}
	if !p.cfg.DisableHTTP1FastPath {
		c := p.newH1Conn(conn, nil, t.client)
		c.tunnel, c.scheme, c.authority = t, scheme, t.authority()
		handOff, rest := c.serve()
		if !handOff {
			_ = conn.Close()
			return
		}
		conn = &prefixConn{Conn: conn, r: io.MultiReader(bytes.NewReader(bytes.Clone(rest)), conn)}
	}
	p.serveConn(p.newServer(h), conn)
}

// authority is the tunnel's host:port, the URL host of the requests inside it.
func (t *tunnel) authority() string {
	return net.JoinHostPort(t.host, strconv.Itoa(t.port))
}

// serveConn serves one client connection with srv and returns when it is closed. Shutdown
// stops its keep-alive.
func (p *Proxy) serveConn(srv *http.Server, conn net.Conn) {
	ln := newConnListener(conn)
	stop := p.active.onDrain(func() { srv.SetKeepAlivesEnabled(false) })
	defer stop()
	_ = srv.Serve(ln)
	<-ln.done
}

// dialPinned is the dialFunc of an intercepted tunnel: the tunnel's addresses, resolved
// once when it opened, checked again under the policy of the request being forwarded.
func (t *tunnel) dialPinned(ctx context.Context, x *exchange, _ string, _ int) (net.Conn, error) {
	if err := t.p.guard.Check(t.target, x.pol); err != nil {
		return nil, err
	}
	c, ap, err := t.p.connect(ctx, t.target)
	if err != nil {
		return nil, err
	}
	return &checkedConn{Conn: c, addr: ap}, nil
}

// connListener is a net.Listener with one connection, for serving a single connection with
// an http.Server. Its second Accept blocks until the connection is closed, then fails, which
// ends Serve.
type connListener struct {
	conn net.Conn
	once sync.Once // hands the connection out once
	done chan struct{}
}

func newConnListener(c net.Conn) *connListener {
	l := &connListener{done: make(chan struct{})}
	l.conn = &closeNotifyConn{Conn: c, done: l.done}
	return l
}

func (l *connListener) Accept() (net.Conn, error) {
	var c net.Conn
	l.once.Do(func() { c = l.conn })
	if c != nil {
		return c, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

// Close does not close the connection: the server closes it when it is done with it.
func (l *connListener) Close() error { return nil }

func (l *connListener) Addr() net.Addr { return l.conn.LocalAddr() }

// closeNotifyConn closes done when the connection is closed.
type closeNotifyConn struct {
	net.Conn
	once sync.Once
	done chan struct{}
}

func (c *closeNotifyConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { close(c.done) })
	return err
}
