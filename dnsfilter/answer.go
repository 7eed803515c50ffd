package dnsfilter

import (
	"net/netip"
	"slices"
	"time"

	"github.com/miekg/dns"
)

// maxChain bounds the CNAME chain followed from the question name.
const maxChain = 16

// maxTTL caps the TTL the filter hands out and keeps in the allow map: an address stays
// reachable at most this long after one answer, whatever the upstream says, so a policy
// change or an eviction is never outrun by a week-long TTL.
const maxTTL = time.Hour

// answerAddr is one address of a cleaned answer with its TTL.
type answerAddr struct {
	addr netip.Addr // unmapped
	ttl  time.Duration
	aaaa bool // from an AAAA record (a v4-mapped AAAA unmaps to a v4 address)
}

// cleanAnswer rewrites an upstream answer in place into what the client may see, and returns
// the addresses it carries for qname.
//
// The CNAME decision: the addresses of an answer belong to the name that was asked and that
// the policy allowed, whatever CNAME chain led to them. A CNAME target need not be allowed
// itself: the upstream resolver (chosen by the operator, not the sandbox) followed the chain,
// so the sandbox learns nothing it could not learn by connecting, and it gets the target's
// addresses only under the allowed name — they are recorded for qname (Resolved(qname, addr)
// holds, Resolved(target, addr) does not), with qname's ports. Asking for the target directly
// is decided on its own. What the filter removes:
//   - answer records not on the chain from qname (an upstream cannot smuggle addresses of
//     unrelated names), and address records in answers to non-address questions;
//   - every additional record, and address and service-binding records in the authority
//     section: they hand out addresses the filter did not vet (the SOA of a negative answer
//     stays, for negative caching);
//   - the ipv4hint, ipv6hint and ech parameters of HTTPS and SVCB records (RFC 9460): hints
//     are addresses that never went through the allow map, and ECH would hide the real SNI
//     from the proxy; clients then resolve the target's A/AAAA through the filter.
//
// TTLs of the answer are raised to minTTL and capped at maxTTL.
func cleanAnswer(r *dns.Msg, qname string, qtype uint16, minTTL time.Duration) []answerAddr {
	// The chain is a few names at most: a slice on the stack, searched linearly, costs less
	// than a map on every answer.
	var names [maxChain + 1]string
	chain := onChain(append(names[:0], dns.CanonicalName(qname)))
	for range maxChain {
		grew := false
		for _, rr := range r.Answer {
			if c, ok := rr.(*dns.CNAME); ok && chain.has(dns.CanonicalName(c.Hdr.Name)) && !chain.has(dns.CanonicalName(c.Target)) {
				chain = append(chain, dns.CanonicalName(c.Target))
				grew = true
			}
		}
		if !grew {
			break
		}
	}
	isAddrQuery := qtype == dns.TypeA || qtype == dns.TypeAAAA
	var keep []dns.RR
	var addrs []answerAddr
	for _, rr := range r.Answer {
		h := rr.Header()
		if !chain.has(dns.CanonicalName(h.Name)) {
			continue
		}
		clampTTL(h, minTTL)
		switch v := rr.(type) {
		case *dns.A, *dns.AAAA:
			a, ok := rrAddr(v)
			if !isAddrQuery || !ok {
				continue // an address the question did not ask for, or no address at all
			}
			_, aaaa := v.(*dns.AAAA)
			addrs = append(addrs, answerAddr{addr: a, ttl: ttlOf(h), aaaa: aaaa})
		case *dns.HTTPS:
			v.Value = stripHints(v.Value)
		case *dns.SVCB:
			v.Value = stripHints(v.Value)
		}
		keep = append(keep, rr)
	}
	r.Answer = keep
	var ns []dns.RR
	for _, rr := range r.Ns {
		switch rr.(type) {
		case *dns.A, *dns.AAAA, *dns.HTTPS, *dns.SVCB:
			continue
		}
		clampTTL(rr.Header(), 0)
		ns = append(ns, rr)
	}
	r.Ns = ns
	r.Extra = nil
	return addrs
}

// onChain is the canonical names of a CNAME chain.
type onChain []string

// has reports whether name (canonical) is on the chain.
func (c onChain) has(name string) bool { return slices.Contains(c, name) }

// stripHints removes the address hints and ECH configuration from SVCB parameters.
func stripHints(kv []dns.SVCBKeyValue) []dns.SVCBKeyValue {
	out := kv[:0]
	for _, p := range kv {
		switch p.Key() {
		case dns.SVCB_IPV4HINT, dns.SVCB_IPV6HINT, dns.SVCB_ECHCONFIG:
			continue
		}
		out = append(out, p)
	}
	return out
}

// clampTTL raises h's TTL to minTTL and caps it at maxTTL.
func clampTTL(h *dns.RR_Header, minTTL time.Duration) {
	ttl := time.Duration(h.Ttl) * time.Second
	ttl = min(max(ttl, minTTL), maxTTL)
	h.Ttl = uint32(ttl / time.Second)
}

// ttlOf returns h's TTL as a duration.
func ttlOf(h *dns.RR_Header) time.Duration { return time.Duration(h.Ttl) * time.Second }
