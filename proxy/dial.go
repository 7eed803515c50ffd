package proxy

// The SSRF guard. Smokescreen's rule: decide on names, enforce on addresses. A name is resolved
// once; every address it resolved to is checked (a mixed answer, public and internal, is
// denied whole: it is what a rebinding attack looks like); only checked addresses are dialled,
// and never by name, so nothing resolves the name a second time behind our back (DNS
// rebinding with TTL 0).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/policy"
)

// minDialShare is the least time one address gets when a dial tries several (as net.Dialer).
const minDialShare = 2 * time.Second

// guard resolves, checks and dials upstream addresses.
type guard struct {
	resolver    Resolver
	dialTimeout time.Duration
	// dial connects to one checked address; tests replace it to reach loopback servers
	// through addresses the policy treats as public.
	dial func(ctx context.Context, ap netip.AddrPort) (net.Conn, error)
	// localAddrs lists the machine's interface addresses (net.InterfaceAddrs).
	localAddrs func() ([]netip.Addr, error)

	// names, when set, must have resolved a transparent connection's name to its original
	// address (Config.NameAddrs).
	names NameAddrs

	// mu guards self.
	mu   sync.Mutex
	self []netip.AddrPort // the sidecar's listeners, unmapped
}

func newGuard(r Resolver, dialTimeout time.Duration, self []netip.AddrPort) *guard {
	g := &guard{resolver: r, dialTimeout: dialTimeout, localAddrs: interfaceAddrs}
	g.dial = func(ctx context.Context, ap netip.AddrPort) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", ap.String())
	}
	for _, a := range self {
		g.addSelf(a)
	}
	return g
}

// addSelf records one of the sidecar's listening addresses.
func (g *guard) addSelf(a netip.AddrPort) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.self = append(g.self, netip.AddrPortFrom(a.Addr().Unmap().WithZone(""), a.Port()))
}

// addSelfListener records l's address when it is a TCP address.
func (g *guard) addSelfListener(l net.Listener) {
	if ta, ok := l.Addr().(*net.TCPAddr); ok {
		g.addSelf(ta.AddrPort())
	}
}

// target is a destination the guard resolved and checked: every address in addrs was
// allowed for host and port.
type target struct {
	host  string       // normalised host the policy decided on
	port  int          // destination port
	addrs []netip.Addr // checked addresses, in resolver order, unmapped
}

// withRule names rule as the closest rule of an address-level denial that names none: the
// name was allowed by rule, one of its addresses was not (the contract's deny names the
// closest rule).
func withRule(d policy.Decision, rule string) policy.Decision {
	if d.Rule == "" {
		d.Rule = rule
	}
	return d
}

// denial is the error of a destination the guard refused; d says why.
type denial struct{ d policy.Decision }

func (e *denial) Error() string {
	return fmt.Sprintf("destination denied: %s: %s", e.d.Reason, e.d.Detail)
}

// resolve resolves host once (an IP literal is parsed, never resolved) and checks every
// address. When want is valid (transparent mode) it must be among the addresses, and the
// target then holds it alone: the sandbox's choice among the name's addresses is kept, but
// never trusted beyond them. Errors: *denial for a refused address, else the resolver's
// error (timeouts included).
func (g *guard) resolve(ctx context.Context, pol *policy.Policy, host string, port int, want netip.Addr) (target, error) {
	h, err := policy.NormalizeHost(host)
	if err != nil {
		return target{}, &denial{policy.Decision{Reason: policy.ReasonInvalidHost, Host: host, Port: port,
			Detail: fmt.Sprintf("host %q is not a valid host name or address", host)}}
	}
	addrs := []netip.Addr{h.Addr}
	if !h.IsIP() {
		ctx, cancel := context.WithTimeout(ctx, g.dialTimeout)
		addrs, err = g.resolver.LookupNetIP(ctx, "ip", h.Name)
		cancel()
		if err != nil {
			return target{}, fmt.Errorf("resolve %s: %w: %w", h.Name, errResolve, err)
		}
		if len(addrs) == 0 {
			return target{}, fmt.Errorf("resolve %s: no addresses: %w", h.Name, errResolve)
		}
	}
	t := target{host: h.Name, port: port}
	if err := g.check(pol, h.Name, port, addrs); err != nil {
		return target{}, err
	}
	for _, a := range addrs {
		a = a.Unmap()
		if !slices.Contains(t.addrs, a) {
			t.addrs = append(t.addrs, a)
		}
	}
	if want.IsValid() {
		want = want.Unmap()
		if !slices.Contains(t.addrs, want) || (g.names != nil && !h.IsIP() && !g.names.Resolved(h.Name, want)) {
			return target{}, &denial{policy.Decision{Reason: ReasonOriginalDstMismatch, Host: h.Name, Port: port,
				Detail: fmt.Sprintf("original destination %s is not an address of %q", want, h.Name)}}
		}
		t.addrs = []netip.Addr{want}
	}
	return t, nil
}

