package credentials

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// DefaultCacheTTL is the cache TTL when none is configured.
const DefaultCacheTTL = 5 * time.Minute

// cache holds fetched values for up to ttl. A value older than ttl/2 is fetched again on
// its next use; when that fetch fails, the cached value is served until it is ttl old (or
// its lease ends, if sooner): the source may be down briefly without failing requests, and
// is never trusted for longer than ttl. Rotation is seen within ttl.
type cache struct {
	ttl time.Duration
	now func() time.Time

	// mu guards entries (the map; each entry has its own lock).
	mu      sync.Mutex
	entries map[string]*entry
}

// retryAfter is how long a failed fetch is not retried: while a source hangs, a burst of
// requests must not queue up one fetch timeout each behind the entry's lock.
const retryAfter = time.Second

// entry is one cached value; mu serialises its fetches so a burst of requests fetches once.
type entry struct {
	mu      sync.Mutex
	val     Value
	fetched time.Time
	ok      bool
	failed  time.Time // when the last fetch failed (zero after a success)
	failErr error     // its error
}

func newCache(ttl time.Duration, now func() time.Time) *cache {
	return &cache{ttl: ttl, now: now, entries: map[string]*entry{}}
}

// result says where a value came from.
type result int

const (
	fromCache  result = iota // fresh in the cache
	fromSource               // just fetched
	fromStale                // the fetch failed; a still-valid cached value was served
)

// get returns the value for key, fetching it when needed. Errors wrap ErrUnavailable and
// the fetch error; they are returned only when no still-valid value is cached.
func (c *cache) get(ctx context.Context, key string, fetch func(context.Context) (Value, error)) (Value, result, error) {
	c.mu.Lock()
	e := c.entries[key]
	if e == nil {
		e = &entry{}
		c.entries[key] = e
	}
	c.mu.Unlock()

	e.mu.Lock()
	defer e.mu.Unlock()
	now := c.now()
	if e.ok && now.Before(e.fetched.Add(c.ttl/2)) && valid(e.val, now) {
		return e.val, fromCache, nil
	}
	var err error
	if !e.failed.IsZero() && now.Sub(e.failed) < retryAfter {
		err = e.failErr // failed a moment ago: do not wait for the source again
	} else {
		var v Value
		if v, err = fetch(ctx); err == nil {
			e.val, e.fetched, e.ok, e.failed, e.failErr = v, c.now(), true, time.Time{}, nil
			return v, fromSource, nil
		}
		e.failed, e.failErr = c.now(), err
	}
	now = c.now()
	if e.ok && now.Before(e.fetched.Add(c.ttl)) && valid(e.val, now) {
		return e.val, fromStale, nil
	}
	return Value{}, fromSource, fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// valid reports whether v's lease (if it has an end) has not ended at now.
func valid(v Value, now time.Time) bool { return v.Expires.IsZero() || now.Before(v.Expires) }
