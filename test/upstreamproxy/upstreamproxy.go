// Package upstreamproxy plays the corporate proxy in airlock's tests: a small HTTP forward
// proxy that speaks CONNECT (over TCP or TLS), checks Basic credentials, and records every
// request it gets (method, authority, user, status), so a test can say what airlock asked it
// for and what it never saw. It can refuse with a chosen status, answer nothing (a slow
// proxy), and rotate its password. Its refusals carry a body, a header and a
// Proxy-Authenticate challenge that a test checks never reach the sandbox. Absolute-form
// requests are recorded and refused (airlock never sends them).
//
// Only tests import it (test/depcheck). Squid, in test/e2e, is the real corporate proxy.
package upstreamproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// LeakMarker is in every refusal's body and X-Proxy-Error header: a test asserts the
// sandbox never sees it.
const LeakMarker = "corp-proxy-internal-detail-7f3a"

// Config configures a Proxy.
type Config struct {
	// Users are the accepted Basic credentials (user → password). Nil accepts anyone
	// without credentials.
	Users map[string]string
	// Dial connects to a CONNECT authority (the proxy resolves names itself, through
	// this). Nil means a TCP net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// TLS, when set, makes the proxy an https:// proxy with this server configuration.
	TLS *tls.Config
}

// Entry is one request the proxy received.
type Entry struct {
	Method    string // CONNECT, or the method of an absolute-form request
	Authority string // the CONNECT target, or the absolute URL's host
	User      string // the Basic user sent, "" when none
	Status    int    // what the proxy answered
}

// Proxy is a running test proxy.
type Proxy struct {
	ln  net.Listener
	cfg Config
	wg  sync.WaitGroup

	// mu guards log, users, refuse, hang and conns.
	mu     sync.Mutex
	log    []Entry
	users  map[string]string
	refuse int
	hang   bool
	conns  map[net.Conn]bool
	closed bool
}

// Start serves cfg on ln until the test ends.
func Start(t testing.TB, ln net.Listener, cfg Config) *Proxy {
	t.Helper()
	p := &Proxy{ln: ln, cfg: cfg, conns: map[net.Conn]bool{}}
	if cfg.Users != nil {
		p.users = map[string]string{}
		for u, pw := range cfg.Users {
			p.users[u] = pw
		}
	}
	if p.cfg.Dial == nil {
		p.cfg.Dial = (&net.Dialer{}).DialContext
	}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.Close)
	return p
}

// URL returns the proxy's URL (http:// or https://, by address).
func (p *Proxy) URL() string {
	scheme := "http"
	if p.cfg.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + p.ln.Addr().String()
}

// Log returns the requests received so far.
func (p *Proxy) Log() []Entry {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Entry(nil), p.log...)
}

// SetPassword changes (or adds) user's password: a rotation.
func (p *Proxy) SetPassword(user, password string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.users == nil {
		p.users = map[string]string{}
	}
	p.users[user] = password
}

// SetRefuse makes the proxy answer every request with status (0: serve normally).
func (p *Proxy) SetRefuse(status int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = status
}

// SetHang makes the proxy read requests and never answer them.
func (p *Proxy) SetHang(hang bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hang = hang
}

// Close stops the proxy and closes every connection. It is idempotent.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

func (p *Proxy) track(c net.Conn, on bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on && p.closed {
		return false
	}
	if on {
		p.conns[c] = true
	} else {
		delete(p.conns, c)
	}
	return true
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.cfg.TLS != nil {
			c = tls.Server(c, p.cfg.TLS)
		}
		if !p.track(c, true) {
			c.Close()
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.track(c, false)
			defer c.Close()
			p.handle(c)
		}()
	}
}

// handle serves one client connection: one request.
func (p *Proxy) handle(c net.Conn) {
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	e := Entry{Method: req.Method, Authority: req.Host, User: basicUser(req)}
	p.mu.Lock()
	status, hang := p.status(req), p.hang
	p.mu.Unlock()
	if hang {
		_, _ = io.Copy(io.Discard, br) // until the client gives up
		return
	}
	var upstream net.Conn
	if status == http.StatusOK {
		if upstream, err = p.cfg.Dial(context.Background(), "tcp", req.Host); err != nil {
			status = http.StatusBadGateway
		}
	}
	e.Status = status
	p.mu.Lock()
	p.log = append(p.log, e)
	p.mu.Unlock()
	if status != http.StatusOK {
		refuse(c, status)
		return
	}
	defer upstream.Close()
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	go func() {
		_, _ = io.Copy(upstream, br)
		if cw, ok := upstream.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	}()
	_, _ = io.Copy(c, upstream)
}

// status decides the answer to req; p.mu is held.
func (p *Proxy) status(req *http.Request) int {
	switch {
	case p.refuse != 0:
		return p.refuse
	case req.Method != http.MethodConnect:
		return http.StatusMethodNotAllowed
	case p.users != nil && !p.authorized(req):
		return http.StatusProxyAuthRequired
	}
	return http.StatusOK
}

// authorized checks req's Basic credentials; p.mu is held.
func (p *Proxy) authorized(req *http.Request) bool {
	user, pass, ok := parseBasic(req.Header.Get("Proxy-Authorization"))
	want, known := p.users[user]
	return ok && known && want == pass
}

// refuse writes a refusal the way a corporate proxy does: a challenge, its own headers and
// an HTML body, each holding LeakMarker.
func refuse(c net.Conn, status int) {
	body := fmt.Sprintf("<html><body>%s: access denied by corporate policy</body></html>\n", LeakMarker)
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", status, http.StatusText(status))
	if status == http.StatusProxyAuthRequired {
		fmt.Fprintf(&b, "Proxy-Authenticate: Basic realm=%q\r\n", LeakMarker)
	}
	fmt.Fprintf(&b, "X-Proxy-Error: %s\r\nContent-Type: text/html\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", LeakMarker, len(body), body)
	_, _ = io.WriteString(c, b.String())
}

func basicUser(req *http.Request) string {
	user, _, _ := parseBasic(req.Header.Get("Proxy-Authorization"))
	return user
}

func parseBasic(h string) (user, pass string, ok bool) {
	v, found := strings.CutPrefix(h, "Basic ")
	if !found {
		return "", "", false
	}
	b, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return "", "", false
	}
	user, pass, ok = strings.Cut(string(b), ":")
	return user, pass, ok
}
