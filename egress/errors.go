package egress

import (
	"errors"
	"fmt"

	"github.com/airlock-dev/airlock/policy"
)

// Sentinel errors. Functions say which of them they may return; test with errors.Is.
var (
	// ErrInvalidConfig is wrapped by every error New returns for a bad Config.
	ErrInvalidConfig = errors.New("invalid egress guard config")
	// ErrInvalidHost: the host is not a valid host name or IP address (a *Denial,
	// reason policy.ReasonInvalidHost).
	ErrInvalidHost = errors.New("invalid destination host")
	// ErrInternalAddress: an address of the answer is internal and the caller's Rules do not
	// name it (a *Denial whose Decision comes from the Rules, reason
	// policy.ReasonInternalAddress).
	ErrInternalAddress = errors.New("internal destination address")
	// ErrSelfAddress: an address of the answer reaches one of the sidecar's own listeners, or
	// is unspecified (a *Denial, reason policy.ReasonSelfAddress).
	ErrSelfAddress = errors.New("destination is a listener of this sidecar")
	// ErrOriginalDstMismatch: a transparent connection's original address is not among the
	// addresses of the name it carries (a *Denial, reason policy.ReasonOriginalDstMismatch).
	ErrOriginalDstMismatch = errors.New("original destination is not an address of the name")
	// ErrResolve: the name could not be resolved, or resolved to no address. It is not a
	// denial: callers answer it as an unreachable upstream (502).
	ErrResolve = errors.New("resolve failed")
	// ErrUnchecked: Dial was given a Target that Resolve did not return (the zero Target).
	ErrUnchecked = errors.New("target was not checked by the guard")
	// ErrUpstreamProxy: the upstream proxy could not be reached, did not answer within its
	// connect timeout, or refused the CONNECT (a *ProxyError holds its status). It is not a
	// denial: callers answer it as an unreachable upstream (502), never by dialling directly.
	ErrUpstreamProxy = errors.New("upstream proxy failed")
)

// Denial is a destination the guard refused. It unwraps to one of ErrInvalidHost,
// ErrInternalAddress, ErrSelfAddress or ErrOriginalDstMismatch; Decision says why, in the
// form callers put in deny responses and audit events (Verdict Deny; Rule empty unless the
// Rules named a closest rule).
type Denial struct {
	// Err is the sentinel.
	Err error
	// Decision is the refusal: reason, detail, host and port.
	Decision policy.Decision
}

func (e *Denial) Error() string {
	return fmt.Sprintf("destination denied: %s: %s", e.Decision.Reason, e.Decision.Detail)
}

// Unwrap returns Err.
func (e *Denial) Unwrap() error { return e.Err }

// deny builds a *Denial.
func deny(err error, reason policy.Reason, host string, port int, format string, args ...any) *Denial {
	return &Denial{Err: err, Decision: policy.Decision{Verdict: policy.Deny, Reason: reason, Host: host, Port: port,
		Detail: fmt.Sprintf(format, args...)}}
}
