package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/dnsfilter"
	"github.com/airlock-dev/airlock/egress"
	"github.com/airlock-dev/airlock/policy"
)

// newResolver returns the resolver the proxy and the model API use, over an answer cache
// the DNS filter also fills: --upstream-dns, else the policy's dns.upstreams, asked through
// the DNS filter's exchanger so each answer's TTL is known; else the system's resolver
// (/etc/resolv.conf and /etc/hosts), whose TTLs are unknown, so its answers are kept only
// for dns.minTTL. Every answer lives at most egress.DefaultMaxCacheTTL, and at least the
// current policy's dns.minTTL (what the DNS filter hands the sandbox too). Every name that
// misses the cache passes brake first (brakedResolver).
func newResolver(flagAddr string, pol *policy.Policy, store *policy.Store, brake *dnsfilter.Brake) (*egress.CachingResolver, *egress.AnswerCache, error) {
	var upstreams []string
	switch {
	case flagAddr == Off:
		return nil, nil, errors.New("--upstream-dns off: the proxy needs a resolver")
	case flagAddr != "":
		upstreams = strings.Split(flagAddr, ",")
	default:
		upstreams = pol.DNS().Upstreams
	}
	cache := egress.NewAnswerCache(egress.CacheConfig{MinTTL: func() time.Duration {
		if store == nil {
			return pol.DNS().MinTTL
		}
		return store.Current().DNS().MinTTL
	}})
	current := func() *policy.Policy { return pol }
	if store != nil {
		current = store.Current
	}
	if len(upstreams) == 0 {
		return egress.NewCachingResolver(cache, brakedResolver{systemResolver{&net.Resolver{PreferGo: true}}, brake, current}), cache, nil
	}
	aps, err := policy.ParseUpstreams(upstreams)
	if err != nil {
		return nil, nil, fmt.Errorf("upstream DNS: %w", err)
	}
	l, err := dnsfilter.NewLookup(aps, "", 0)
	if err != nil {
		return nil, nil, fmt.Errorf("upstream DNS: %w", err)
	}
	return egress.NewCachingResolver(cache, brakedResolver{l, brake, current}), cache, nil
}

// brakedResolver sends the names the proxy and the model API resolve for the sandbox through
// the DNS filter's exfiltration brake, as the filter does the sandbox's own queries: a name
// allowed only through a wildcard is chosen by the sandbox, and asking an upstream for it
// carries its labels out whichever path asks. Names go upstream in canonical (lower) case.
type brakedResolver struct {
	next    egress.TTLResolver
	brake   *dnsfilter.Brake
	current func() *policy.Policy
}

// LookupTTL implements egress.TTLResolver.
func (b brakedResolver) LookupTTL(ctx context.Context, host string, v6 bool) ([]netip.Addr, time.Duration, error) {
	if err := b.brake.Admit(b.current(), host); err != nil {
		return nil, 0, fmt.Errorf("look up %s: %w", host, err)
	}
	return b.next.LookupTTL(ctx, strings.ToLower(host), v6)
}

// systemResolver is the system's resolver as an egress.TTLResolver: its TTLs are unknown (0).
type systemResolver struct{ r *net.Resolver }

func (s systemResolver) LookupTTL(ctx context.Context, host string, v6 bool) ([]netip.Addr, time.Duration, error) {
	network := "ip4"
	if v6 {
		network = "ip6"
	}
	addrs, err := s.r.LookupNetIP(ctx, network, host)
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound && v6 {
		// A name with IPv4 addresses only: no AAAA is an empty answer, not a failure.
		return nil, 0, nil
	}
	return addrs, 0, err
}
