package approval

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// Bounds of the asks (see the package documentation and docs/policy.md).
const (
	// DefaultMaxOpenAsks bounds the asks kept at once (pending, and denied ones until their
	// askTTL ends): a flood of distinct names never holds more in memory, nor more webhook
	// polls in flight.
	DefaultMaxOpenAsks = 64
	// DefaultAsksPerMinute bounds the new asks a minute, and so the approver's new requests.
	DefaultAsksPerMinute = 30
	// DefaultMaxWaiting bounds the requests and queries held at once.
	DefaultMaxWaiting = 512
	// summaryInterval is the least time between two summary events of misses not asked
	// about.
	summaryInterval = 10 * time.Second
)

// PolicySource returns the loaded policy (*policy.Store).
type PolicySource interface {
	Current() *policy.Policy
}

// Secrets fetches a policy secret's value by name (*credentials.Broker): the webhook's
// HMAC key.
type Secrets interface {
	Value(ctx context.Context, secret string) (string, error)
}

// Config configures a Stage. Policy is required; every other zero value is usable.
type Config struct {
	// Policy is the loaded policy. Required.
	Policy PolicySource
	// StateDir is where grants are kept (grants.json) and the operator socket is opened.
	// Empty keeps grants in memory only and opens no socket.
	StateDir string
	// Sandbox names the sandbox in asks and audit events.
	Sandbox string
	// Audit receives the approval events. Nil drops them.
	Audit audit.Sink
	// Logger receives operational logs. Nil discards them.
	Logger *logrus.Logger
	// Registerer gets the airlock_approval_* metrics. Nil leaves them unregistered.
	Registerer prometheus.Registerer
	// Now is the clock of asks and grants. Nil means time.Now. Holds wait in real time.
	Now func() time.Time
	// Resolver resolves a name before it is asked about, for the address checks. Nil skips
	// them (tests only).
	Resolver Resolver
	// Self is the sidecar's own listeners. Nil means none.
	Self SelfAddrs
	// ClusterDomain is the cluster DNS domain, never asked about. Empty means
	// DefaultClusterDomain.
	ClusterDomain string
	// OnChange is called (never under a lock of the stage) when the set of live grants
	// changed, so that the effective policy is applied again. Nil means nobody is told.
	OnChange func()
	// MaxOpenAsks bounds the asks kept at once. Zero means DefaultMaxOpenAsks.
	MaxOpenAsks int
	// AsksPerMinute bounds the new asks a minute. Zero means DefaultAsksPerMinute.
	AsksPerMinute int
	// MaxWaiting bounds the requests and queries held at once; beyond it a miss on an open
	// ask is answered at once, without waiting (a flood of repeats must not pile up held
	// goroutines). Zero means DefaultMaxWaiting.
	MaxWaiting int
	// Transport carries the webhook's requests: the operator's dial path
	// (egress.Operator.Transport). Nil means a webhook cannot be reached, and its asks are
	// denied (fail closed).
	Transport http.RoundTripper
	// Secrets fetches the webhook's HMAC key. Nil means the key cannot be had (fail closed).
	Secrets Secrets
}

// effective is the effective policy built from one loaded policy.
type effective struct {
	base  *policy.Policy // the loaded policy
	pol   *policy.Policy // base with the live grants
	until time.Time      // pol holds no grant that ends before this
}

type key struct {
	host     string
	port     int
	identity string // asks are per identity (spec.identities): one never answers another's
}

// Stage is the approval stage of one sidecar. It is safe for concurrent use.
type Stage struct {
	cfg     Config
	metrics *metrics
	wake    chan struct{}
	waiting chan struct{} // a slot per held request or query (MaxWaiting)
	// ctx ends the webhook exchanges at Close; wg counts them and the delayed notifications.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// eff is the effective policy as last built, read without the lock by Current; nil
	// after the grants changed. Written under mu.
	eff atomic.Pointer[effective]
	// hooks lets tests see asks as they are made. Nil in production.
	onAsk  func(Ask)
	onJoin func(Ask) // a miss joined an open ask

	// mu guards every field below.
	mu          sync.Mutex
	asks        map[string]*Ask // by ID: pending asks and denied ones until they expire
	byKey       map[key]*Ask
	grants      map[string]Grant
	window      []time.Time // when the asks of the last minute were made
	dropped     int64       // misses not asked about since lastSummary (the bound)
	lastSummary time.Time
}

// New checks cfg and builds a Stage. It reads nothing and opens nothing: Load reads the
// kept grants, Serve opens the operator socket, Run ends grants as they expire.
func New(cfg Config) (*Stage, error) {
	if cfg.Policy == nil {
		return nil, fmt.Errorf("approval: Policy is required")
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
	if cfg.MaxOpenAsks <= 0 {
		cfg.MaxOpenAsks = DefaultMaxOpenAsks
	}
	if cfg.AsksPerMinute <= 0 {
		cfg.AsksPerMinute = DefaultAsksPerMinute
	}
	if cfg.MaxWaiting <= 0 {
		cfg.MaxWaiting = DefaultMaxWaiting
	}
	if cfg.ClusterDomain == "" {
		cfg.ClusterDomain = DefaultClusterDomain
	}
	m := newMetrics()
	if err := m.register(cfg.Registerer); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Stage{cfg: cfg, metrics: m, wake: make(chan struct{}, 1), waiting: make(chan struct{}, cfg.MaxWaiting),
		ctx: ctx, cancel: cancel, asks: map[string]*Ask{}, byKey: map[key]*Ask{}, grants: map[string]Grant{}}, nil
}

// Close stops the webhook exchanges in flight (their asks stay pending until they expire)
// and waits for them. It is idempotent; the grants stay in the state directory.
func (s *Stage) Close() {
	s.cancel()
	s.wg.Wait()
}

// Current returns the effective policy: the loaded policy with one rule per live grant. It
// satisfies the proxy's and the DNS filter's PolicySource.
func (s *Stage) Current() *policy.Policy {
	base := s.cfg.Policy.Current()
	now := s.cfg.Now()
	if e := s.eff.Load(); e != nil && e.base == base && now.Before(e.until) {
		return e.pol
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rebuildLocked(base, now)
}

// rebuildLocked builds the effective policy from base and the grants live at now.
func (s *Stage) rebuildLocked(base *policy.Policy, now time.Time) *policy.Policy {
	var rules []policy.GrantRule
	next := now.Add(24 * time.Hour)
	for _, g := range sortedGrants(s.grants) {
		if !g.live(now) {
			continue
		}
		if !g.Until.IsZero() && g.Until.Before(next) {
			next = g.Until
		}
		rules = append(rules, policy.GrantRule{ID: g.ID, Host: g.Host, Ports: g.Ports, Identity: g.Identity})
	}
	e := &effective{base: base, pol: base.WithGrants(rules), until: next}
	s.eff.Store(e)
	return e.pol
}

// invalidateLocked makes the next Current rebuild the effective policy.
func (s *Stage) invalidateLocked() { s.eff.Store(nil) }

// rearm has Run compute its next wake-up again (a new ask, grant or pending summary).
func (s *Stage) rearm() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// changed tells the wiring that the live grants changed, and re-arms Run's timer.
func (s *Stage) changed() {
	s.rearm()
	if s.cfg.OnChange != nil {
		s.cfg.OnChange()
	}
}

// newID returns a fresh ask ID: 12 hex digits.
func newID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
