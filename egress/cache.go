package egress

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// DefaultMaxCacheTTL caps how long an AnswerCache keeps an answer, whatever its TTL.
const DefaultMaxCacheTTL = 5 * time.Minute

// DefaultCacheNames bounds an AnswerCache's entries when CacheConfig.MaxNames is zero.
const DefaultCacheNames = 4096

// TTLResolver resolves one address family of a name and says for how long the answer holds
// (the smallest TTL of the records that made it; 0 when unknown). An empty answer without
// error is a name with no address of that family.
type TTLResolver interface {
	LookupTTL(ctx context.Context, host string, v6 bool) ([]netip.Addr, time.Duration, error)
}

// CacheConfig configures an AnswerCache. The zero value is usable.
type CacheConfig struct {
	// MinTTL returns the lowest lifetime of an answer (the policy's dns.minTTL, which the DNS
	// filter also hands the sandbox). Nil means 0: an answer lives for its TTL.
	MinTTL func() time.Duration
	// MaxTTL caps every answer's lifetime. Zero means DefaultMaxCacheTTL.
	MaxTTL time.Duration
	// MaxNames bounds the cached names; when full, an expired entry, else the entry that
	// expires first, makes room. Zero means DefaultCacheNames.
	MaxNames int
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
}

// AnswerCache holds DNS answers, per name and address family, for the lifetime of their TTL
// bounded below by MinTTL and above by MaxTTL. It only saves the question: every address it
// returns is checked by Guard.Resolve like a fresh answer, and the connection dials what was
// checked. The proxy's resolver (CachingResolver) and the DNS filter (PutAnswer) both fill
// it. It is safe for concurrent use.
type AnswerCache struct {
	minTTL func() time.Duration
	maxTTL time.Duration
	max    int
	now    func() time.Time

	mu sync.Mutex
	m  map[cacheKey]cacheEntry
}

type cacheKey struct {
	name string
	v6   bool
}

type cacheEntry struct {
	addrs   []netip.Addr
	expires time.Time
}

