//go:build linux

package testnet

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"

	"github.com/miekg/dns"
)

// DNSZone is the zone the test DNS server is authoritative for.
const DNSZone = "test."

// DNSAddr is where the test DNS server listens, on UDP and TCP, in the upstream namespace.
var DNSAddr = netip.MustParseAddrPort("198.18.0.53:53")

// AnswerFunc decides the answer to the n-th query (counting from 0) of type qtype (dns.TypeA or
// dns.TypeAAAA) for one name: the addresses (IPv4 ones go in A answers, IPv6 ones, including
// IPv4-mapped forms, in AAAA answers) and their TTL in seconds.
type AnswerFunc func(qtype uint16, n int) (addrs []netip.Addr, ttl uint32)

// DNSServer is an authoritative server for "test." playing the outside resolver. Names it has
// no entry for get NXDOMAIN; names outside the zone get REFUSED. It counts queries per name.
type DNSServer struct {
	// Addr is the UDP and TCP address it serves.
	Addr netip.AddrPort

	// mu guards names, queries and byType.
	mu      sync.Mutex
	names   map[string]AnswerFunc // by lower-case FQDN
	queries map[string]int        // every query per FQDN, any type
	byType  map[dnsKey]int        // queries per FQDN and type, for AnswerFunc's n
}

type dnsKey struct {
	name  string
	qtype uint16
}

// StartDNSServer serves on addr (UDP and TCP) inside ns until t ends. ns must already hold
// addr's address.
func StartDNSServer(t testing.TB, ns *Netns, addr netip.AddrPort) *DNSServer {
	t.Helper()
	s := &DNSServer{
		Addr:    addr,
		names:   map[string]AnswerFunc{},
		queries: map[string]int{},
		byType:  map[dnsKey]int{},
	}
	pc, err := ns.ListenPacket("udp", addr.String())
	if err != nil {
		t.Fatalf("dns server: listen udp %s: %v", addr, err)
	}
	l, err := ns.Listen("tcp", addr.String())
	if err != nil {
		pc.Close()
		t.Fatalf("dns server: listen tcp %s: %v", addr, err)
	}
	// The sockets are bound already, so queries queue up until the servers read them; no need
	// to wait for the servers to start.
	udp := &dns.Server{PacketConn: pc, Handler: s}
	tcp := &dns.Server{Listener: l, Handler: s}
	var wg sync.WaitGroup
	for _, srv := range []*dns.Server{udp, tcp} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.ActivateAndServe(); err != nil && !errors.Is(err, net.ErrClosed) {
				t.Errorf("dns server: %v", err)
			}
		}()
		// Shutdown before the server has started is an error in miekg/dns.
		<-started
	}
	t.Cleanup(func() {
		for _, srv := range []*dns.Server{udp, tcp} {
			if err := srv.Shutdown(); err != nil {
				t.Errorf("dns server: shutdown: %v", err)
			}
		}
		wg.Wait()
	})
	return s
}

// Set makes name answer addrs with ttl on every query, replacing any earlier entry. No
// addresses means the name exists with no records (NOERROR, empty answer).
func (s *DNSServer) Set(name string, ttl uint32, addrs ...netip.Addr) {
	s.SetFunc(name, func(uint16, int) ([]netip.Addr, uint32) { return addrs, ttl })
}

// SetFunc makes f decide name's answers.
func (s *DNSServer) SetFunc(name string, f AnswerFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.names[dns.CanonicalName(name)] = f
}

// SetRebinding makes name a DNS-rebinding attacker: the first A query gets first, every later
// A query gets then, all with TTL 0. AAAA queries get an empty answer.
func (s *DNSServer) SetRebinding(name string, first, then netip.Addr) {
	s.SetFunc(name, func(qtype uint16, n int) ([]netip.Addr, uint32) {
		switch {
		case qtype != dns.TypeA:
			return nil, 0
		case n == 0:
			return []netip.Addr{first}, 0
		default:
			return []netip.Addr{then}, 0
		}
	})
}

// Queries returns how many queries (of any type) name has received.
func (s *DNSServer) Queries(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queries[dns.CanonicalName(name)]
}

// ServeDNS implements dns.Handler.
func (s *DNSServer) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	if len(req.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		_ = w.WriteMsg(m)
		return
	}
	q := req.Question[0]
	name := dns.CanonicalName(q.Name)
	if !dns.IsSubDomain(DNSZone, name) {
		m.Authoritative = false
		m.Rcode = dns.RcodeRefused
		_ = w.WriteMsg(m)
		return
	}

	s.mu.Lock()
	f, ok := s.names[name]
	s.queries[name]++
	k := dnsKey{name, q.Qtype}
	n := s.byType[k]
	s.byType[k]++
	s.mu.Unlock()

	if !ok {
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{soa()}
		_ = w.WriteMsg(m)
		return
	}
	if q.Qtype == dns.TypeA || q.Qtype == dns.TypeAAAA {
		addrs, ttl := f(q.Qtype, n)
		hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: ttl}
		for _, a := range addrs {
			switch {
			case a.Is4() && q.Qtype == dns.TypeA:
				hdr.Rrtype = dns.TypeA
				m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: net.IP(a.AsSlice())})
			case a.Is6() && q.Qtype == dns.TypeAAAA:
				hdr.Rrtype = dns.TypeAAAA
				b := a.As16()
				m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: net.IP(b[:])})
			}
		}
	}
	if len(m.Answer) == 0 {
		m.Ns = []dns.RR{soa()} // NODATA (RFC 2308 section 2.2)
	}
	_ = w.WriteMsg(m)
}

func soa() dns.RR {
	return &dns.SOA{
		Hdr:     dns.RR_Header{Name: DNSZone, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 0},
		Ns:      "ns." + DNSZone,
		Mbox:    "hostmaster." + DNSZone,
		Serial:  1,
		Refresh: 3600, Retry: 600, Expire: 86400, Minttl: 0,
	}
}
