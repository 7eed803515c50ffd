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
	// Dial connects to one checked address directly. Nil means a TCP net.Dialer. Tests
	// replace it to reach loopback servers through addresses the rules treat as public.
	Dial func(ctx context.Context, ap netip.AddrPort) (net.Conn, error)
	// Upstream is the upstream proxy every dial goes through unless its NoProxy list
	// exempts the destination (then Dial is used). Nil means every dial is direct. A dial
	// that should go through the proxy never falls back to a direct one.
	Upstream *Upstream
}

// Guard resolves, checks and dials destinations. It is safe for concurrent use.
type Guard struct {
	resolver    Resolver
	dialTimeout time.Duration
	self        *SelfAddrs
	dial        func(ctx context.Context, ap netip.AddrPort) (net.Conn, error)
	upstream    *Upstream
}

// New returns a Guard for cfg; it has no side effects. Errors wrap ErrInvalidConfig.
func New(cfg Config) (*Guard, error) {
	if cfg.DialTimeout < 0 {
		return nil, fmt.Errorf("validate egress guard config: DialTimeout %s is negative (use 0 for the default): %w", cfg.DialTimeout, ErrInvalidConfig)
	}
	g := &Guard{resolver: cfg.Resolver, dialTimeout: cfg.DialTimeout, self: cfg.Self, dial: cfg.Dial, upstream: cfg.Upstream}
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

// Upstream returns the upstream proxy the guard dials through (nil when none).
func (g *Guard) Upstream() *Upstream { return g.upstream }

// Target is a destination the guard resolved and checked: every address was allowed for the
// host and port. Only Resolve (and Pin) make one, so Dial can only reach checked addresses.
type Target struct {
	host    string       // normalised host
	port    int          // destination port
	addrs   []netip.Addr // checked addresses, in resolver order, unmapped, distinct
	literal bool         // host was an IP literal
	// byName: the upstream proxy is asked to CONNECT to the name (UpstreamConfig.ByName);
	// addrs may then be empty (the sidecar could not resolve the name).
	byName bool
}

// Host returns the normalised host (punycode, lower case; an IP literal in canonical form).
func (t Target) Host() string { return t.host }

// Port returns the destination port.
func (t Target) Port() int { return t.port }

// Addrs returns the checked addresses, in the resolver's order (none for a name the
// sidecar could not resolve and sends to the upstream proxy by name).
func (t Target) Addrs() []netip.Addr { return slices.Clone(t.addrs) }

// ByName reports whether the upstream proxy will be asked to CONNECT to the name rather
// than to a checked address (UpstreamConfig.ByName).
func (t Target) ByName() bool { return t.byName }

// withTimeout bounds ctx by the guard's DialTimeout unless it has a deadline already.
func (g *Guard) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, g.dialTimeout)
}

// Resolve resolves host once (an IP literal, in any spelling policy.NormalizeHost accepts,
// is parsed, never resolved) and checks every address with rules and the own-address list;
// one refused address refuses the whole answer. With an upstream proxy in ByName mode, a
// name the proxy is not exempted for and that does not resolve is returned unchecked, to be
// sent to the proxy by name (what ByName gives up). Errors: a *Denial unwrapping to
// ErrInvalidHost, ErrSelfAddress or ErrInternalAddress; else one wrapping ErrResolve (and the
// resolver's error, timeouts included).
func (g *Guard) Resolve(ctx context.Context, host string, port int, rules Rules) (Target, error) {
	h, err := policy.NormalizeHost(host)
	if err != nil {
		return Target{}, deny(ErrInvalidHost, policy.ReasonInvalidHost, host, port, "host %q is not a valid host name or address", host)
	}
	byName := !h.IsIP() && g.upstream != nil && g.upstream.byName && !g.upstream.Direct(h.Name, netip.Addr{})
	addrs := []netip.Addr{h.Addr}
	if !h.IsIP() {
		rctx, cancel := g.withTimeout(ctx)
		addrs, err = g.resolver.LookupNetIP(rctx, "ip", h.Name)
		cancel()
		if err == nil && len(addrs) == 0 {
			err = errors.New("no addresses")
		}
		switch {
		case err != nil && byName && ctx.Err() == nil:
			return Target{host: h.Name, port: port, byName: true}, nil
		case err != nil:
			return Target{}, fmt.Errorf("resolve %s: %w: %w", h.Name, ErrResolve, err)
		}
	}
	t := Target{host: h.Name, port: port, literal: h.IsIP(), byName: byName}
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
	t.addrs, t.byName = []netip.Addr{want}, false // the sandbox's checked choice is dialled
	return t, nil
}

// Dial dials t's checked addresses in order until one answers, giving each a share of the
// time left (ctx's deadline, else DialTimeout). It returns the connection and the address
// dialled. Errors: ErrUnchecked for a Target Resolve did not return; else the joined dial
// errors (timeouts included).
func (g *Guard) Dial(ctx context.Context, t Target) (net.Conn, netip.AddrPort, error) {
	if len(t.addrs) == 0 && !t.byName {
		return nil, netip.AddrPort{}, fmt.Errorf("connect %s: %w", net.JoinHostPort(t.host, strconv.Itoa(t.port)), ErrUnchecked)
	}
	ctx, cancel := g.withTimeout(ctx)
	defer cancel()
	if t.byName {
		// One CONNECT by name: the proxy picks the address. The first checked address (if
		// any) is what the audit names.
		var ap netip.AddrPort
		if len(t.addrs) > 0 {
			ap = netip.AddrPortFrom(t.addrs[0], uint16(t.port))
		}
		c, err := g.upstream.Connect(ctx, net.JoinHostPort(t.host, strconv.Itoa(t.port)))
		return c, ap, err
	}
	var errs []error
	for i, a := range t.addrs {
		ap := netip.AddrPortFrom(a, uint16(t.port))
		actx, acancel := context.WithTimeout(ctx, dialShare(ctx, len(t.addrs)-i))
		c, err := g.dialChecked(actx, t.host, ap)
		acancel()
		if err == nil {
			return c, ap, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil || proxyAtFault(err) {
			break
		}
	}
	return nil, netip.AddrPort{}, fmt.Errorf("connect %s: %w", net.JoinHostPort(t.host, strconv.Itoa(t.port)), errors.Join(errs...))
}

// dialChecked connects to one checked address: through the upstream proxy (a CONNECT to
// the address, never the name) unless there is none or NoProxy exempts host or the address.
func (g *Guard) dialChecked(ctx context.Context, host string, ap netip.AddrPort) (net.Conn, error) {
	if g.upstream.Direct(host, ap.Addr()) {
		return g.dial(ctx, ap)
	}
	return g.upstream.Connect(ctx, ap.String())
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

// proxyAtFault reports whether err is the upstream proxy failing whatever the address
// (unreachable, authentication, its policy), so the next address would fail alike; a 5xx
// answer is about the destination, and the next address may answer.
func proxyAtFault(err error) bool {
	var pe *ProxyError
	if errors.As(err, &pe) {
		return pe.Status < 500
	}
	return errors.Is(err, ErrUpstreamProxy)
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
