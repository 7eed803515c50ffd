package dnsfilter

import (
	"testing"
	"time"

	"github.com/miekg/dns"
)

// FuzzCleanAnswer feeds arbitrary upstream answers to cleanAnswer, the code that decides what
// an untrusted upstream message may hand the sandbox, and checks its promises: no additional
// records, no address hints or ECH left, every answer record on the question's CNAME chain,
// and the returned addresses exactly those of the A/AAAA records left.
func FuzzCleanAnswer(f *testing.F) {
	seed := func(m *dns.Msg) {
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint16(dns.TypeA))
	}
	q := question("alias.example", dns.TypeA)
	m := addrAnswer(q, 30, "198.18.0.1", "198.18.0.2")
	m.Answer = append(m.Answer, &dns.CNAME{Hdr: dns.RR_Header{Name: "alias.example.", Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: 5}, Target: "t.other."})
	m.Answer = append(m.Answer, addrRR("t.other.", dns.TypeA, 20, "198.18.0.3")...)
	m.Extra = append(m.Extra, addrRR("x.other.", dns.TypeA, 20, "198.18.0.4")...)
	seed(m)
	h := question("svc.example", dns.TypeHTTPS)
	hm := new(dns.Msg)
	hm.SetReply(h)
	hm.Answer = append(hm.Answer, &dns.HTTPS{SVCB: dns.SVCB{Hdr: dns.RR_Header{Name: "svc.example.", Rrtype: dns.TypeHTTPS, Class: dns.ClassINET, Ttl: 60},
		Priority: 1, Target: ".", Value: []dns.SVCBKeyValue{&dns.SVCBECHConfig{ECH: []byte{1}}, &dns.SVCBAlpn{Alpn: []string{"h2"}}}}})
	seed(hm)

	f.Fuzz(func(t *testing.T, raw []byte, qtype uint16) {
		r := new(dns.Msg)
		if r.Unpack(raw) != nil || len(r.Question) != 1 {
			return
		}
		qname := r.Question[0].Name
		addrs := cleanAnswer(r, qname, qtype, 5*time.Second)
		if len(r.Extra) != 0 {
			t.Fatalf("additional records left: %v", r.Extra)
		}
		chain := map[string]bool{dns.CanonicalName(qname): true}
		for _, rr := range r.Answer {
			if c, ok := rr.(*dns.CNAME); ok {
				chain[dns.CanonicalName(c.Target)] = true
			}
		}
		n := 0
		for _, rr := range r.Answer {
			if !chain[dns.CanonicalName(rr.Header().Name)] {
				t.Fatalf("record off the chain of %s left: %v", qname, rr)
			}
			if rr.Header().Ttl > uint32(maxTTL/time.Second) || rr.Header().Ttl < 5 {
				t.Fatalf("TTL %d outside [5, %d]", rr.Header().Ttl, maxTTL/time.Second)
			}
			var kv []dns.SVCBKeyValue
			switch v := rr.(type) {
			case *dns.A, *dns.AAAA:
				n++
			case *dns.HTTPS:
				kv = v.Value
			case *dns.SVCB:
				kv = v.Value
			}
			for _, p := range kv {
				if k := p.Key(); k == dns.SVCB_IPV4HINT || k == dns.SVCB_IPV6HINT || k == dns.SVCB_ECHCONFIG {
					t.Fatalf("SVCB parameter %s left", k)
				}
			}
		}
		if n != len(addrs) {
			t.Fatalf("%d address records left, %d addresses returned", n, len(addrs))
		}
	})
}
