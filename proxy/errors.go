package proxy

import (
	"errors"
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
	errNoExchange   = errors.New("upstream dial outside of a decided request")
	errNoInjector   = errors.New("no credential broker is configured")
	// errRefusedStream ends a tunnel whose first bytes were refused (the refusal is recorded
	// on the tunnel).
	errRefusedStream = errors.New("tunnel stream refused")
)
