package approval

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/policy"
)

// anyPublic resolves every name to one public address.
type anyPublic struct{}

func (anyPublic) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return []netip.Addr{netip.MustParseAddr("198.18.0.50")}, nil
}

// TestFloodOfDistinctNamesIsBounded: 10,000 distinct unlisted names make at most the bound
// of asks (kept in memory and sent to approvers); the rest are counted into summary events
// whose counts add up.
func TestFloodOfDistinctNamesIsBounded(t *testing.T) {
	f := newFixture(t, "  approval: {hold: 1ms}\n", func(c *Config) { c.Resolver = anyPublic{} })
	const n = 10000
	pending, refused := 0, 0
	for i := range n {
		d := f.settle(context.Background(), fmt.Sprintf("n%d.flood.example", i), 443)
		switch d.Reason {
		case policy.ReasonApprovalPending:
			pending++
		case policy.ReasonNoRule:
			refused++
			if !strings.Contains(d.Detail, "too many asks") {
				t.Fatalf("a miss beyond the bound: %q", d.Detail)
			}
		default:
			t.Fatalf("got %s", d.Reason)
		}
		if i%1000 == 999 {
			f.clk.Add(11 * time.Second) // a minute passes every ~6000 names
			f.s.Sweep()
		}
	}
	asks := len(f.ev.of(EventAsk))
	if asks != pending || asks > DefaultMaxOpenAsks {
		t.Fatalf("got %d asks (%d pending answers), want at most %d", asks, pending, DefaultMaxOpenAsks)
	}
	f.s.mu.Lock()
	inMemory := len(f.s.asks)
	f.s.mu.Unlock()
	if inMemory > DefaultMaxOpenAsks {
		t.Fatalf("%d asks in memory, want at most %d", inMemory, DefaultMaxOpenAsks)
	}
	f.clk.Add(time.Minute)
	f.s.Sweep()
	var counted int64
	for _, ev := range f.ev.of(EventSummary) {
		counted += ev.Count
	}
	if counted != int64(refused) || pending+refused != n {
		t.Fatalf("summaries count %d misses, %d were refused (%d pending)", counted, refused, pending)
	}
	if s := len(f.ev.of(EventSummary)); s > 1+n/1000*2 {
		t.Fatalf("%d summary events; want at most one per %s", s, summaryInterval)
	}
}

// TestAsksPerMinute: with room for many open asks, new ones are still limited per minute.
func TestAsksPerMinute(t *testing.T) {
	f := newFixture(t, "  approval: {hold: 1ms}\n", func(c *Config) {
		c.Resolver, c.MaxOpenAsks, c.AsksPerMinute = anyPublic{}, 1000, 5
	})
	for i := range 20 {
		f.settle(context.Background(), fmt.Sprintf("r%d.flood.example", i), 443)
	}
	if got := len(f.ev.of(EventAsk)); got != 5 {
		t.Fatalf("got %d asks in a minute, want 5", got)
	}
	f.clk.Add(time.Minute)
	f.settle(context.Background(), "late.flood.example", 443)
	if got := len(f.ev.of(EventAsk)); got != 6 {
		t.Fatalf("after a minute: got %d asks, want 6", got)
	}
}

// TestFloodWebhookBounded: under a flood of distinct names, the webhook receives one request
// per ask, and the asks are bounded.
func TestFloodWebhookBounded(t *testing.T) {
	var mu sync.Mutex
	requests := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a WebhookAsk
		_ = json.NewDecoder(r.Body).Decode(&a)
		mu.Lock()
		requests++
		mu.Unlock()
		_ = json.NewEncoder(w).Encode(signed(a, "deny", "", ""))
	}))
	t.Cleanup(srv.Close)
	approval := fmt.Sprintf("  approval:\n    hold: 1ms\n    approvers:\n      webhook: {url: %q, secret: hook-key}\n", srv.URL)
	f := newFixture(t, approval, func(c *Config) {
		c.Resolver, c.Transport, c.Secrets, c.Now = anyPublic{}, http.DefaultTransport.(*http.Transport).Clone(), keySecrets(hookKey), time.Now
	})
	for i := range 10000 {
		f.settle(context.Background(), fmt.Sprintf("w%d.flood.example", i), 443)
	}
	asks := len(f.ev.of(EventAsk))
	if asks == 0 || asks > DefaultAsksPerMinute {
		t.Fatalf("got %d asks in under a minute, want 1..%d", asks, DefaultAsksPerMinute)
	}
	for i := 0; len(f.ev.of(EventDeny)) < asks; i++ { // the webhook answers from its goroutines
		if i > 400 {
			t.Fatalf("%d of %d asks answered", len(f.ev.of(EventDeny)), asks)
		}
		time.Sleep(25 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if requests != asks {
		t.Fatalf("the webhook got %d requests for %d asks", requests, asks)
	}
}

// TestPendingSummaryRearmsRun: the first miss not asked about after a summary wakes Run, which
// then arms its timer for the summary's due time, so the summary is written within
// summaryInterval even when the misses stop (Run would otherwise sleep until the next ask's
// expiry).
func TestPendingSummaryRearmsRun(t *testing.T) {
	f := newFixture(t, "  approval: {hold: 1ms}\n", func(c *Config) { c.Resolver = anyPublic{} })
	for i := 0; ; i++ {
		select {
		case <-f.s.wake: // drained: only a later wake counts
		default:
		}
		summaries := len(f.ev.of(EventSummary))
		d := f.settle(context.Background(), fmt.Sprintf("n%d.flood.example", i), 443)
		if i > 10*DefaultMaxOpenAsks {
			t.Fatal("the bound never left a miss for a later summary")
		}
		if d.Reason != policy.ReasonNoRule || len(f.ev.of(EventSummary)) > summaries {
			continue // an ask, or a miss whose summary was written at once (the first one)
		}
		select {
		case <-f.s.wake:
		default:
			t.Fatal("a miss left for a later summary did not wake Run")
		}
		f.s.mu.Lock()
		want := f.s.lastSummary.Add(summaryInterval)
		f.s.mu.Unlock()
		if due := f.s.nextDue(); due.IsZero() || due.After(want) {
			t.Fatalf("Run's next wake-up %v, want by the summary's due time %v", due, want)
		}
		return
	}
}
