package egress

import (
	"context"
	"errors"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// ttlResolver answers each family of a name from a list of answers in turn (the last one
// repeats), with a fixed TTL, and counts queries.
type ttlResolver struct {
	mu      sync.Mutex
	ttl     time.Duration
	answers map[string][][]netip.Addr // IPv4 answers; IPv6 is always empty
	queries int
}

func (r *ttlResolver) LookupTTL(_ context.Context, host string, v6 bool) ([]netip.Addr, time.Duration, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if v6 {
		return nil, r.ttl, nil
	}
	as := r.answers[host]
	if len(as) == 0 {
		return nil, 0, errors.New("no such host")
	}
	n := r.queries
	r.queries++
	return as[min(n, len(as)-1)], r.ttl, nil
}

func (r *ttlResolver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.queries
}

// clock is a settable clock for the cache.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// cachedGuard returns a guard over a CachingResolver whose answers come from r, on clk,
// with minTTL and maxTTL as the cache's bounds, and the dial recorder.
func cachedGuard(t *testing.T, r TTLResolver, clk *clock, minTTL, maxTTL time.Duration) (*Guard, *AnswerCache, *dialer) {
	t.Helper()
	cache := NewAnswerCache(CacheConfig{MinTTL: func() time.Duration { return minTTL }, MaxTTL: maxTTL, Now: clk.Now})
	d := &dialer{fail: map[netip.AddrPort]bool{}}
	g, err := New(Config{Resolver: NewCachingResolver(cache, r), Dial: d.dial,
		Self: NewSelfAddrs(func() ([]netip.Addr, error) { return nil, nil })})
	if err != nil {
		t.Fatal(err)
	}
	return g, cache, d
}

// TestCacheNeverOutlivesTTLBound: an answer is reused until its lifetime — the TTL raised
// to minTTL and capped at maxTTL — ends, and not one tick longer.
func TestCacheNeverOutlivesTTLBound(t *testing.T) {
	for _, tc := range []struct {
		name          string
		ttl, min, max time.Duration
		life          time.Duration
	}{
		{name: "TTL", ttl: 30 * time.Second, min: 5 * time.Second, max: time.Minute, life: 30 * time.Second},
		{name: "raised to minTTL", ttl: time.Second, min: 10 * time.Second, max: time.Minute, life: 10 * time.Second},
		{name: "capped at max", ttl: time.Hour, min: 0, max: time.Minute, life: time.Minute},
		{name: "minTTL above max is capped", ttl: time.Second, min: time.Hour, max: time.Minute, life: time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &clock{now: time.Unix(1_700_000_000, 0)}
			r := &ttlResolver{ttl: tc.ttl, answers: map[string][][]netip.Addr{"svc.test": {addrs(public)}}}
			g, _, _ := cachedGuard(t, r, clk, tc.min, tc.max)
			resolve := func() {
				t.Helper()
				if _, err := g.Resolve(context.Background(), "svc.test", 443, Ranges(nil)); err != nil {
					t.Fatal(err)
				}
			}
			resolve()
			clk.advance(tc.life - time.Nanosecond)
			resolve()
			if n := r.count(); n != 1 {
				t.Fatalf("within the lifetime: %d queries, want 1 (the answer should be cached)", n)
			}
			clk.advance(time.Nanosecond)
			resolve()
			if n := r.count(); n != 2 {
				t.Fatalf("at the end of the lifetime %s: %d queries, want 2 (the answer outlived its bound)", tc.life, n)
			}
		})
	}
}

// TestCacheFromDNSFilterBounded: an answer the DNS filter put in is bounded the same way.
func TestCacheFromDNSFilterBounded(t *testing.T) {
	clk := &clock{now: time.Unix(1_700_000_000, 0)}
	r := &ttlResolver{answers: map[string][][]netip.Addr{"svc.test": {addrs(public)}}}
	_, cache, _ := cachedGuard(t, r, clk, 2*time.Second, 10*time.Second)
	cache.PutAnswer("SVC.test.", false, addrs(public), time.Hour)
	clk.advance(10*time.Second - time.Nanosecond)
	if _, ok := cache.get("svc.test", false); !ok {
		t.Fatal("answer gone before its lifetime ended")
	}
	clk.advance(time.Nanosecond)
	if _, ok := cache.get("svc.test", false); ok {
		t.Fatal("answer put with TTL 1h outlived the 10s cap")
	}
	cache.PutAnswer("zero.test", false, addrs(public), 0)
	if _, ok := cache.get("zero.test", false); !ok {
		t.Fatal("TTL 0 with minTTL 2s: want the answer kept for 2s")
	}
}

