package proxy

import (
	"errors"

	"github.com/airlock-dev/airlock/egress"
	"github.com/airlock-dev/airlock/policy"
)

// Sentinel errors. Functions say which of them they may return; test with errors.Is.
var (
	// ErrClosed is returned by Serve and ServeTransparent once Close or Shutdown was called.
	ErrClosed = errors.New("proxy closed")
	// ErrInvalidConfig is wrapped by every error New returns for a bad Config.
	ErrInvalidConfig = errors.New("invalid proxy config")
	// ErrNoOriginalDst is returned by ServeTransparent when Config.OriginalDst is nil.
	ErrNoOriginalDst = errors.New("no original destination source")
	// ErrCAIncomplete is returned by LoadOrCreateCA when only one of ca.crt and ca.key exists.
	ErrCAIncomplete = errors.New("incomplete CA")
	// ErrInvalidCA is returned by LoadOrCreateCA when ca.crt or ca.key exists but cannot be
	// used: unparsable, not a CA, expired, a key that does not match, or a key file that other
	// users can read.
	ErrInvalidCA = errors.New("invalid CA")
)

// Internal errors; they never leave the package.
var (
	errBodyTooLarge = errors.New("request body too large")
	errSNIMismatch  = errors.New("tls server name does not match the tunnel host")
	errNoHello      = errors.New("no ClientHello")
	errNoExchange   = errors.New("upstream dial outside of a decided request")
	errNoInjector   = errors.New("no credential broker is configured")
)

// Proxy-level reason codes. They sit beside the policy's reasons in audit events and in the
// JSON body of a denial, but no policy decides them: they are enforced in every mode, report
// mode included, because they protect the decision itself rather than express the policy.
const (
	// ReasonHostMismatch: the names a request carries disagree (URL host and Host header,
	// CONNECT host and TLS SNI, CONNECT host and an inner Host header). Domain fronting.
	ReasonHostMismatch policy.Reason = "host_mismatch"
	// ReasonSelfAddress: the destination is one of the sidecar's own listeners (the egress
	// guard's reason).
	ReasonSelfAddress = egress.ReasonSelfAddress
	// ReasonOriginalDstMismatch: a transparent connection's original address is not among the
	// addresses its name resolves to (the egress guard's reason).
	ReasonOriginalDstMismatch = egress.ReasonOriginalDstMismatch
	// ReasonOriginalDstUnknown: the original destination of a transparent connection could not
	// be found.
	ReasonOriginalDstUnknown policy.Reason = "original_destination_unknown"
	// ReasonSNIMissing: a transparent TLS connection sent no server name to decide on.
	ReasonSNIMissing policy.Reason = "sni_missing"
	// ReasonBadClientHello: the client's first bytes start a TLS handshake that cannot be parsed.
	ReasonBadClientHello policy.Reason = "bad_client_hello"
	// ReasonUnknownProtocol: a transparent connection speaks neither TLS nor HTTP.
	ReasonUnknownProtocol policy.Reason = "unknown_protocol"
	// ReasonTunnelLimit: MaxTunnels tunnels are open already (429).
	ReasonTunnelLimit policy.Reason = "tunnel_limit"
)
