package dnsfilter

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// upstreamUDPSize is the EDNS0 buffer size the filter advertises to upstreams and clients:
// 1232 bytes avoids IP fragmentation on every common path (DNS flag day 2020).
const upstreamUDPSize = 1232

// upstreamQuery builds the query sent upstream for a client's query: a fresh random ID (so an
// off-path attacker cannot guess it from the client's), the question in canonical (lower)
// case, RD set, and an EDNS0 OPT record of our own. The client's EDNS0 options (client
// subnet, cookies, padding, anything else) are never forwarded: they would carry data out of
// the sandbox on an allowed name. Nor is the case the sandbox chose: DNS names are
// case-insensitive (RFC 4343), so the brake counts every spelling of a name as one name, and
// the spelling of each of a name's up to 253 letters would otherwise be a bit the sandbox
// sends upstream for free (0x20 case randomisation, RFC draft-vixie-dnsext-dns0x20, is a
// resolver's own defence; the random ID and source port remain ours). restoreCase gives the
// client its own spelling back.
func upstreamQuery(req *dns.Msg) *dns.Msg {
	m := new(dns.Msg)
	m.Id = queryID()
	m.Opcode = dns.OpcodeQuery
	m.RecursionDesired = true
	m.CheckingDisabled = req.CheckingDisabled
	q := req.Question[0]
	q.Name = dns.CanonicalName(q.Name)
	m.Question = []dns.Question{q}
	m.SetEdns0(upstreamUDPSize, false)
	return m
}

// restoreCase gives the records of rrs owned by the asked name the spelling the client asked
// in (qname), as a resolver that randomises case (0x20) checks the answer's names against its
// question.
func restoreCase(rrs []dns.RR, qname string) {
	canon := dns.CanonicalName(qname)
	for _, rr := range rrs {
		if h := rr.Header(); dns.CanonicalName(h.Name) == canon {
			h.Name = qname
		}
	}
}

// exchanger talks to the upstream resolvers.
type exchanger struct {
	tcp     *dns.Client
	timeout time.Duration
	bufs    sync.Pool // *[]byte of udpBufSize, so no exchange allocates one

	// pools holds the idle connections of each upstream: netip.AddrPort → chan *pooledConn.
	// A sync.Map, as every query looks its upstream up and the set of upstreams rarely grows.
	pools sync.Map
}

// pooledConn is a connected UDP socket to one upstream, reused for up to maxConnUses
// queries, one at a time.
type pooledConn struct {
	net.Conn
	uses int
}

// Pooling: a new UDP socket per query costs a socket, a connect, a poller registration and a
// close, which is most of a forwarder's work (make bench). Sockets are kept per upstream,
// each carrying one query at a time (a late answer to an earlier, timed-out query is skipped
// by its ID), and retired after maxConnUses queries so the source ports keep changing (the
// random source port and the random ID are what stop off-path answer spoofing, RFC 5452).
const (
	maxPooledConns = 512
	maxConnUses    = 1024
)

// udpBufSize is the buffer a query is packed into and its answer read into: larger than any
// answer an upstream sends to our advertised EDNS0 size (upstreamUDPSize).
const udpBufSize = 4096

func newExchanger(cfg Config) *exchanger {
	return &exchanger{
		tcp:     &dns.Client{Net: "tcp", Timeout: cfg.Timeout},
		timeout: cfg.Timeout,
		bufs:    sync.Pool{New: func() any { b := make([]byte, udpBufSize); return &b }},
	}
}

// pool returns the idle connections of upstream s.
func (x *exchanger) pool(s netip.AddrPort) chan *pooledConn {
	if p, ok := x.pools.Load(s); ok {
		return p.(chan *pooledConn)
	}
	p, _ := x.pools.LoadOrStore(s, make(chan *pooledConn, maxPooledConns))
	return p.(chan *pooledConn)
}

// close closes every idle pooled connection.
func (x *exchanger) close() {
	for _, v := range x.pools.Range {
		p := v.(chan *pooledConn)
		for {
			select {
			case c := <-p:
				c.Close()
				continue
			default:
			}
			break
		}
	}
}

