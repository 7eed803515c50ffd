package credentials

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// DefaultFetchTimeout bounds one fetch from a source when Config.FetchTimeout is zero.
const DefaultFetchTimeout = 5 * time.Second

// PolicySource returns the policy in force. *policy.Store satisfies it.
type PolicySource interface {
	Current() *policy.Policy
}

// Config configures a Broker. Policy is required; every other zero value is usable.
type Config struct {
	// Policy returns the policy in force; its spec.secrets say where each secret comes from.
	Policy PolicySource
	// Vault fetches `vault:` secrets. Nil makes them unavailable (ErrNoSource).
	Vault Source
	// Env fetches `env:` secrets. Nil means EnvSource{} (the process environment).
	Env Source
	// File fetches `file:` secrets. Nil means FileSource{}.
	File Source
	// CacheTTL is how long a fetched value may be used (see the cache rules in docs/credentials.md).
	// Zero means DefaultCacheTTL.
	CacheTTL time.Duration
	// FetchTimeout bounds one fetch. Zero means DefaultFetchTimeout.
	FetchTimeout time.Duration
	// Redactor learns every fetched value. Nil means a new one (see Broker.Redactor).
	Redactor *Redactor
	// Placeholders recognises the placeholders of bound secrets. Nil means placeholders are
	// never swapped (any placeholder is still refused).
	Placeholders *Placeholders
	// Audit receives credential events (failures, misuse). Nil drops them.
	Audit audit.Sink
	// Logger receives operational logs, never values. Nil discards them.
	Logger *logrus.Logger
	// Registerer gets the airlock_credential_* metrics. Nil leaves them unregistered.
	Registerer prometheus.Registerer
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
}

// Broker resolves a policy's secrets, injects them into requests (it is the proxy's
// Injector and response filter) and redacts them. It is safe for concurrent use.
type Broker struct {
	cfg     Config
	cache   *cache
	red     *Redactor
	metrics *metrics

	// secrets memoises the secrets of the policy in force (Policy.Secrets copies them).
	secrets atomic.Pointer[policySecrets]

	// swapMu guards swaps, the swappers of the bound values seen last (a value changes only
	// when its secret rotates), keyed by swapperKey.
	swapMu sync.Mutex
	swaps  map[string]swapper

	// mu guards closed.
	mu     sync.Mutex
	closed bool
}

// policySecrets is one policy's secrets.
type policySecrets struct {
	pol     *policy.Policy
	secrets map[string]policy.Secret
}

// secretsOf returns pol's secrets, copied once per policy.
func (b *Broker) secretsOf(pol *policy.Policy) map[string]policy.Secret {
	if ps := b.secrets.Load(); ps != nil && ps.pol == pol {
		return ps.secrets
	}
	ps := &policySecrets{pol: pol, secrets: pol.Secrets()}
	b.secrets.Store(ps)
	return ps.secrets
}