// NewAnswerCache returns an empty cache.
func NewAnswerCache(cfg CacheConfig) *AnswerCache {
	c := &AnswerCache{minTTL: cfg.MinTTL, maxTTL: cfg.MaxTTL, max: cfg.MaxNames, now: cfg.Now, m: map[cacheKey]cacheEntry{}}
	if c.minTTL == nil {
		c.minTTL = func() time.Duration { return 0 }
	}
	if c.maxTTL <= 0 {
		c.maxTTL = DefaultMaxCacheTTL
	}
	if c.max <= 0 {
		c.max = DefaultCacheNames
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c
}

// lifetime bounds ttl by MinTTL and MaxTTL.
func (c *AnswerCache) lifetime(ttl time.Duration) time.Duration {
	return min(max(ttl, c.minTTL()), c.maxTTL)
}

// cacheName is the key form of a name: lower case, no trailing dot.
func cacheName(name string) string {
	return strings.TrimSuffix(strings.ToLower(name), ".")
}

// PutAnswer records the answer for one family of name (the A or AAAA records, v6 for AAAA)
// with its TTL. An answer whose lifetime is zero is not kept.
func (c *AnswerCache) PutAnswer(name string, v6 bool, addrs []netip.Addr, ttl time.Duration) {
	life := c.lifetime(ttl)
	if life <= 0 || name == "" {
		return
	}
	e := cacheEntry{expires: c.now().Add(life)}
	for _, a := range addrs {
		if a = a.Unmap(); !slices.Contains(e.addrs, a) {
			e.addrs = append(e.addrs, a)
		}
	}
	k := cacheKey{name: cacheName(name), v6: v6}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; !ok && len(c.m) >= c.max {
		c.evictLocked()
	}
	c.m[k] = e
}

// evictLocked drops the expired entries, or else the one that expires first.
func (c *AnswerCache) evictLocked() {
	now := c.now()
	var first cacheKey
	var firstAt time.Time
	for k, e := range c.m {
		if !now.Before(e.expires) {
			delete(c.m, k)
			continue
		}
		if firstAt.IsZero() || e.expires.Before(firstAt) {
			first, firstAt = k, e.expires
		}
	}
	if len(c.m) >= c.max {
		delete(c.m, first)
	}
}

// get returns the live answer for one family of name.
func (c *AnswerCache) get(name string, v6 bool) ([]netip.Addr, bool) {
	k := cacheKey{name: name, v6: v6}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok {
		return nil, false
	}
	if !c.now().Before(e.expires) {
		delete(c.m, k)
		return nil, false
	}
	return e.addrs, true
}

// CachingResolver is a Resolver that answers from an AnswerCache and asks its TTLResolver
// for what the cache does not hold (or holds no longer), keeping the answer for its TTL.
// Concurrent misses of one name and family share one question.
type CachingResolver struct {
	cache *AnswerCache
	r     TTLResolver

	// mu guards flight: the questions under way.
	mu     sync.Mutex
	flight map[cacheKey]*lookupCall
}

// lookupCall is one question under way; its fields are set before done is closed.
type lookupCall struct {
	done  chan struct{}
	addrs []netip.Addr
	err   error
}

// NewCachingResolver returns a resolver over r that fills and reads cache.
func NewCachingResolver(cache *AnswerCache, r TTLResolver) *CachingResolver {
	return &CachingResolver{cache: cache, r: r, flight: map[cacheKey]*lookupCall{}}
}

// lookup asks the TTLResolver for one family of name, or waits for the same question
// already under way, and caches the answer. A waiter whose ctx ends stops waiting.
func (cr *CachingResolver) lookup(ctx context.Context, name string, v6 bool) ([]netip.Addr, error) {
	k := cacheKey{name: name, v6: v6}
	cr.mu.Lock()
	// A question that ended since the caller missed the cache has filled it.
	if a, ok := cr.cache.get(name, v6); ok {
		cr.mu.Unlock()
		return a, nil
	}
	c, waiting := cr.flight[k]
	if !waiting {
		c = &lookupCall{done: make(chan struct{})}
		cr.flight[k] = c
	}
	cr.mu.Unlock()
	if waiting {
		select {
		case <-c.done:
			return c.addrs, c.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	a, ttl, err := cr.r.LookupTTL(ctx, name, v6)
	if err == nil {
		cr.cache.PutAnswer(name, v6, a, ttl)
	}
	c.addrs, c.err = a, err
	cr.mu.Lock()
	delete(cr.flight, k)
	cr.mu.Unlock()
	close(c.done)
	return a, err
}

// LookupNetIP resolves host for network "ip", "ip4" or "ip6": each family from the cache
// while its answer lives, else from the TTLResolver (both families at once). A family that
// fails is left out when the other answers; when every family fails the first error is
// returned.
func (cr *CachingResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	var fams []bool
	switch network {
	case "ip":
		fams = []bool{false, true}
	case "ip4":
		fams = []bool{false}
	case "ip6":
		fams = []bool{true}
	default:
		return nil, errors.New("lookup " + host + ": unknown network " + network)
	}
	name := cacheName(host)
	type result struct {
		addrs []netip.Addr
		err   error
	}
	res := make([]result, len(fams))
	var wg sync.WaitGroup
	for i, v6 := range fams {
		if a, ok := cr.cache.get(name, v6); ok {
			res[i].addrs = a
			continue
		}
		wg.Go(func() {
			a, err := cr.lookup(ctx, name, v6)
			res[i] = result{a, err}
		})
	}
	wg.Wait()
	var out []netip.Addr
	var errs []error
	for _, r := range res {
		out = append(out, r.addrs...)
		if r.err != nil {
			errs = append(errs, r.err)
		}
	}
	if len(errs) == len(fams) {
		return nil, errs[0]
	}
	return slices.Clone(out), nil
}