// exchange sends q to each server in turn until one answers; a truncated UDP answer is asked
// again over TCP of the same server (RFC 7766 §5). It returns ErrNoUpstream when servers is
// empty, and an error wrapping ErrUpstream when none answers (the first server's error is
// kept as the cause).
func (x *exchanger) exchange(ctx context.Context, q *dns.Msg, servers []netip.AddrPort) (*dns.Msg, netip.AddrPort, error) {
	if len(servers) == 0 {
		return nil, netip.AddrPort{}, ErrNoUpstream
	}
	var firstErr error
	for _, s := range servers {
		r, err := x.one(ctx, q, s)
		if err == nil {
			return r, s, nil
		}
		if firstErr == nil {
			firstErr = fmt.Errorf("%s: %w", s, err)
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, netip.AddrPort{}, fmt.Errorf("%w: %w", ErrUpstream, firstErr)
}

// one asks one server, over UDP first and then TCP when the UDP answer is truncated.
func (x *exchanger) one(ctx context.Context, q *dns.Msg, s netip.AddrPort) (*dns.Msg, error) {
	r, err := x.udpExchange(ctx, q, s)
	if err == nil && r.Truncated {
		r, _, err = x.tcp.ExchangeContext(ctx, q, s.String())
		if err == nil && r.Truncated {
			err = errors.New("truncated answer over TCP")
		}
	}
	if err != nil {
		return nil, err
	}
	if len(r.Question) != 1 || !equalQuestion(r.Question[0], q.Question[0]) {
		return nil, errors.New("answer is for another question")
	}
	return r, nil
}

// udpExchange asks s over a pooled UDP socket.
func (x *exchanger) udpExchange(ctx context.Context, q *dns.Msg, s netip.AddrPort) (*dns.Msg, error) {
	p := x.pool(s)
	var c *pooledConn
	select {
	case c = <-p:
	default:
		d := net.Dialer{Timeout: x.timeout}
		nc, err := d.DialContext(ctx, "udp", s.String())
		if err != nil {
			return nil, err
		}
		c = &pooledConn{Conn: nc}
	}
	r, err := x.roundTrip(c, q)
	c.uses++
	if err != nil || c.uses >= maxConnUses {
		c.Close()
		return r, err
	}
	select {
	case p <- c:
	default:
		c.Close()
	}
	return r, nil
}

// roundTrip writes q on c and reads until the answer with q's ID arrives (a late answer to an
// earlier query on the same socket is skipped) or the timeout passes.
func (x *exchanger) roundTrip(c net.Conn, q *dns.Msg) (*dns.Msg, error) {
	bp := x.bufs.Get().(*[]byte)
	defer x.bufs.Put(bp)
	buf := *bp
	out, err := q.PackBuffer(buf)
	if err != nil {
		return nil, fmt.Errorf("pack query: %w", err)
	}
	if err := c.SetDeadline(time.Now().Add(x.timeout)); err != nil {
		return nil, err
	}
	if _, err := c.Write(out); err != nil {
		return nil, err
	}
	for {
		n, err := c.Read(buf)
		if err != nil {
			return nil, err
		}
		if n < 12 || binary.BigEndian.Uint16(buf) != q.Id {
			continue
		}
		r := new(dns.Msg)
		if err := r.Unpack(buf[:n]); err != nil {
			return nil, fmt.Errorf("unpack answer: %w", err)
		}
		if !r.Response {
			continue
		}
		return r, nil
	}
}

// equalQuestion compares two questions, the name case-insensitively.
func equalQuestion(a, b dns.Question) bool {
	return a.Qtype == b.Qtype && a.Qclass == b.Qclass &&
		(a.Name == b.Name || dns.CanonicalName(a.Name) == dns.CanonicalName(b.Name))
}

// resolvConfServers reads the nameservers of a resolv.conf, as ip:port.
func resolvConfServers(path string) ([]netip.AddrPort, error) {
	cc, err := dns.ClientConfigFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	port, err := strconv.Atoi(cc.Port)
	if err != nil || port < 1 || port > 65535 {
		port = 53
	}
	var out []netip.AddrPort
	for _, s := range cc.Servers {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			continue
		}
		out = append(out, netip.AddrPortFrom(a, uint16(port)))
	}
	return out, nil
}