// TestCachedRebindingNeverReachesInternal: a name that first answers with a public address
// and then with an internal one (DNS rebinding) is refused once the internal answer is
// current, whether the proxy's resolver or the DNS filter put it in the cache; a tunnel
// that resolved the public answer dials only that address.
func TestCachedRebindingNeverReachesInternal(t *testing.T) {
	clk := &clock{now: time.Unix(1_700_000_000, 0)}
	r := &ttlResolver{ttl: 5 * time.Second, answers: map[string][][]netip.Addr{
		"rebind.test": {addrs(public), addrs("127.0.0.1")},
	}}
	g, cache, d := cachedGuard(t, r, clk, 0, time.Minute)
	ctx := context.Background()
	tg, err := g.Resolve(ctx, "rebind.test", 443, Ranges(nil))
	if err != nil {
		t.Fatalf("first (public) answer: %v", err)
	}
	// The answer rebinds upstream; the cached public answer is still current.
	clk.advance(4 * time.Second)
	if _, err := g.Resolve(ctx, "rebind.test", 443, Ranges(nil)); err != nil {
		t.Fatalf("cached public answer: %v", err)
	}
	clk.advance(time.Second)
	if _, err := g.Resolve(ctx, "rebind.test", 443, Ranges(nil)); !errors.Is(err, ErrInternalAddress) {
		t.Fatalf("after the TTL the internal answer: got %v, want ErrInternalAddress", err)
	}
	// The DNS filter forwards a rebinding answer for another name: refused just the same,
	// alone or mixed with a public address.
	for _, answer := range [][]netip.Addr{addrs("10.0.0.1"), addrs(public, "169.254.169.254")} {
		cache.PutAnswer("filter.test", false, answer, time.Minute)
		if _, err := g.Resolve(ctx, "filter.test", 443, Ranges(nil)); !errors.Is(err, ErrInternalAddress) {
			t.Fatalf("answer %v from the DNS filter: got %v, want ErrInternalAddress", answer, err)
		}
	}
	// The target resolved first dials what was checked, whatever the cache holds now.
	if _, _, err := g.Dial(ctx, tg); err != nil {
		t.Fatal(err)
	}
	if got, want := d.dials(), []netip.AddrPort{netip.AddrPortFrom(netip.MustParseAddr(public), 443)}; !slices.Equal(got, want) {
		t.Fatalf("dialled %v, want only the checked %v", got, want)
	}
}

// TestCacheBounded: a full cache makes room, dropping expired entries first.
func TestCacheBounded(t *testing.T) {
	clk := &clock{now: time.Unix(1_700_000_000, 0)}
	c := NewAnswerCache(CacheConfig{MaxNames: 2, Now: clk.Now})
	c.PutAnswer("a.test", false, addrs(public), time.Second)
	c.PutAnswer("b.test", false, addrs(public), time.Minute)
	clk.advance(2 * time.Second)
	c.PutAnswer("c.test", false, addrs(public), time.Minute)
	if _, ok := c.get("b.test", false); !ok {
		t.Fatal("a live entry was evicted while an expired one was there")
	}
	c.PutAnswer("d.test", false, addrs(public), 2*time.Minute)
	if len(c.m) != 2 {
		t.Fatalf("cache holds %d entries, want at most 2", len(c.m))
	}
}

// blockingResolver answers once release is closed, counting questions.
type blockingResolver struct {
	release chan struct{}
	mu      sync.Mutex
	n       int
}

func (b *blockingResolver) LookupTTL(_ context.Context, _ string, v6 bool) ([]netip.Addr, time.Duration, error) {
	b.mu.Lock()
	b.n++
	b.mu.Unlock()
	<-b.release
	if v6 {
		return nil, time.Minute, nil
	}
	return addrs(public), time.Minute, nil
}

// TestConcurrentMissesAskOnce: tunnels opening at once to a name not in the cache share one
// question per family.
func TestConcurrentMissesAskOnce(t *testing.T) {
	br := &blockingResolver{release: make(chan struct{})}
	cr := NewCachingResolver(NewAnswerCache(CacheConfig{}), br)
	const n = 16
	errs := make(chan error, n)
	for range n {
		go func() {
			a, err := cr.LookupNetIP(context.Background(), "ip", "svc.test")
			if err == nil && !slices.Equal(a, addrs(public)) {
				err = errors.New("wrong answer")
			}
			errs <- err
		}()
	}
	// Wait until both families' questions are under way, then let them answer.
	for {
		br.mu.Lock()
		asked := br.n
		br.mu.Unlock()
		cr.mu.Lock()
		inFlight := len(cr.flight)
		cr.mu.Unlock()
		if asked == 2 && inFlight == 2 {
			break
		}
		if asked > 2 {
			t.Fatalf("%d questions for one name, want 2 (A and AAAA)", asked)
		}
		runtime.Gosched()
	}
	close(br.release)
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if br.n != 2 {
		t.Fatalf("%d questions, want 2", br.n)
	}
}