// New builds a Broker; it fetches nothing until asked (see Prefetch). It returns an error
// only for a bad Config or a metrics registration conflict.
func New(cfg Config) (*Broker, error) {
	if cfg.Policy == nil {
		return nil, errors.New("new credential broker: Policy is required")
	}
	if cfg.CacheTTL < 0 || cfg.FetchTimeout < 0 {
		return nil, errors.New("new credential broker: CacheTTL and FetchTimeout must not be negative")
	}
	if cfg.Env == nil {
		cfg.Env = EnvSource{}
	}
	if cfg.File == nil {
		cfg.File = FileSource{}
	}
	if cfg.CacheTTL == 0 {
		cfg.CacheTTL = DefaultCacheTTL
	}
	if cfg.FetchTimeout == 0 {
		cfg.FetchTimeout = DefaultFetchTimeout
	}
	if cfg.Redactor == nil {
		cfg.Redactor = NewRedactor()
	}
	if cfg.Audit == nil {
		cfg.Audit = audit.Discard()
	}
	if cfg.Logger == nil {
		cfg.Logger = logrus.New()
		cfg.Logger.SetOutput(io.Discard)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	m := newMetrics()
	if err := m.register(cfg.Registerer); err != nil {
		return nil, err
	}
	return &Broker{cfg: cfg, cache: newCache(cfg.CacheTTL, cfg.Now), red: cfg.Redactor, metrics: m}, nil
}

// Redactor returns the Redactor that knows every value the Broker fetched.
func (b *Broker) Redactor() *Redactor { return b.red }

// Value returns the current value of the policy secret called secret (for the LLM proxy's
// provider keys). It fails closed: errors wrap ErrUnknownSecret, ErrNoSource or
// ErrUnavailable, and never hold the value.
func (b *Broker) Value(ctx context.Context, secret string) (string, error) {
	s, ok := b.secretsOf(b.cfg.Policy.Current())[secret]
	if !ok {
		return "", fmt.Errorf("resolve secret %q: %w: %w", secret, ErrUnknownSecret, ErrUnavailable)
	}
	v, err := b.resolve(ctx, secret, s)
	if err != nil {
		b.metrics.failures.WithLabelValues(secret).Inc()
		return "", err
	}
	return v, nil
}

// resolve returns the value of secret s through the cache.
func (b *Broker) resolve(ctx context.Context, name string, s policy.Secret) (string, error) {
	src, kind := b.sourceFor(s)
	if src == nil {
		return "", fmt.Errorf("resolve secret %q: %s secrets need --vault-addr: %w: %w", name, kind, ErrNoSource, ErrUnavailable)
	}
	key := kind + "\x00" + name + "\x00" + refKey(s)
	v, res, err := b.cache.get(ctx, key, func(ctx context.Context) (Value, error) {
		ctx, cancel := context.WithTimeout(ctx, b.cfg.FetchTimeout)
		defer cancel()
		return src.Fetch(ctx, name, s)
	})
	if err != nil {
		return "", fmt.Errorf("resolve secret %q: %w", name, err)
	}
	switch res {
	case fromSource:
		if !b.red.Add(v.Secret) {
			b.cfg.Logger.WithField("secret", name).Warnf("secret value is shorter than %d bytes and is not redacted from output", MinRedactLen)
		}
	case fromStale:
		b.cfg.Logger.WithField("secret", name).Warn("secret source unavailable; serving the cached value until the cache TTL")
	}
	return v.Secret, nil
}

// sourceFor returns the source of s and its kind.
func (b *Broker) sourceFor(s policy.Secret) (Source, string) {
	switch {
	case s.Vault != nil:
		return b.cfg.Vault, "vault"
	case s.Env != "":
		return b.cfg.Env, "env"
	default:
		return b.cfg.File, "file"
	}
}

// refKey identifies a secret's definition, so a reload that changes it misses the cache.
func refKey(s policy.Secret) string {
	if s.Vault != nil {
		return fmt.Sprintf("%s|%s|%d|%t", s.Vault.Path, s.Vault.Field, s.Vault.Version, s.Vault.Dynamic)
	}
	return s.Env + "|" + s.File
}

// Prefetch fetches every secret of the policy in force, so values are cached (and known to
// the Redactor) before the first request. It returns the errors joined; the broker stays
// usable either way (requests needing a missing secret fail closed).
func (b *Broker) Prefetch(ctx context.Context) error {
	secrets := b.cfg.Policy.Current().Secrets()
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(secrets)) {
		if _, err := b.resolve(ctx, name, secrets[name]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Close releases what the sources hold: a Vault source revokes its leases and stops
// renewing. It is idempotent.
func (b *Broker) Close(ctx context.Context) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	var errs []error
	for _, s := range []Source{b.cfg.Vault, b.cfg.Env, b.cfg.File} {
		if c, ok := s.(Closer); ok && s != nil {
			if err := c.Close(ctx); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
