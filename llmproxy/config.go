package llmproxy

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/egress"
	"github.com/airlock-dev/airlock/policy"
)

// Keys returns the current value of a named policy secret; it fails closed.
//
// Value must return an error, never an empty value, when the secret cannot be had; the proxy
// then answers the caller 503 without sending anything upstream. The credential broker
// satisfies it.
type Keys interface {
	Value(ctx context.Context, secret string) (string, error)
}

// PolicySource returns the policy in force; policy.Store satisfies it.
type PolicySource interface {
	Current() *policy.Policy
}

// Config configures a Proxy. Policy, Keys, Ledger and Audit are required; every other zero value
// is usable.
type Config struct {
	// Policy supplies the models, providers and budget, read afresh for every call.
	Policy PolicySource
	// Keys supplies provider keys by secret name.
	Keys Keys
	// Ledger persists usage; the budget starts from its totals. The Proxy does not close it.
	Ledger *Ledger
	// Audit receives one event per call. Required.
	Audit audit.Sink
	// Logger receives operational logs (never a key or a prompt); nil means a logger that
	// discards.
	Logger logrus.FieldLogger
	// Registerer receives the metrics; nil means they are not exported.
	Registerer prometheus.Registerer
	// Operator is the sidecar's operator dial path (provider calls are airlock's own
	// connections, not the sandbox's): it resolves each provider name once, refuses an
	// answer holding an internal address the provider does not name (allowInternal, or an
	// IP-address base URL) and the sidecar's own listeners (no call may loop back), dials
	// only checked addresses, through the upstream proxy unless exempted, and verifies TLS
	// against its roots (Operator.TLSConfig). Serve registers the model API's listener in
	// its own-address list. Nil means a direct path of its own with the system resolver.
	Operator *egress.Operator
	// Admit, when set, is asked before a call reserves its budget; an error refuses the
	// call as budget_exhausted with the error's text (the usage meter's caps, spec.usage,
	// which count compute and model spend together). Nil admits every call.
	Admit func() error
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// RetryBackoff is the first retry's delay, doubled for each further one (with jitter up
	// to the same again) and raised to a provider's Retry-After up to MaxRetryWait. Zero
	// means 250ms.
	RetryBackoff time.Duration
	// MaxRetryWait caps one wait between retries. Zero means 5s.
	MaxRetryWait time.Duration
	// MaxBodyBytes caps a request body; larger ones get 413. Zero means DefaultMaxBodyBytes
	// (32 MiB).
	MaxBodyBytes int64
}

// Defaults of Config and policy.Provider fields.
const (
	DefaultConnectTimeout   = 10 * time.Second
	DefaultFirstByteTimeout = 60 * time.Second
	DefaultChunkTimeout     = 60 * time.Second
	DefaultRetries          = 2
	defaultRetryBackoff     = 250 * time.Millisecond
	defaultMaxRetryWait     = 5 * time.Second
	// DefaultMaxBodyBytes is the zero value of Config.MaxBodyBytes: 32 MiB.
	DefaultMaxBodyBytes = 32 << 20
	// maxResponseBytes caps a non-streamed provider answer airlock reads to count its usage.
	maxResponseBytes = 64 << 20
)