// check applies pol.CheckAddr and the self-address rule to every address. The first refusal
// denies the whole answer. The guard has no report mode: a report-mode policy trials its
// rules on names, but an internal address it would deny is still never dialled (report mode
// must not turn the sidecar into a way to reach loopback or the metadata service).
func (g *guard) check(pol *policy.Policy, host string, port int, addrs []netip.Addr) error {
	for _, a := range addrs {
		ap := netip.AddrPortFrom(a, uint16(port))
		if g.isSelf(ap) {
			return &denial{policy.Decision{Reason: ReasonSelfAddress, Host: host, Port: port,
				Detail: fmt.Sprintf("%s is a listener of this airlock sidecar", ap)}}
		}
		if d := pol.CheckAddr(host, port, a); !d.Allowed() || d.WouldDeny {
			d.Verdict, d.WouldDeny = policy.Deny, false
			return &denial{d}
		}
	}
	return nil
}

// isSelf reports whether ap reaches one of the sidecar's listeners. A listener on an
// unspecified address is reached through every local address with its port, and on Linux
// connecting to an unspecified address reaches the local host.
func (g *guard) isSelf(ap netip.AddrPort) bool {
	a := ap.Addr().Unmap().WithZone("")
	g.mu.Lock()
	self := g.self
	g.mu.Unlock()
	var local []netip.Addr
	var localErr error
	loaded := false
	for _, s := range self {
		if s.Port() != ap.Port() {
			continue
		}
		if s.Addr() == a || a.IsUnspecified() {
			return true
		}
		if !s.Addr().IsUnspecified() {
			continue
		}
		if a.IsLoopback() {
			return true
		}
		if !loaded {
			local, localErr = g.localAddrs()
			loaded = true
		}
		if localErr != nil || slices.Contains(local, a) {
			return true // unknown interfaces: fail closed
		}
	}
	return false
}

// connect dials the target's addresses in order until one answers, giving each a share of
// DialTimeout. It returns the connection and the address dialled.
func (g *guard) connect(ctx context.Context, t target) (net.Conn, netip.AddrPort, error) {
	ctx, cancel := context.WithTimeout(ctx, g.dialTimeout)
	defer cancel()
	var errs []error
	for i, a := range t.addrs {
		ap := netip.AddrPortFrom(a, uint16(t.port))
		actx, acancel := context.WithTimeout(ctx, dialShare(ctx, len(t.addrs)-i))
		c, err := g.dial(actx, ap)
		acancel()
		if err == nil {
			return c, ap, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, netip.AddrPort{}, fmt.Errorf("connect %s: %w", net.JoinHostPort(t.host, strconv.Itoa(t.port)), errors.Join(errs...))
}

// dialShare splits the time left in ctx among the addresses left to try.
func dialShare(ctx context.Context, left int) time.Duration {
	dl, ok := ctx.Deadline()
	if !ok {
		return minDialShare
	}
	rest := time.Until(dl)
	share := rest / time.Duration(left)
	return min(rest, max(share, minDialShare))
}

// interfaceAddrs lists the addresses of the machine's interfaces.
func interfaceAddrs() ([]netip.Addr, error) {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("list interface addresses: %w", err)
	}
	out := make([]netip.Addr, 0, len(as))
	for _, a := range as {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap().WithZone(""))
		}
	}
	return out, nil
}

// isTimeout reports whether err is a deadline being exceeded (504 rather than 502).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
