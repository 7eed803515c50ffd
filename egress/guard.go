package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/airlock-dev/airlock/policy"
)

// DefaultDialTimeout bounds Resolve and Dial when the caller's context has no deadline.
const DefaultDialTimeout = 10 * time.Second

// minDialShare is the least time one address gets when a dial tries several (as net.Dialer).
const minDialShare = 2 * time.Second

// Resolver resolves a host name to addresses. *net.Resolver satisfies it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// NameAddrs says whether the sidecar's DNS filter answered name with addr (the transparent
// listener's check; *dnsfilter.Filter satisfies it through the wiring).
type NameAddrs interface {
	Resolved(name string, addr netip.Addr) bool
}

// Config configures a Guard. The zero Config is usable.
type Config struct {
	// Resolver resolves destination names, once per Resolve. Nil means net.DefaultResolver.
	Resolver Resolver
	// DialTimeout bounds each Resolve and each Dial whose context has no deadline (a context
	// deadline, longer or shorter, wins). Zero means DefaultDialTimeout.
	DialTimeout time.Duration
	// Self lists the sidecar's own listeners, which are never dialled. Nil means a new empty
	// list (Guard.Self returns it so listeners can register).
	Self *SelfAddrs
	// Dial connects to one checked address. Nil means a TCP net.Dialer. Tests replace it to
	// reach loopback servers through addresses the rules treat as public.
	Dial func(ctx context.Context, ap netip.AddrPort) (net.Conn, error)
}

// Guard resolves, checks and dials destinations. It is safe for concurrent use.
type Guard struct {
	resolver    Resolver
	dialTimeout time.Duration
	self        *SelfAddrs
	dial        func(ctx context.Context, ap netip.AddrPort) (net.Conn, error)
}

// New returns a Guard for cfg; it has no side effects. Errors wrap ErrInvalidConfig.
func New(cfg Config) (*Guard, error) {
	if cfg.DialTimeout < 0 {
		return nil, fmt.Errorf("validate egress guard config: DialTimeout %s is negative (use 0 for the default): %w", cfg.DialTimeout, ErrInvalidConfig)
	}
	g := &Guard{resolver: cfg.Resolver, dialTimeout: cfg.DialTimeout, self: cfg.Self, dial: cfg.Dial}
	if g.resolver == nil {
		g.resolver = net.DefaultResolver
	}
	if g.dialTimeout == 0 {
		g.dialTimeout = DefaultDialTimeout
	}
	if g.self == nil {
		g.self = NewSelfAddrs(nil)
	}
	if g.dial == nil {
		g.dial = func(ctx context.Context, ap netip.AddrPort) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", ap.String())
		}
	}
	return g, nil
}

// Self returns the guard's own-address list, for listeners to register into.
func (g *Guard) Self() *SelfAddrs { return g.self }

// Target is a destination the guard resolved and checked: every address was allowed for the
// host and port. Only Resolve (and Pin) make one, so Dial can only reach checked addresses.
type Target struct {
	host    string       // normalised host
	port    int          // destination port
	addrs   []netip.Addr // checked addresses, in resolver order, unmapped, distinct
	literal bool         // host was an IP literal
}

// Host returns the normalised host (punycode, lower case; an IP literal in canonical form).
func (t Target) Host() string { return t.host }

// Port returns the destination port.
func (t Target) Port() int { return t.port }

// Addrs returns the checked addresses, in the resolver's order.
func (t Target) Addrs() []netip.Addr { return slices.Clone(t.addrs) }

// withTimeout bounds ctx by the guard's DialTimeout unless it has a deadline already.
func (g *Guard) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, g.dialTimeout)
}

