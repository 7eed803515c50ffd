package dnsfilter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"
	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/policy"
)

// serverUDPSize is the largest UDP query the listener reads.
const serverUDPSize = 4096

// Filter is the DNS filter of one sandbox. It is safe for concurrent use. Create it with New,
// serve with Serve, stop with Close.
type Filter struct {
	cfg     Config
	x       *exchanger
	book    *book // the sandbox's own tasks' answers, opened in the AllowMap
	idBook  *book // identities' answers: tracked, never opened (identity.go)
	brake   *Brake
	decided decisions // DecideName per question name, for the current policy
	// idDecided holds each identity's decisions (identity name → *decisions).
	idDecided sync.Map
	metrics   *metrics
	log       *logrus.Logger
	resolv    []netip.AddrPort // nameservers of cfg.ResolvConf, read by New

	// mu guards servers and closed.
	mu      sync.Mutex
	servers []*server
	closed  bool
}

// server is one miekg/dns server and the channel closed once it runs (or failed to start).
type server struct {
	srv     *dns.Server
	started chan struct{}
	once    sync.Once
}

func (s *server) markStarted() { s.once.Do(func() { close(s.started) }) }

// New checks cfg and builds a Filter. It opens no socket. When no upstream is configured in
// cfg it reads cfg.ResolvConf, so that a policy without dns.upstreams still has a resolver;
// a missing file is not an error (the policy may name upstreams on reload). Errors wrap
// ErrInvalidConfig, or are a metrics registration error.
func New(cfg Config) (*Filter, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	f := &Filter{
		cfg:     cfg,
		x:       newExchanger(cfg),
		book:    newBook(cfg.AllowMap, cfg.Now),
		idBook:  newBook(nil, cfg.Now),
		brake:   cfg.Brake,
		metrics: newMetrics(),
		log:     cfg.Logger,
	}
	if len(cfg.Upstreams) == 0 {
		if f.resolv, err = resolvConfServers(cfg.ResolvConf); err != nil {
			f.log.WithError(err).Warn("dns filter: no resolv.conf upstreams; relying on the policy's dns.upstreams")
		}
	}
	if err := f.metrics.register(cfg.Registerer); err != nil {
		return nil, err
	}
	return f, nil
}

// Listen opens the UDP and TCP sockets of addr ("127.0.0.1:5353"). With port 0 both get the
// same port: the one the kernel picks for TCP (UDP ports are the scarcer kind to collide
// with: outgoing TCP connections hold TCP ports), tried again with a new one, a few times,
// when that port is taken for UDP.
func Listen(addr string) (net.PacketConn, net.Listener, error) {
	_, port, _ := net.SplitHostPort(addr)
	tries := 1
	if port == "0" {
		tries = 8
	}
	var err error
	for range tries {
		var l net.Listener
		if l, err = net.Listen("tcp", addr); err != nil {
			return nil, nil, fmt.Errorf("listen tcp %s: %w", addr, err)
		}
		pc, perr := net.ListenPacket("udp", l.Addr().String())
		if perr == nil {
			return pc, l, nil
		}
		l.Close()
		err = fmt.Errorf("listen udp %s: %w", l.Addr(), perr)
		if !errors.Is(perr, syscall.EADDRINUSE) {
			break
		}
	}
	return nil, nil, err
}

// Serve answers queries on pc (UDP) and l (TCP); either may be nil. It blocks until Close,
// and returns nil then, or the error that stopped a server. It takes ownership of both
// sockets. After Close it returns ErrClosed at once.
func (f *Filter) Serve(pc net.PacketConn, l net.Listener) error {
	var ss []*server
	if pc != nil {
		ss = append(ss, &server{srv: &dns.Server{PacketConn: plainIfBound(pc), Handler: f, UDPSize: serverUDPSize}, started: make(chan struct{})})
	}
	if l != nil {
		ss = append(ss, &server{srv: &dns.Server{Listener: l, Handler: f,
			ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, MaxTCPQueries: 1024}, started: make(chan struct{})})
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		closeAll(pc, l)
		return ErrClosed
	}
	f.servers = append(f.servers, ss...)
	f.mu.Unlock()

	errs := make(chan error, len(ss))
	for _, s := range ss {
		s.srv.NotifyStartedFunc = s.markStarted
		go func() {
			err := s.srv.ActivateAndServe()
			s.markStarted()
			errs <- err
		}()
	}
	var first error
	for range ss {
		if err := <-errs; err != nil && first == nil && !errors.Is(err, net.ErrClosed) {
			first = err
		}
	}
	f.mu.Lock()
	closed := f.closed
	f.mu.Unlock()
	if closed {
		return nil
	}
	return first
}

