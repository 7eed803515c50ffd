package sidecar

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/airlock-dev/airlock/dnsfilter"
)

// sockets opens the listeners whose addresses the later components need before they start:
// the explicit proxy, the admin endpoints and the DNS filter's UDP and TCP sockets (the
// kernel programs allow them; the proxy never dials them).
type sockets struct {
	s *Sidecar

	proxy net.Listener
	admin net.Listener   // nil with --admin-addr off
	dnsPC net.PacketConn // nil with --dns-addr off
	dnsLn net.Listener   // nil with --dns-addr off
}

func (k *sockets) name() string { return "listeners" }

func (k *sockets) start(context.Context) error {
	cfg := &k.s.cfg
	var err error
	if k.proxy, err = net.Listen("tcp", cfg.ProxyAddr); err != nil {
		return fmt.Errorf("--proxy-addr: %v", err)
	}
	if cfg.AdminAddr != Off {
		if k.admin, err = net.Listen("tcp", cfg.AdminAddr); err != nil {
			return fmt.Errorf("--admin-addr: %v", err)
		}
	}
	if cfg.DNSAddr != Off {
		if k.dnsPC, k.dnsLn, err = dnsfilter.Listen(cfg.DNSAddr); err != nil {
			return fmt.Errorf("--dns-addr: %v", err)
		}
	}
	for _, l := range []net.Listener{k.proxy, k.admin, k.dnsLn} {
		k.s.self.AddListener(l)
	}
	return nil
}

// close closes every socket: the servers that took them over have closed them already,
// unless a later start failed first; closing again is harmless.
func (k *sockets) close(context.Context) error {
	for _, c := range []interface{ Close() error }{k.proxy, k.admin, k.dnsPC, k.dnsLn} {
		if c != nil { // a nil listener converts to a nil interface
			_ = c.Close()
		}
	}
	return nil
}

// Addrs are the addresses a started sidecar listens on; an invalid address means that
// listener is off.
type Addrs struct {
	Proxy, Transparent, DNS, LLM, Admin netip.AddrPort
}

// Addrs returns the listeners' addresses (with the ports the kernel chose for ":0").
// Valid once Start returned.
func (s *Sidecar) Addrs() Addrs {
	return Addrs{
		Proxy:       addrOf(s.sockets.proxy),
		Transparent: addrOf(s.kernel.transparentLn),
		DNS:         addrOf(s.sockets.dnsLn),
		LLM:         addrOf(s.llm.ln),
		Admin:       addrOf(s.sockets.admin),
	}
}

// addrOf is a listener's address, or the zero AddrPort for nil.
func addrOf(l net.Listener) netip.AddrPort {
	if l == nil {
		return netip.AddrPort{}
	}
	if ta, ok := l.Addr().(*net.TCPAddr); ok {
		return ta.AddrPort()
	}
	ap, _ := netip.ParseAddrPort(l.Addr().String())
	return ap
}
