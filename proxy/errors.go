package proxy

import (
	"errors"

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
	errResolve      = errors.New("resolve failed")
	errSNIMismatch  = errors.New("tls server name does not match the tunnel host")
	errNoExchange   = errors.New("upstream dial outside of a decided request")
	errNoInjector   = errors.New("no credential broker is configured")
	// errRefusedStream ends a tunnel whose first bytes were refused (the refusal is recorded
	// on the tunnel).
	errRefusedStream = errors.New("tunnel stream refused")
)

// Proxy-level reason codes. They sit beside the policy's reasons in audit events and in the
// JSON body of a denial, but no policy decides them: they are enforced in every mode, report
// mode included, because they protect the decision itself rather than express the policy.
const (
	// ReasonHostMismatch: the names a request carries disagree (URL host and Host header,
	// CONNECT host and TLS SNI, CONNECT host and an inner Host header). Domain fronting.
	ReasonHostMismatch policy.Reason = "host_mismatch"
	// ReasonSelfAddress: the destination is one of the sidecar's own listeners.
	ReasonSelfAddress policy.Reason = "self_address"
	// ReasonOriginalDstMismatch: a transparent connection's original address is not among the
	// addresses its name resolves to.
	ReasonOriginalDstMismatch policy.Reason = "original_destination_mismatch"
	// ReasonOriginalDstUnknown: the original destination of a transparent connection could not
	// be found.
	ReasonOriginalDstUnknown policy.Reason = "original_destination_unknown"
	// ReasonSNIMissing: a TLS ClientHello names no server: on a transparent connection whose
	// original address no cidrs rule names, or in a CONNECT tunnel to a name whose rules do
	// not set allowMissingSNI.
	ReasonSNIMissing policy.Reason = "sni_missing"
	// ReasonBadClientHello: the client's first bytes are TLS the proxy cannot classify: a
	// ClientHello that does not parse, another record type before or among its records, an
	// SSLv2-compatible hello, duplicate extensions or server names, an encrypted ClientHello.
	ReasonBadClientHello policy.Reason = "bad_client_hello"
	// ReasonUnknownProtocol: a transparent connection speaks neither TLS nor HTTP, or a
	// tunnel's first text line is too long to tell whether it is HTTP.
	ReasonUnknownProtocol policy.Reason = "unknown_protocol"
	// ReasonTunnelHTTP: a CONNECT tunnel that is not intercepted carries cleartext HTTP, whose
	// Host header the proxy would not check.
	ReasonTunnelHTTP policy.Reason = "http_in_tunnel"
	// reasonUndecodable: a ResponseFilter failed on a response without saying why; the
	// credential broker's code for a response it cannot scrub.
	reasonUndecodable policy.Reason = "response_undecodable"
	// ReasonTunnelLimit: MaxTunnels tunnels are open already (429).
	ReasonTunnelLimit policy.Reason = "tunnel_limit"
)
