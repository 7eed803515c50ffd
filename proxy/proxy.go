package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/airlock-dev/airlock/egress"
)

// maxAcceptDelay caps the back-off after a failed Accept on the transparent listener.
const maxAcceptDelay = time.Second

// Proxy is airlock's egress proxy. Create it with New, serve with Serve (explicit listener)
// and ServeTransparent (redirected connections), stop with Close or Shutdown.
type Proxy struct {
	cfg      Config
	metrics  *metrics
	guard    *egress.Guard
	gp       *goproxy.ProxyHttpServer
	srv      *http.Server // the explicit listener's server
	explicit *upstreams   // transports of absolute-form requests
	errorLog *log.Logger
	open     atomic.Int64 // tunnels holding a slot
	active   tracker      // tunnels and transparent connections, for Shutdown
	// slowConnect sends every CONNECT through net/http and goproxy, as before the fast path
	// (fastconnect.go): tests compare the two paths with it.
	slowConnect atomic.Bool

	// mu guards closed and listeners.
	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{} // transparent listeners being served
}

// New validates cfg and returns a Proxy that serves nothing yet. Its only effect outside
// the Proxy is registering its metrics on cfg.Registerer. Errors wrap ErrInvalidConfig, or
// are the registerer's error.
func New(cfg Config) (*Proxy, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		cfg:       cfg,
		metrics:   newMetrics(),
		guard:     cfg.Guard,
		errorLog:  log.New(logWriter{cfg.Logger}, "", 0),
		listeners: make(map[net.Listener]struct{}),
	}
	p.explicit = p.newUpstreams(p.dialResolved(netip.Addr{}), true) // https:// in absolute form may be HTTP/2
	p.gp = p.newGoproxy()
	p.srv = p.newServer(http.HandlerFunc(p.serveExplicit))
	p.srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		return context.WithValue(ctx, connKey, c)
	}
	if err := p.metrics.register(cfg.Registerer); err != nil {
		return nil, err
	}
	return p, nil
}

// Serve accepts explicit proxy connections (absolute-form HTTP and CONNECT) on l until Close
// or Shutdown, and closes l. It returns ErrClosed after Close or Shutdown, else the
// listener's error.
func (p *Proxy) Serve(l net.Listener) error {
	if p.isClosed() {
		_ = l.Close()
		return ErrClosed
	}
	p.guard.Self().AddListener(l)
	hl := newHeadListener(l, p.cfg.MaxHeaderBytes+4096)
	defer hl.Close()
	go p.acceptExplicit(hl)
	err := p.srv.Serve(hl)
	if errors.Is(err, http.ErrServerClosed) || p.isClosed() {
		return ErrClosed
	}
	return fmt.Errorf("serve explicit proxy: %w", err)
}

// ServeTransparent accepts connections the kernel redirected to l until Close or Shutdown,
// and closes l. It returns ErrNoOriginalDst when Config.OriginalDst is nil, ErrClosed after
// Close or Shutdown, else the listener's error.
func (p *Proxy) ServeTransparent(l net.Listener) error {
	if p.cfg.OriginalDst == nil {
		_ = l.Close()
		return fmt.Errorf("serve transparent proxy: %w", ErrNoOriginalDst)
	}
	if !p.addListener(l) {
		_ = l.Close()
		return ErrClosed
	}
	defer p.removeListener(l)
	p.guard.Self().AddListener(l)
	var delay time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if p.isClosed() {
				return ErrClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("serve transparent proxy: %w", err)
			}
			// Out of file descriptors and the like: back off as net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), maxAcceptDelay)
			p.cfg.Logger.WithError(err).Warn("transparent proxy: accept failed; retrying")
			time.Sleep(delay)
			continue
		}
		delay = 0
		e := p.active.add(c)
		go func() {
			defer p.active.remove(e)
			p.serveTransparent(c)
		}()
	}
}