// Resolve resolves host once (an IP literal, in any spelling policy.NormalizeHost accepts,
// is parsed, never resolved) and checks every address with rules and the own-address list;
// one refused address refuses the whole answer. Errors: a *Denial unwrapping to
// ErrInvalidHost, ErrSelfAddress or ErrInternalAddress; else one wrapping ErrResolve (and the
// resolver's error, timeouts included).
func (g *Guard) Resolve(ctx context.Context, host string, port int, rules Rules) (Target, error) {
	h, err := policy.NormalizeHost(host)
	if err != nil {
		return Target{}, deny(ErrInvalidHost, policy.ReasonInvalidHost, host, port, "host %q is not a valid host name or address", host)
	}
	addrs := []netip.Addr{h.Addr}
	if !h.IsIP() {
		rctx, cancel := g.withTimeout(ctx)
		addrs, err = g.resolver.LookupNetIP(rctx, "ip", h.Name)
		cancel()
		if err != nil {
			return Target{}, fmt.Errorf("resolve %s: %w: %w", h.Name, ErrResolve, err)
		}
		if len(addrs) == 0 {
			return Target{}, fmt.Errorf("resolve %s: no addresses: %w", h.Name, ErrResolve)
		}
	}
	t := Target{host: h.Name, port: port, literal: h.IsIP()}
	for _, a := range addrs {
		if a = a.Unmap(); !slices.Contains(t.addrs, a) {
			t.addrs = append(t.addrs, a)
		}
	}
	if err := g.Check(t, rules); err != nil {
		return Target{}, err
	}
	return t, nil
}

// Check checks t's addresses again, under rules (an intercepted tunnel's addresses, resolved
// when it opened, under the policy of each request it carries). Errors: a *Denial unwrapping
// to ErrSelfAddress or ErrInternalAddress.
func (g *Guard) Check(t Target, rules Rules) error {
	for _, a := range t.addrs {
		ap := netip.AddrPortFrom(a, uint16(t.port))
		if a.IsUnspecified() || g.self.Contains(ap) {
			return deny(ErrSelfAddress, policy.ReasonSelfAddress, t.host, t.port, "%s is a listener of this airlock sidecar", ap)
		}
		if d := rules.CheckAddr(t.host, t.port, a); !d.Allowed() || d.WouldDeny {
			d.Verdict, d.WouldDeny = policy.Deny, false
			return &Denial{Err: ErrInternalAddress, Decision: d}
		}
	}
	return nil
}

// Pin narrows t to want, a transparent connection's original address: the sandbox's choice
// among the name's addresses is kept, never trusted beyond them. With names set, a name (not
// an IP literal) must also have been answered with want by the sidecar's DNS filter. Errors:
// a *Denial unwrapping to ErrOriginalDstMismatch.
func (t Target) Pin(want netip.Addr, names NameAddrs) (Target, error) {
	want = want.Unmap()
	if !slices.Contains(t.addrs, want) || (names != nil && !t.literal && !names.Resolved(t.host, want)) {
		return Target{}, deny(ErrOriginalDstMismatch, policy.ReasonOriginalDstMismatch, t.host, t.port,
			"original destination %s is not an address of %q", want, t.host)
	}
	t.addrs = []netip.Addr{want}
	return t, nil
}

// Dial dials t's checked addresses in order until one answers, giving each a share of the
// time left (ctx's deadline, else DialTimeout). It returns the connection and the address
// dialled. Errors: ErrUnchecked for a Target Resolve did not return; else the joined dial
// errors (timeouts included).
func (g *Guard) Dial(ctx context.Context, t Target) (net.Conn, netip.AddrPort, error) {
	if len(t.addrs) == 0 {
		return nil, netip.AddrPort{}, fmt.Errorf("connect %s: %w", net.JoinHostPort(t.host, strconv.Itoa(t.port)), ErrUnchecked)
	}
	ctx, cancel := g.withTimeout(ctx)
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

// DialContext returns a dial function for an http.Transport: it resolves and checks the
// host under rules, then dials a checked address. Only TCP networks are dialled. Errors: as
// Resolve and Dial, and a plain error for a malformed address or a non-TCP network.
func (g *Guard) DialContext(rules Rules) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if network != "tcp" && network != "tcp4" && network != "tcp6" {
			return nil, fmt.Errorf("dial %s %s: only tcp is dialled", network, addr)
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("dial %s: %w", addr, err)
		}
		pn, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("dial %s: bad port %q", addr, port)
		}
		t, err := g.Resolve(ctx, host, int(pn), rules)
		if err != nil {
			return nil, err
		}
		c, _, err := g.Dial(ctx, t)
		return c, err
	}
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