// closeAll closes the sockets that are not nil.
func closeAll(pc net.PacketConn, l net.Listener) {
	if pc != nil {
		pc.Close()
	}
	if l != nil {
		l.Close()
	}
}

// Close stops serving: it closes the sockets and waits (up to ctx) for the answers being
// written. It is idempotent.
func (f *Filter) Close(ctx context.Context) error {
	f.mu.Lock()
	ss := f.servers
	f.servers, f.closed = nil, true
	f.mu.Unlock()
	var errs []error
	for _, s := range ss {
		select {
		case <-s.started:
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := s.srv.ShutdownContext(ctx); err != nil && !isNotStarted(err) {
			errs = append(errs, err)
		}
		if s.srv.PacketConn != nil {
			s.srv.PacketConn.Close()
		}
	}
	f.x.close()
	return errors.Join(errs...)
}

// isNotStarted reports miekg/dns's error for a Shutdown of a server that already stopped.
func isNotStarted(err error) bool { return err != nil && err.Error() == "dns: server not started" }

// Resolved reports whether the filter handed out addr for name in an allowed answer whose
// allow-map lifetime has not ended. Addresses belong to the name that was asked (see
// cleanAnswer for the CNAME decision): a CNAME target is not itself "resolved". An answer
// to any identity counts: the transparent listener decides a connection by its own
// identity's policy, this only checks that the address is the name's. name is
// normalised like a policy host; an IPv4-mapped addr is unmapped. The transparent proxy uses
// it to check that a connection's original destination is an address of its SNI or Host.
func (f *Filter) Resolved(name string, addr netip.Addr) bool {
	h, err := policy.NormalizeHost(name)
	if err != nil || h.IsIP() {
		return false
	}
	a := addr.WithZone("").Unmap()
	return f.book.resolved(h.Name, a) || f.idBook.resolved(h.Name, a)
}

// servers returns the upstreams for a query under pol: Config.Upstreams, else the policy's
// dns.upstreams, else resolv.conf's.
func (f *Filter) upstreams(pol *policy.Policy) []netip.AddrPort {
	if len(f.cfg.Upstreams) > 0 {
		return f.cfg.Upstreams
	}
	if us := pol.DNS().Upstreams; len(us) > 0 {
		if aps, err := policy.ParseUpstreams(us); err == nil {
			return aps
		}
	}
	return f.resolv
}

// PolicyChanged narrows what earlier answers opened to what pol allows: every address the
// filter handed out loses, in the allow map, the ports pol no longer grants its name (a name
// pol denies loses all of them), unless another name still holds them. Call it after a policy
// reload; without it, entries would live out their TTL + grace under the old policy. It
// returns the number of entries narrowed, and an error wrapping the AllowMap's when a revoke
// fails (the remaining entries are then left as they were).
func (f *Filter) PolicyChanged(pol *policy.Policy) (int, error) {
	allowed := func(name string, a netip.Addr) []uint16 {
		nd := pol.DecideName(name)
		if !nd.Allowed() || nd.WouldDeny {
			return nil
		}
		return allowedPorts(pol, nd, a)
	}
	// Identities' answers opened nothing; narrowing them by the sandbox's policy (which
	// holds each identity's) only keeps Resolved from vouching for a name no longer allowed.
	if _, err := f.idBook.prune(allowed); err != nil {
		return 0, err
	}
	return f.book.prune(allowed)
}
