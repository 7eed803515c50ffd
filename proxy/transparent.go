package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/airlock-dev/airlock/policy"
)

// serveTransparent handles one connection the kernel redirected to the transparent
// listener. Its first bytes say what it is: a TLS ClientHello is decided on its server name
// and tunnelled (or intercepted); HTTP is served request by request, each decided on its
// Host header. Either way the name is decided with the original port, and upstream is the
// original address only when the name resolves to it.
func (p *Proxy) serveTransparent(c net.Conn) {
	defer c.Close()
	orig, err := p.cfg.OriginalDst.OriginalDst(c)
	if err != nil {
		t := p.newTunnel(kindTransparent, c.RemoteAddr())
		t.refuse(policy.Decision{Reason: policy.ReasonOriginalDstUnknown, Detail: "the original destination of the connection is unknown"})
		t.setError(err)
		t.finish()
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(p.cfg.headTimeout()))
	br := bufio.NewReader(c)
	first, err := br.Peek(1)
	switch {
	case err != nil:
		p.cfg.Logger.WithField("client", c.RemoteAddr().String()).Debug("transparent connection sent nothing")
	case first[0] == recordTypeHandshake:
		p.transparentTLS(c, br, orig)
	case first[0] >= 'A' && first[0] <= 'Z': // an HTTP method token
		p.transparentHTTP(c, br, orig)
	default:
		t := p.newTunnel(kindTransparent, c.RemoteAddr())
		t.dest = orig.String()
		t.refuse(policy.Decision{Reason: policy.ReasonUnknownProtocol, Port: int(orig.Port()),
			Detail: "the connection speaks neither TLS nor HTTP"})
		t.finish()
	}
}

// transparentTLS decides a redirected TLS connection on its ClientHello's server name.
func (p *Proxy) transparentTLS(c net.Conn, br *bufio.Reader, orig netip.AddrPort) {
	t := p.newTunnel(kindTransparent, c.RemoteAddr())
	defer t.finish()
	t.dest = orig.String()
	hello, first, err := readClientHello(br)
	switch {
	case err != nil:
		t.refuse(policy.Decision{Reason: policy.ReasonBadClientHello, Port: int(orig.Port()),
			Detail: "the client's TLS handshake could not be parsed"})
		return
	case hello.sni == "":
		t.refuse(policy.Decision{Reason: policy.ReasonSNIMissing, Port: int(orig.Port()),
			Detail: fmt.Sprintf("TLS connection to %s names no server (SNI)", orig)})
		return
	}
	t.dest = net.JoinHostPort(hello.sni, strconv.Itoa(int(orig.Port())))
	req := policy.Request{Scheme: "https", Host: hello.sni, Port: int(orig.Port())}
	if resp := p.openTunnel(t, req, orig.Addr()); resp != nil {
		_ = resp.Body.Close() // nothing to answer in TLS: the connection just closes
		return
	}
	defer p.releaseTunnel()
	_ = c.SetReadDeadline(time.Time{})
	client := &prefixConn{Conn: c, r: io.MultiReader(bytes.NewReader(first), br)}
	if t.d.Intercept {
		t.setStatus(http.StatusOK)
		p.intercept(t, client)
		return
	}
	upstream, err := p.connectTunnel(t)
	if err != nil {
		p.tunnelFailure(t, nil, err)
		return
	}
	defer upstream.Close()
	t.setStatus(http.StatusOK)
	p.relay(t, client, upstream, nil)
}

// transparentHTTP serves a redirected plain HTTP connection. It holds a tunnel slot while
// open; each request is an exchange like an absolute-form one, with the Host header's name
// and the original port as its URL host.
func (p *Proxy) transparentHTTP(c net.Conn, br *bufio.Reader, orig netip.AddrPort) {
	if !p.acquireTunnel() {
		t := p.newTunnel(kindTransparent, c.RemoteAddr())
		t.dest = orig.String()
		t.refuse(tunnelLimit("", "", int(orig.Port())))
		writeRaw(c, t.respond(failResponse(nil, policy.ReasonTunnelLimit, "", int(orig.Port()))))
		t.finish()
		return
	}
	defer p.releaseTunnel()
	_ = c.SetReadDeadline(time.Time{})
	client := c.RemoteAddr().String()
	ups := p.newUpstreams(p.dialResolved(orig.Addr()))
	defer ups.closeIdle()
	port := strconv.Itoa(int(orig.Port()))
	srv := p.newServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o := &origin{client: client, hostHeader: r.Host, headKnown: true, ups: ups}
		u := *r.URL
		u.Scheme, u.Host, u.User = "http", r.Host, nil
		if a, err := parseAuthority(r.Host); err == nil {
			u.Host = net.JoinHostPort(a.host, port)
		}
		r.URL = &u
		p.gp.ServeHTTP(w, r.WithContext(withOrigin(r.Context(), o)))
	}))
	p.serveConn(srv, &prefixConn{Conn: c, r: br})
}
