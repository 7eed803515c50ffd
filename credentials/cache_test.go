package credentials

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.t = c.t.Add(d) }

func TestCache(t *testing.T) {
	clk := &clock{t: time.Unix(1000, 0)}
	c := newCache(10*time.Second, clk.now)
	down := errors.New("vault down")
	var fetches int
	value, fail := "v1", error(nil)
	fetch := func(context.Context) (Value, error) {
		fetches++
		if fail != nil {
			return Value{}, fail
		}
		return Value{Secret: value}, nil
	}
	get := func() (string, result, error) {
		v, res, err := c.get(context.Background(), "k", fetch)
		return v.Secret, res, err
	}
	steps := []struct {
		name    string
		advance time.Duration
		value   string
		fail    error
		want    string
		res     result
		wantErr bool
	}{
		{name: "first fetch", want: "v1", res: fromSource},
		{name: "fresh", advance: 4 * time.Second, value: "v2", want: "v1", res: fromCache},
		{name: "refresh after ttl/2 sees rotation", advance: 2 * time.Second, value: "v2", want: "v2", res: fromSource},
		{name: "source down, still valid", advance: 6 * time.Second, fail: down, want: "v2", res: fromStale},
		{name: "source down, past ttl", advance: 5 * time.Second, fail: down, wantErr: true},
		{name: "source back within the retry pause: not asked", value: "v3", wantErr: true},
		{name: "source back", advance: 2 * time.Second, value: "v3", want: "v3", res: fromSource},
	}
	for _, s := range steps {
		clk.add(s.advance)
		if s.value != "" {
			value = s.value
		}
		fail = s.fail
		got, res, err := get()
		if s.wantErr {
			if !errors.Is(err, ErrUnavailable) || !errors.Is(err, down) { // the last fetch error
				t.Fatalf("%s: got %q, %v; want ErrUnavailable wrapping the fetch error", s.name, got, err)
			}
			continue
		}
		if err != nil || got != s.want || res != s.res {
			t.Fatalf("%s: got %q (result %d), %v; want %q (result %d)", s.name, got, res, err, s.want, s.res)
		}
	}
	if fetches != 5 {
		t.Fatalf("fetches: got %d, want 5", fetches)
	}
}

func TestCacheLeaseEnd(t *testing.T) {
	clk := &clock{t: time.Unix(1000, 0)}
	c := newCache(time.Hour, clk.now)
	n := 0
	fetch := func(context.Context) (Value, error) {
		n++
		if n > 1 {
			return Value{}, errors.New("down")
		}
		return Value{Secret: "leased", Expires: clk.now().Add(time.Minute)}, nil
	}
	if _, _, err := c.get(context.Background(), "k", fetch); err != nil {
		t.Fatal(err)
	}
	clk.add(2 * time.Minute) // within the cache TTL but past the lease
	if v, _, err := c.get(context.Background(), "k", fetch); err == nil {
		t.Fatalf("got %q after its lease ended, want an error", v.Secret)
	}
}
