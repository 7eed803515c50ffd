package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/airlock-dev/airlock/policy"
)

// serveTransparent handles one connection the kernel redirected to the transparent
// listener. Its first bytes say what it is (classifyStream, the classifier CONNECT tunnels
// use): a TLS ClientHello is decided on its server name and tunnelled (or intercepted); HTTP
// is served request by request, each decided on its Host header. Either way the name is
// decided with the original port, and upstream is the original address only when the name
// resolves to it. Anything else is refused.
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
	br := bufio.NewReaderSize(c, classifyBuffer)
	s, err := classifyStream(br)
	switch {
	case err == nil && s.kind == streamHTTP:
		p.transparentHTTP(c, br, orig)
	case err == nil && s.kind == streamTLS:
		p.transparentTLS(c, br, orig, s)
	case errors.Is(err, errNothingSent) || (err != nil && s.kind == streamUnknown && !errors.Is(err, errLongLine)):
		p.cfg.Logger.WithField("client", c.RemoteAddr().String()).Debug("transparent connection sent nothing")
	default:
		t := p.newTunnel(kindTransparent, c.RemoteAddr())
		t.dest = orig.String()
		t.refuse(transparentRefusal(s, err, orig))
		t.finish()
	}
}

// transparentRefusal is the denial of a transparent connection whose first bytes are not
// TLS with a readable ClientHello, nor HTTP.
func transparentRefusal(s stream, err error, orig netip.AddrPort) policy.Decision {
	d := policy.Decision{Reason: policy.ReasonUnknownProtocol, Port: int(orig.Port()),
		Detail: "the connection speaks neither TLS nor HTTP"}
	var he *helloError
	switch {
	case errors.As(err, &he):
		d.Reason, d.Detail = policy.ReasonBadClientHello, "the connection's TLS bytes cannot be classified: "+he.reason
	case s.kind == streamTLS:
		d.Reason, d.Detail = policy.ReasonBadClientHello, "the client's TLS ClientHello could not be read"
	}
	return d
}

// transparentTLS decides a redirected TLS connection on its ClientHello's server name. One
// without a server name is decided on the original address: only a rule naming it by CIDR
// can allow it.
func (p *Proxy) transparentTLS(c net.Conn, br *bufio.Reader, orig netip.AddrPort, s stream) {
	t := p.newTunnel(kindTransparent, c.RemoteAddr())
	defer t.finish()
	t.dest = orig.String()
	host := s.sni
	if !s.hasSNI {
		host = orig.Addr().Unmap().String()
		if d := t.pol.Decide(policy.Request{Scheme: "https", Host: host, Port: int(orig.Port())}); !d.Allowed() || d.WouldDeny {
			t.refuse(policy.Decision{Reason: policy.ReasonSNIMissing, Port: int(orig.Port()),
				Detail: fmt.Sprintf("TLS connection to %s names no server (SNI), and no rule names the address by CIDR", orig)})
			return
		}
	}
	t.dest = net.JoinHostPort(host, strconv.Itoa(int(orig.Port())))
	req := policy.Request{Scheme: "https", Host: host, Port: int(orig.Port())}
	// Until the tunnel is established the client may leave (while an approval, a resolve
	// or the dial is waited for): that ends the wait.
	_ = c.SetReadDeadline(time.Time{})
	w := watchClient(context.Background(), c, br)
	defer w.stop()
	if resp := p.openTunnel(w.ctx, t, req, orig.Addr()); resp != nil {
		_ = resp.Body.Close() // nothing to answer in TLS: the connection just closes
		return
	}
	defer p.releaseTunnel()
	if t.d.Intercept {
		got := w.stop()
		client := &prefixConn{Conn: c, r: io.MultiReader(bytes.NewReader(s.first), bytes.NewReader(got), br)}
		t.setStatus(http.StatusOK)
		p.intercept(t, client)
		return
	}
	upstream, err := p.connectTunnel(w.ctx, t)
	got := w.stop()
	if err != nil {
		p.tunnelFailure(t, nil, err)
		return
	}
	defer upstream.Close()
	t.setStatus(http.StatusOK)
	// The bytes read to classify the connection (and while it was being opened) go first;
	// then the client's socket is read directly, so the relay can splice it.
	first := slices.Concat(s.first, got, peekBuffered(br))
	p.relay(t, c, upstream, func(*bufio.Reader) ([]byte, error) { return first, nil })
}

// peekBuffered returns the bytes br holds, without consuming them.
func peekBuffered(br *bufio.Reader) []byte {
	b, _ := br.Peek(br.Buffered())
	return b
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
	ups := p.newUpstreams(p.dialResolved(orig.Addr()), false) // cleartext: HTTP/1.1
	defer ups.closeIdle()
	port := strconv.Itoa(int(orig.Port()))
	srv := p.newServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &streamWriter{ResponseWriter: w}
		o := &origin{client: client, hostHeader: r.Host, headKnown: true, ups: ups, stream: sw, path: pathNetHTTP}
		w = sw
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
