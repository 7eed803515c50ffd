package dnsfilter

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/miekg/dns"
)

// AnswerSink receives the address answers the filter forwards (every address of the asked
// name, before the filter drops the ones the sandbox may not see), with their TTL after
// dns.minTTL: the sidecar passes the proxy's answer cache, so a name the sandbox just looked
// up needs no second query when it connects. The proxy checks every address it takes from
// there as it checks a fresh answer.
type AnswerSink interface {
	PutAnswer(name string, v6 bool, addrs []netip.Addr, ttl time.Duration)
}

// Lookup resolves names through upstream resolvers with the filter's exchanger and reports
// each answer's TTL; the sidecar's proxy resolver uses it (egress.TTLResolver). It asks
// exactly the upstreams it was built with, never the system's resolver.
type Lookup struct {
	x         *exchanger
	upstreams []netip.AddrPort
}

// NewLookup returns a Lookup asking upstreams in order, each exchange bounded by timeout
// (zero means DefaultTimeout). With no upstreams it reads the nameservers of resolvConf
// (empty means DefaultResolvConf). Errors: ErrNoUpstream when there is none at all.
func NewLookup(upstreams []netip.AddrPort, resolvConf string, timeout time.Duration) (*Lookup, error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if resolvConf == "" {
		resolvConf = DefaultResolvConf
	}
	if len(upstreams) == 0 {
		var err error
		if upstreams, err = resolvConfServers(resolvConf); err != nil || len(upstreams) == 0 {
			return nil, fmt.Errorf("look up upstream resolvers: %w (%v)", ErrNoUpstream, err)
		}
	}
	return &Lookup{x: newExchanger(Config{Timeout: timeout}), upstreams: upstreams}, nil
}

// LookupTTL asks for the A (or, with v6, AAAA) records of host and returns the addresses of
// the answer and its smallest TTL over the CNAME chain and the addresses. A name that does
// not exist, or a failed upstream, is an error; a name with no records of the family is an
// empty answer.
func (l *Lookup) LookupTTL(ctx context.Context, host string, v6 bool) ([]netip.Addr, time.Duration, error) {
	qtype := dns.TypeA
	if v6 {
		qtype = dns.TypeAAAA
	}
	q := new(dns.Msg)
	q.Id = queryID()
	q.RecursionDesired = true
	// Canonical case, as the filter forwards (upstreamQuery): the spelling is not a channel.
	q.Question = []dns.Question{{Name: dns.CanonicalName(host), Qtype: qtype, Qclass: dns.ClassINET}}
	q.SetEdns0(upstreamUDPSize, false)
	r, _, err := l.x.exchange(ctx, q, l.upstreams)
	if err != nil {
		return nil, 0, fmt.Errorf("look up %s: %w", host, err)
	}
	if r.Rcode != dns.RcodeSuccess {
		return nil, 0, fmt.Errorf("look up %s: %s", host, dns.RcodeToString[r.Rcode])
	}
	var addrs []netip.Addr
	ttl := time.Duration(-1)
	for _, aa := range cleanAnswer(r, host, qtype, 0) {
		if aa.aaaa == v6 { // by record type: a v4-mapped AAAA stays in the AAAA answer, unmapped

			addrs = append(addrs, aa.addr)
		}
	}
	for _, rr := range r.Answer {
		if t := ttlOf(rr.Header()); ttl < 0 || t < ttl {
			ttl = t
		}
	}
	if len(addrs) == 0 {
		ttl = negativeTTL(r)
	}
	return addrs, max(ttl, 0), nil
}

// negativeTTL is how long an answer without addresses may be cached (RFC 2308 §5): the
// smaller of the authority SOA's TTL and its MINIMUM field; 0 (not cached) without a SOA.
func negativeTTL(r *dns.Msg) time.Duration {
	for _, rr := range r.Ns {
		if soa, ok := rr.(*dns.SOA); ok {
			return time.Duration(min(soa.Hdr.Ttl, soa.Minttl)) * time.Second
		}
	}
	return 0
}

// Close releases the pooled sockets.
func (l *Lookup) Close() { l.x.close() }
