package egress

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Operator is the dial path of airlock's own connections: Vault, the model providers, the
// approval webhook, audit shipping. Its destinations come from the operator's configuration
// (flags, the sidecar's environment), never from a request of the sandbox: no component that
// serves the sandbox (the egress proxy, the DNS filter) holds an Operator, so nothing the
// sandbox sends can reach it. It is not subject to the sandbox's policy; the caller says
// which internal ranges its endpoint may use (AllRanges for an address the operator
// configured, such as Vault's). Like the sandbox path, it resolves a name once, refuses the
// sidecar's own listeners, dials only a checked address, and goes through the upstream proxy
// unless NoProxy exempts the destination.
//
// Use DialContext for a client that builds its own transport, Transport for a new
// http.Transport. Neither ever consults HTTP_PROXY, HTTPS_PROXY or NO_PROXY: the sidecar's
// own environment chooses no path.
type Operator struct {
	g *Guard
}

// NewOperator returns the operator dial path for cfg (the same Config the sandbox's Guard
// is built from: resolver, own listeners, timeout, upstream proxy); it has no side effects.
// Errors wrap ErrInvalidConfig.
func NewOperator(cfg Config) (*Operator, error) {
	g, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return &Operator{g: g}, nil
}

// DialContext returns a dial function for one operator-configured endpoint: it resolves the
// host once, checks every address under ranges (and the sidecar's own listeners), and dials
// a checked address, through the upstream proxy unless exempted. Errors: as
// Guard.DialContext, and ones wrapping ErrUpstreamProxy.
func (o *Operator) DialContext(ranges Ranges) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return o.g.DialContext(ranges)
}

// TLSConfig returns a new TLS client configuration for the operator path: TLS 1.2 or
// later, verified against the system roots plus the upstream proxy's CAs (an inspecting
// proxy re-signs the origins; UpstreamConfig.CAPEM).
func (o *Operator) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: o.g.upstream.Roots()}
}

// Self returns the own-address list the path refuses (shared with the sandbox's Guard when
// built from the same Config), for listeners to register into.
func (o *Operator) Self() *SelfAddrs { return o.g.self }

// Transport returns a new http.Transport that dials through DialContext(ranges), verifies
// TLS with tlsConfig (nil: TLSConfig(); the transport owns a clone) and never uses an HTTP
// proxy from the environment. Timeouts bound the dial (the guard's DialTimeout) and the TLS
// handshake; the caller bounds the rest with its request's context.
func (o *Operator) Transport(ranges Ranges, tlsConfig *tls.Config) *http.Transport {
	tc := o.TLSConfig()
	if tlsConfig != nil {
		tc = tlsConfig.Clone()
	}
	return &http.Transport{
		Proxy:               nil, // never the sidecar's own HTTP(S)_PROXY: the dial path decides
		DialContext:         o.DialContext(ranges),
		TLSClientConfig:     tc,
		TLSHandshakeTimeout: o.g.dialTimeout,
		ForceAttemptHTTP2:   true,
		MaxIdleConns:        64,
		IdleConnTimeout:     90 * time.Second,
	}
}

// String describes the path, for logs: direct or through which upstream proxy.
func (o *Operator) String() string {
	if o.g.upstream == nil {
		return "direct"
	}
	return fmt.Sprintf("through upstream proxy %s", o.g.upstream)
}
