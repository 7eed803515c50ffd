package credentials

import "errors"

// Sentinel errors. Functions say which of them they may return; test with errors.Is.
var (
	// ErrUnavailable means a secret's value could not be had (source unreachable, sealed,
	// permission denied, missing) and no still-valid cached value exists. Callers fail
	// closed.
	ErrUnavailable = errors.New("credential unavailable")
	// ErrUnknownSecret means the policy in force defines no secret of that name.
	ErrUnknownSecret = errors.New("unknown secret")
	// ErrNoSource means the secret names a source kind (vault) that the sidecar was not
	// configured for.
	ErrNoSource = errors.New("no source configured for secret")
	// ErrMisuse means a request carried a credential placeholder to a destination or a
	// location its rule does not bind it to. The proxy denies it (403).
	ErrMisuse = errors.New("credential placeholder misuse")
	// ErrCleartext means a rule would inject a credential into a cleartext (http://) request
	// without allowCleartext. The proxy denies it (403).
	ErrCleartext = errors.New("credential injection into cleartext http refused")
	// ErrUndecodable means a response's Content-Encoding is one the broker cannot decode (or
	// too many stacked), so it cannot be scrubbed. After an injection the proxy refuses the
	// response (403 response_undecodable).
	ErrUndecodable = errors.New("response encoding cannot be decoded")
)
