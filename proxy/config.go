package proxy

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/egress"
	"github.com/airlock-dev/airlock/policy"
)

// Defaults for the zero values of Config's limits. They are the one source of these
// numbers: airlock run's flags (--max-tunnels, --dial-timeout, --idle-timeout,
// --response-header-timeout, --max-header-bytes, --max-request-body) take their defaults
// from here, and a test holds docs/cli.md's table of run flags to them.
const (
	DefaultMaxTunnels            = 1024
	DefaultDialTimeout           = 10 * time.Second
	DefaultIdleTimeout           = 5 * time.Minute
	DefaultResponseHeaderTimeout = 60 * time.Second
	DefaultMaxHeaderBytes        = 64 << 10
	DefaultMaxRequestBodyBytes   = 100 << 20
)

// headerReadTimeout bounds how long a client may take to send a request head or a TLS
// ClientHello (slowloris); IdleTimeout lowers it when smaller.
const headerReadTimeout = 30 * time.Second

// PolicySource returns the policy in force. *policy.Store satisfies it. The proxy calls
// Current once at the start of every request and tunnel, so a reload applies to new requests
// while open tunnels keep the policy they started with.
type PolicySource interface {
	Current() *policy.Policy
}

// Injector adds credentials to an allowed request before it goes upstream. d is the request's
// decision (d.Secrets names what the allowing rule injects). r.URL.Scheme says whether the
// request leaves over TLS ("https") or in clear text ("http"). An error fails the request
// with 503 credential_unavailable; the error text is audited, so it must hold no secret.
type Injector interface {
	Inject(r *http.Request, d policy.Decision) error
}

// ResponseFilter is implemented by an Injector that also scrubs responses (secret values
// echoed back) before they reach the sandbox. FilterResponse may replace resp's header
// values, body and trailers; it must not block. injected says whether the request carried
// an injected secret. An error refuses the response: a Refusal is a denial (403, its
// reason), anything else a denial as response_undecodable; FilterResponse closes resp's
// body then.
type ResponseFilter interface {
	FilterResponse(resp *http.Response, injected bool) (*http.Response, error)
}

// Refusal is implemented by Injector errors (and request-body read errors caused by an
// Injector) that deny a request (403, reason DenyReason) instead of failing it with 503:
// a credential placeholder sent where its rule does not allow it, or a credential that
// would go out in clear text. The error text is the denial's detail; it holds no secret.
type Refusal interface {
	error
	DenyReason() policy.Reason
}

// OriginalDestination returns the address a redirected connection was sent to before the
// kernel redirected it to the transparent listener.
type OriginalDestination interface {
	OriginalDst(c net.Conn) (netip.AddrPort, error)
}

// NameAddrs says whether the sidecar's DNS filter answered name with addr. The
// *dnsfilter.Filter satisfies it (internal/sidecar passes it in).
type NameAddrs interface {
	Resolved(name string, addr netip.Addr) bool
}

// Approvals is the approval stage (package approval; internal/sidecar passes it in): with
// spec.approval, a plain miss (no_rule) is held while the operator is asked. Settle gets
// every decision the proxy makes on a name, with where it was made ("http", "connect" or
// "transparent"), and returns the policy and decision the request goes on with: allowed by
// a grant, or a denial with ReasonApprovalPending or ReasonApprovalDenied and Decision.Ask.
type Approvals interface {
	Settle(ctx context.Context, pol *policy.Policy, req policy.Request, d policy.Decision, via string) (*policy.Policy, policy.Decision)
}

