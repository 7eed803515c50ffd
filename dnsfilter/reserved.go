package dnsfilter

import (
	"net"
	"net/netip"

	"github.com/miekg/dns"
)

// LLMName is the reserved name that resolves to the sidecar's LLM endpoint. The sandbox uses
// it (http://llm.airlock.internal:4000) instead of an address that depends on how the
// sidecar is deployed. It is answered by the filter itself, never forwarded, and needs no
// rule; its address is not put in the allow map, because the kernel programs allow the
// sidecar's own listeners by themselves.
const LLMName = "llm.airlock.internal."

// reservedTTL is the TTL of the reserved name's answers.
const reservedTTL = 60

// llmAnswer fills m, a reply to a query for LLMName of type qtype, from the LLM listener
// address llm and the address the query arrived on (local):
//
//   - llm invalid (the endpoint is off): NXDOMAIN;
//   - llm on a specific address, loopback included: that address. Loopback is right where the
//     sandbox shares the sidecar's network namespace (a pod); a sandbox in its own namespace
//     needs the sidecar to listen on an address it can reach (--llm-addr);
//   - llm on the unspecified address (0.0.0.0, ::): the address the query arrived on, which
//     the client demonstrably reaches and on which the LLM listener also listens; when that
//     is unspecified too, or of the other family, the answer is empty (NODATA).
//
// A query of the family the address is not gets NODATA; any other type gets NODATA.
func llmAnswer(m *dns.Msg, qtype uint16, llm netip.AddrPort, local net.Addr) {
	if !llm.IsValid() {
		m.Rcode = dns.RcodeNameError
		return
	}
	a := llm.Addr().Unmap()
	if a.IsUnspecified() {
		a = netip.Addr{}
		if ap, err := netip.ParseAddrPort(local.String()); err == nil && !ap.Addr().IsUnspecified() {
			a = ap.Addr().Unmap()
		}
	}
	hdr := dns.RR_Header{Name: m.Question[0].Name, Class: dns.ClassINET, Ttl: reservedTTL}
	switch {
	case !a.IsValid():
	case qtype == dns.TypeA && a.Is4():
		hdr.Rrtype = dns.TypeA
		m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: net.IP(a.AsSlice())})
	case qtype == dns.TypeAAAA && a.Is6():
		hdr.Rrtype = dns.TypeAAAA
		m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: net.IP(a.AsSlice())})
	}
}
