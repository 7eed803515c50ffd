package dnsfilter

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// AllowMap is where the filter records the addresses of allowed answers.
type AllowMap interface {
	// Allow makes addr reachable on ports until the given wall-clock time; an existing entry is extended, never shortened. It returns once the kernel sees the entry.
	Allow(addr netip.Addr, ports []uint16, until time.Time) error
	// Revoke removes addr for those ports (used when the per-name cap evicts an address).
	Revoke(addr netip.Addr, ports []uint16) error
}

// PolicySource returns the policy in force. *policy.Store satisfies it. The filter calls
// Current once per query, so a reload applies to the next query.
type PolicySource interface {
	Current() *policy.Policy
}

// Approvals is the approval stage (package approval; internal/sidecar passes it in): with
// spec.approval, a query for a name no rule names is held (at most
// policy.DNSApprovalHoldCap) while the operator is asked. SettleName returns the policy and
// decision the query goes on with: allowed by a grant (its addresses then enter the allow
// map like any answer's), or a denial with ReasonApprovalPending or ReasonApprovalDenied
// whose detail, with the ask's ID, goes into the Extended DNS Error.
type Approvals interface {
	SettleName(ctx context.Context, pol *policy.Policy, nd policy.NameDecision) (*policy.Policy, policy.NameDecision)
}

// Identities tells which identity of the policy (spec.identities) sent a query, from the
// kernel's record of the cgroup of the sandbox task that sent it (internal/sidecar passes the
// kernel's lookup in). Nothing in the query chooses it.
type Identities interface {
	// QueryIdentity returns the identity name of the query with message ID id from client
	// (its source address and port), received over TCP when tcp is set, else over UDP: "" for
	// the sandbox's own policy. An error means it cannot be told; the query is then refused
	// with identity_unknown.
	QueryIdentity(client netip.AddrPort, id uint16, tcp bool) (string, error)
}

// Defaults for the zero values of Config.
const (
	// DefaultTimeout bounds one exchange with one upstream resolver.
	DefaultTimeout = 2 * time.Second
	// DefaultResolvConf is read for upstreams when neither Config.Upstreams nor the policy
	// names any.
	DefaultResolvConf = "/etc/resolv.conf"
)

// Config configures a Filter. Policy is required; every other zero value is usable.
type Config struct {
	// Policy returns the policy in force. Required.
	Policy PolicySource
	// Upstreams are the resolvers allowed queries go to, each "ip:port", tried in order.
	// Empty means the current policy's dns.upstreams (so a reload changes them), else the
	// nameservers of ResolvConf (port 53). This is the order airlock run uses for the proxy's
	// resolver: --upstream-dns, else dns.upstreams, else /etc/resolv.conf.
	Upstreams []netip.AddrPort
	// ResolvConf is the file read for upstreams when there are no others. Empty means
	// DefaultResolvConf.
	ResolvConf string
	// AllowMap receives the addresses of allowed answers before the client sees them. Nil
	// means none (no kernel enforcement): addresses are still tracked for Resolved.
	AllowMap AllowMap
	// Answers receives every forwarded address answer (see AnswerSink). Nil means none.
	Answers AnswerSink
	// LLMAddr is the sidecar's LLM endpoint listener; llm.airlock.internal resolves to its
	// address (see reserved.go). Invalid (the zero value) means the endpoint is off, and the
	// name gets NXDOMAIN.
	LLMAddr netip.AddrPort
	// Audit receives one event per query. Nil drops events.
	Audit audit.Sink
	// Logger receives operational logs (never query contents beyond names). Nil discards.
	Logger *logrus.Logger
	// Registerer gets the airlock_dns_* metrics. Nil leaves them unregistered.
	Registerer prometheus.Registerer
	// Timeout bounds one exchange with one upstream. Zero means DefaultTimeout.
	Timeout time.Duration
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
	// Approvals holds queries for names no rule names while the operator is asked. Nil
	// means they are refused at once.
	Approvals Approvals
	// Identities tells which identity sent each query, when the policy has identities:
	// the query is then decided by that identity's policy, and refused (identity_unknown)
	// when it cannot be told. Nil means every query is decided by the sandbox's own policy.
	Identities Identities
	// Brake is the exfiltration brake (see Brake). Nil means one of the filter's own; the
	// sidecar passes the one its proxy's resolver admits names through too.
	Brake *Brake
}

// withDefaults checks c and fills in the defaults.
func (c Config) withDefaults() (Config, error) {
	if c.Policy == nil {
		return c, fmt.Errorf("%w: Policy is required", ErrInvalidConfig)
	}
	for _, u := range c.Upstreams {
		if !u.IsValid() || u.Port() == 0 {
			return c, fmt.Errorf("%w: upstream %v: want ip:port", ErrInvalidConfig, u)
		}
	}
	if c.Timeout < 0 {
		return c, fmt.Errorf("%w: Timeout must not be negative", ErrInvalidConfig)
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.ResolvConf == "" {
		c.ResolvConf = DefaultResolvConf
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Brake == nil {
		c.Brake = NewBrake(c.Now)
	}
	if c.Logger == nil {
		c.Logger = logrus.New()
		c.Logger.Out = discard{}
	}
	return c, nil
}

// discard is an io.Writer that drops everything.
type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