// Close stops accepting connections: it closes the listeners and idle client connections.
// Requests in progress finish; open tunnels go on until they end (Shutdown waits for them).
// It is idempotent and returns nil.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	ls := p.listeners
	p.listeners = nil
	p.mu.Unlock()
	for l := range ls {
		_ = l.Close()
	}
	p.active.closeFresh()
	// An already-cancelled context makes Shutdown close the listeners and idle connections
	// and return at once; busy connections close after their current response.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = p.srv.Shutdown(ctx)
	p.explicit.closeIdle()
	return nil
}

// Shutdown closes the proxy (see Close) and waits for requests in progress and open tunnels
// to end, asking intercepted tunnels to stop keep-alive. When ctx ends first it closes every
// remaining connection and returns ctx's error.
func (p *Proxy) Shutdown(ctx context.Context) error {
	_ = p.Close()
	err := p.srv.Shutdown(ctx)
	if err != nil {
		_ = p.srv.Close()
	}
	if werr := p.active.wait(ctx); err == nil {
		err = werr
	}
	p.explicit.closeIdle()
	if err != nil {
		return fmt.Errorf("shut down proxy: %w", err)
	}
	return nil
}

func (p *Proxy) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

func (p *Proxy) addListener(l net.Listener) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.listeners[l] = struct{}{}
	return true
}

func (p *Proxy) removeListener(l net.Listener) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.listeners, l)
}

// tracker follows the connections that outlive their listener's accept loop (tunnels and
// transparent connections) so Shutdown can wait for them, ask them to drain, and close them
// when it stops waiting. The zero value is ready to use.
type tracker struct {
	// mu guards the fields below.
	mu       sync.Mutex
	conns    map[*trackedConn]struct{}
	drains   map[*func()]struct{}
	draining bool
	idle     chan struct{} // closed when conns empties while someone waits
}

type trackedConn struct {
	c io.Closer
	// fresh, when set, is a new explicit connection whose first head is being read: Close
	// closes it while no byte has arrived on it.
	fresh *headConn
}

// add tracks c until remove.
func (t *tracker) add(c io.Closer) *trackedConn {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.conns == nil {
		t.conns = make(map[*trackedConn]struct{})
	}
	e := &trackedConn{c: c}
	t.conns[e] = struct{}{}
	return e
}

// addFresh tracks a new explicit connection until remove; closeFresh closes it while no
// byte has arrived on it.
func (t *tracker) addFresh(c *headConn) *trackedConn {
	e := t.add(c)
	t.mu.Lock()
	defer t.mu.Unlock()
	e.fresh = c
	return e
}

// closeFresh closes the tracked new connections on which no byte has arrived, as net/http
// closes idle connections when its server shuts down.
func (t *tracker) closeFresh() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for e := range t.conns {
		if e.fresh != nil && !e.fresh.got.Load() {
			_ = e.c.Close()
		}
	}
}

func (t *tracker) remove(e *trackedConn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.conns, e)
	if len(t.conns) == 0 && t.idle != nil {
		close(t.idle)
		t.idle = nil
	}
}

// onDrain registers f to run when Shutdown starts (at once if it has), until stop.
func (t *tracker) onDrain(f func()) (stop func()) {
	t.mu.Lock()
	if t.drains == nil {
		t.drains = make(map[*func()]struct{})
	}
	t.drains[&f] = struct{}{}
	draining := t.draining
	t.mu.Unlock()
	if draining {
		f()
	}
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		delete(t.drains, &f)
	}
}

// wait drains and waits for every tracked connection to be removed; when ctx ends first it
// closes them all and returns ctx's error.
func (t *tracker) wait(ctx context.Context) error {
	t.mu.Lock()
	t.draining = true
	drains := make([]func(), 0, len(t.drains))
	for f := range t.drains {
		drains = append(drains, *f)
	}
	if len(t.conns) == 0 {
		t.mu.Unlock()
		return nil
	}
	if t.idle == nil {
		t.idle = make(chan struct{})
	}
	idle := t.idle
	t.mu.Unlock()
	for _, f := range drains {
		f()
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
	}
	t.mu.Lock()
	for e := range t.conns {
		if e.c != nil {
			_ = e.c.Close()
		}
	}
	t.mu.Unlock()
	return ctx.Err()
}