// Config configures a Proxy. Policy and CA are required; every other zero value is usable.
type Config struct {
	// Policy returns the policy in force. Required.
	Policy PolicySource
	// CA signs the leaf certificates of intercepted tunnels. Required.
	CA *CA
	// Audit receives one event per request and per tunnel. Nil drops events.
	Audit audit.Sink
	// Guard is the sidecar's SSRF dial guard, shared with every component that dials out: it
	// resolves each destination name once (with its resolver), refuses an answer holding an
	// internal address no rule names by CIDR and the sidecar's own listeners (its SelfAddrs;
	// Serve and ServeTransparent register their listeners there), and dials only checked
	// addresses. Nil means a guard of the proxy's own: the system resolver, and only the
	// proxy's listeners as own addresses.
	Guard *egress.Guard
	// UpstreamRoots verifies upstream TLS certificates of intercepted requests. Nil means the
	// system roots. Verification is never skipped.
	UpstreamRoots *x509.CertPool
	// Injector adds credentials to allowed requests. Nil injects nothing.
	Injector Injector
	// OriginalDst finds where a transparent connection was going. Nil makes ServeTransparent
	// fail with ErrNoOriginalDst.
	OriginalDst OriginalDestination
	// NameAddrs, when set, adds a check to transparent connections: the original address must
	// be one the DNS filter resolved for the SNI or Host name the client sent, so a connection
	// made to a co-tenant's address with an allowed name in SNI is refused
	// (original_destination_mismatch), and vice versa. Nil checks only that the proxy's own
	// resolution of the name includes the original address.
	NameAddrs NameAddrs
	// Approvals holds plain misses while the operator is asked. Nil means a miss is denied
	// at once.
	Approvals Approvals
	// Identities tells which identity of the policy made each accepted connection; its
	// requests are decided by that identity's policy. Nil (or a policy without
	// spec.identities) means every request is decided by the policy in force.
	Identities Identities
	// Logger receives operational logs (never secrets, header values or bodies). Nil
	// discards them.
	Logger *logrus.Logger
	// Registerer gets the airlock_proxy_* metrics. Nil leaves them unregistered.
	Registerer prometheus.Registerer
	// Now is the clock for audit event times. Nil means time.Now.
	Now func() time.Time

	// MaxTunnels caps concurrent tunnels (CONNECT and transparent connections); beyond it a
	// CONNECT gets 429 with Retry-After. Zero means DefaultMaxTunnels.
	MaxTunnels int
	// DialTimeout bounds resolving, and then connecting to, an upstream (504 when exceeded).
	// Zero means DefaultDialTimeout.
	DialTimeout time.Duration
	// IdleTimeout closes a tunnel, or a client keep-alive connection, with no traffic for
	// this long. Zero means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for an upstream's response head after the request
	// was sent (504 when exceeded). Zero means DefaultResponseHeaderTimeout.
	ResponseHeaderTimeout time.Duration
	// MaxHeaderBytes caps a request head (client side) and a response head (upstream side).
	// Zero means DefaultMaxHeaderBytes.
	MaxHeaderBytes int
	// MaxRequestBodyBytes caps the body of a proxied HTTP request (413 when exceeded). Bodies
	// inside plain tunnels are not seen and not capped. Zero means DefaultMaxRequestBodyBytes.
	MaxRequestBodyBytes int64

	// DisableHTTP1FastPath sends every HTTP/1.1 request through net/http's server, goproxy
	// and net/http's Transport, as before the fast path (h1serve.go); false (auto) reads
	// requests inside intercepted tunnels and absolute-form http:// requests with the strict
	// parser and hands anything outside its subset to net/http (--http1-fastpath=off).
	DisableHTTP1FastPath bool
}

// withDefaults validates c and returns a copy with the defaults filled in. Errors wrap
// ErrInvalidConfig.
func (c Config) withDefaults() (Config, error) {
	switch {
	case c.Policy == nil:
		return c, invalid("Policy is required")
	case c.CA == nil:
		return c, invalid("CA is required (use LoadOrCreateCA)")
	case c.MaxTunnels < 0, c.DialTimeout < 0, c.IdleTimeout < 0, c.ResponseHeaderTimeout < 0,
		c.MaxHeaderBytes < 0, c.MaxRequestBodyBytes < 0:
		return c, invalid("limits must not be negative (use 0 for the default)")
	}
	if c.Audit == nil {
		c.Audit = audit.Discard()
	}
	if c.Guard == nil {
		g, err := egress.New(egress.Config{})
		if err != nil {
			return c, invalid(err.Error())
		}
		c.Guard = g
	}
	if c.Logger == nil {
		c.Logger = logrus.New()
		c.Logger.SetOutput(io.Discard)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	c.MaxTunnels = orDefault(c.MaxTunnels, DefaultMaxTunnels)
	c.DialTimeout = orDefault(c.DialTimeout, DefaultDialTimeout)
	c.IdleTimeout = orDefault(c.IdleTimeout, DefaultIdleTimeout)
	c.ResponseHeaderTimeout = orDefault(c.ResponseHeaderTimeout, DefaultResponseHeaderTimeout)
	c.MaxHeaderBytes = orDefault(c.MaxHeaderBytes, DefaultMaxHeaderBytes)
	c.MaxRequestBodyBytes = orDefault(c.MaxRequestBodyBytes, DefaultMaxRequestBodyBytes)
	return c, nil
}

// headTimeout is how long a client may take to send a request head or a ClientHello.
func (c Config) headTimeout() time.Duration {
	return min(headerReadTimeout, c.IdleTimeout)
}

func invalid(msg string) error {
	return fmt.Errorf("validate proxy config: %s: %w", msg, ErrInvalidConfig)
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
