package dnsfilter

import (
	"errors"
	"fmt"
	"net"
)

// Sentinel errors. Functions say which they may return; test with errors.Is.
var (
	// ErrInvalidConfig is returned by New for a Config it cannot run with.
	ErrInvalidConfig = errors.New("invalid dns filter config")
	// ErrNoUpstream means no upstream resolver is configured (no Upstreams, none in the
	// policy, none in resolv.conf).
	ErrNoUpstream = errors.New("no upstream DNS server")
	// ErrUpstream wraps the failure of every upstream resolver to answer a query.
	ErrUpstream = errors.New("upstream DNS failed")
	// ErrBraked is returned by Brake.Admit for a name the exfiltration brake stops.
	ErrBraked = errors.New("name stopped by the DNS exfiltration brake")
	// ErrClosed is returned by Serve after Close. It wraps net.ErrClosed.
	ErrClosed = fmt.Errorf("dns filter closed: %w", net.ErrClosed)
)
