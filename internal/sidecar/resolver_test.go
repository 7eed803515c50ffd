package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/dnsfilter"
	"github.com/airlock-dev/airlock/egress"
	"github.com/airlock-dev/airlock/policy"
)

// countingResolver answers every name with one address and records the names it was asked.
type countingResolver struct {
	mu    sync.Mutex // guards names
	names []string
}

func (c *countingResolver) LookupTTL(_ context.Context, host string, _ bool) ([]netip.Addr, time.Duration, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.names = append(c.names, host)
	return []netip.Addr{netip.MustParseAddr("198.18.7.1")}, time.Minute, nil
}

// Names the proxy resolves for the sandbox's requests reach the upstream resolver as surely
// as the sandbox's own queries: under an allowed wildcard they must spend the same brake, and
// leave in canonical case.
func TestProxyResolverIsBraked(t *testing.T) {
	doc := `apiVersion: airlock/v1
kind: EgressPolicy
metadata:
  name: braked
spec:
  dns:
    wildcardQueriesPerMinute: 5
  egress:
    - name: zone
      hosts: ["*.zone.example", "exact.example"]
`
	pol, err := policy.Parse("braked.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	next := &countingResolver{}
	r := egress.NewCachingResolver(egress.NewAnswerCache(egress.CacheConfig{}),
		brakedResolver{next: next, brake: dnsfilter.NewBrake(nil), current: func() *policy.Policy { return pol }})
	refused := 0
	for i := range 200 {
		_, err := r.LookupNetIP(context.Background(), "ip", fmt.Sprintf("Chunk%03d.ZONE.example", i))
		if errors.Is(err, dnsfilter.ErrBraked) {
			refused++
		} else if err != nil {
			t.Fatalf("name %d: %v", i, err)
		}
	}
	if _, err := r.LookupNetIP(context.Background(), "ip", "EXACT.example"); err != nil {
		t.Errorf("an exact host: %v", err)
	}
	if refused != 195 {
		t.Errorf("refused %d of 200 new names, want 195 (5 a minute)", refused)
	}
	distinct := map[string]bool{}
	for _, n := range next.names {
		distinct[n] = true
		if n != "exact.example" && (len(n) < 5 || n[:5] != "chunk") {
			t.Errorf("upstream asked %q, want canonical case", n)
		}
	}
	if len(distinct) != 6 {
		t.Errorf("upstream saw %d distinct names, want 6 (5 under the wildcard, 1 exact)", len(distinct))
	}
}
