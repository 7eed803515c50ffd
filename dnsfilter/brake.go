package dnsfilter

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// brake is the DNS-exfiltration brake for names allowed only through a wildcard host
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
// It is safe for concurrent use.
type brake struct {
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

func newBrake(now func() time.Time) *brake {
	return &brake{now: now, buckets: map[string]*bucket{}, seen: map[string]time.Time{}}
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
func (b *brake) admit(wildcard, name string, perMinute int) bool {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sweep(now)
	key := wildcard + "\x00" + name
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
func (b *brake) sweep(now time.Time) {
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
