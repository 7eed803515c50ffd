package dnsfilter

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/policy"
)

// Brake is the DNS-exfiltration brake for names allowed only through a wildcard host
// ("*.example.com"). A wildcard lets the sandbox choose the labels under the zone, and the
// query (even one that ends in NXDOMAIN) carries them to the zone's authoritative servers:
// data can leave in the names themselves. Exact hosts carry no such channel. Two limits:
//
//   - every label left of the zone is at most maxLabelLength bytes (policy dns.maxLabelLength);
//   - each wildcard admits at most perMinute new names a minute (policy
//     dns.wildcardQueriesPerMinute), a token bucket holding a minute's worth. A name asked
//     again within a minute of being admitted is not new and costs nothing, so a client that
//     re-resolves the same hosts is never braked.
//
// Names are counted in canonical (lower) case, and forwarded so (upstreamQuery): every
// spelling of a name is that name. One Brake serves the filter and every other path by which
// a sandbox's names reach an upstream resolver (the proxy's resolver: Admit), so a name is
// new once whichever path asks first. It is safe for concurrent use.
type Brake struct {
	now func() time.Time

	// mu guards buckets and seen.
	mu      sync.Mutex
	buckets map[string]*bucket   // by wildcard host
	seen    map[string]time.Time // admitted name → when it stops being free
	checks  int                  // admit calls since the last sweep of seen
}

// bucket is a token bucket.
type bucket struct {
	tokens float64
	last   time.Time
}

// seenFor is how long an admitted name is free to ask again.
const seenFor = time.Minute

// NewBrake returns an empty brake on clock now (nil means time.Now).
func NewBrake(now func() time.Time) *Brake {
	if now == nil {
		now = time.Now
	}
	return &Brake{now: now, buckets: map[string]*bucket{}, seen: map[string]time.Time{}}
}

// Admit applies the brakes of policy pol to a name resolved for the sandbox outside the
// filter (the proxy resolving a request's host): a name allowed only through a wildcard
// must pass the label-length limit and spend a token of its wildcard like a DNS query does.
// Any other name (exact, denied, an IP address) passes: the brake is not the policy, the
// caller decides those. In report mode a braked name passes too (report mode never refuses),
// but its token is spent. Errors wrap ErrBraked.
func (b *Brake) Admit(pol *policy.Policy, name string) error {
	nd := pol.DecideName(name)
	if !nd.Allowed() || nd.WouldDeny || nd.Wildcard == "" {
		return nil
	}
	cfg := pol.DNS()
	var detail string
	if msg := checkLabels(nd.Host, nd.Zone(), cfg.MaxLabelLength); msg != "" {
		detail = msg
	} else if !b.admit(nd.Wildcard, nd.Host, cfg.WildcardQueriesPerMinute) {
		detail = rateDetail(cfg, nd.Wildcard)
	}
	if detail == "" || pol.Mode() == policy.ModeReport {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrBraked, detail)
}

// rateDetail is the detail of a name the rate brake stops.
func rateDetail(cfg policy.DNSConfig, wildcard string) string {
	return fmt.Sprintf("more than %d new names a minute under %s (dns.wildcardQueriesPerMinute)",
		cfg.WildcardQueriesPerMinute, wildcard)
}

// checkLabels returns a reason when a label of name left of zone is longer than max.
func checkLabels(name, zone string, max int) string {
	rest := strings.TrimSuffix(strings.TrimSuffix(name, zone), ".")
	for label := range strings.SplitSeq(rest, ".") {
		if len(label) > max {
			return fmt.Sprintf("label %q under wildcard zone %q is %d bytes, more than dns.maxLabelLength %d",
				truncate(label, 16), zone, len(label), max)
		}
	}
	return ""
}

// admit spends a token of wildcard's bucket for name unless name was admitted within the last
// minute; it returns false when the bucket is empty.
func (b *Brake) admit(wildcard, name string, perMinute int) bool {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sweep(now)
	key := wildcard + "\x00" + strings.ToLower(name)
	if until, ok := b.seen[key]; ok && until.After(now) {
		return true
	}
	bk := b.buckets[wildcard]
	if bk == nil {
		bk = &bucket{tokens: float64(perMinute), last: now}
		b.buckets[wildcard] = bk
	}
	bk.tokens = min(float64(perMinute), bk.tokens+now.Sub(bk.last).Minutes()*float64(perMinute))
	bk.last = now
	if bk.tokens < 1 {
		return false
	}
	bk.tokens--
	b.seen[key] = now.Add(seenFor)
	return true
}

// sweep drops expired names every sweepEvery calls. b.mu must be held.
func (b *Brake) sweep(now time.Time) {
	if b.checks++; b.checks < sweepEvery {
		return
	}
	b.checks = 0
	for k, until := range b.seen {
		if !until.After(now) {
			delete(b.seen, k)
		}
	}
}

// truncate shortens s to n bytes for a message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
