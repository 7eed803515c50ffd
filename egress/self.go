package egress

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
)

// SelfAddrs is the list of the sidecar's own listening addresses, which no guard ever dials
// (no request may loop back into the sidecar: its proxy, DNS filter, model API or admin
// endpoint). The wiring builds one and every listener registers into it once; it is safe for
// concurrent use. A listener on an unspecified address (0.0.0.0, ::) stands for every local
// address with its port.
type SelfAddrs struct {
	// interfaceAddrs lists the machine's interface addresses (for wildcard listeners).
	interfaceAddrs func() ([]netip.Addr, error)

	// mu guards addrs.
	mu    sync.Mutex
	addrs []netip.AddrPort // unmapped, without zone
}

// NewSelfAddrs returns an empty list. interfaceAddrs lists the machine's interface addresses,
// which a wildcard listener is reached through; nil means the machine's (net.InterfaceAddrs).
// Tests pass a fixed list.
func NewSelfAddrs(interfaceAddrs func() ([]netip.Addr, error)) *SelfAddrs {
	if interfaceAddrs == nil {
		interfaceAddrs = InterfaceAddrs
	}
	return &SelfAddrs{interfaceAddrs: interfaceAddrs}
}

// Add records one of the sidecar's listening addresses. An IPv4-mapped address is recorded
// as the IPv4 address; an invalid one is ignored.
func (s *SelfAddrs) Add(ap netip.AddrPort) {
	if !ap.IsValid() {
		return
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port())
	s.mu.Lock()
	defer s.mu.Unlock()
	if !slices.Contains(s.addrs, ap) {
		s.addrs = append(s.addrs, ap)
	}
}

// AddListener records l's address when it is a TCP address (nil l is ignored).
func (s *SelfAddrs) AddListener(l net.Listener) {
	if l == nil {
		return
	}
	if ta, ok := l.Addr().(*net.TCPAddr); ok {
		s.Add(ta.AddrPort())
	}
}

// List returns the recorded addresses.
func (s *SelfAddrs) List() []netip.AddrPort {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.addrs)
}

// Contains reports whether a connection to ap reaches one of the recorded listeners, in any
// form: IPv4, IPv6 or IPv4-mapped; through any local address (loopback included) for a
// wildcard listener; and any unspecified destination with a listener's port (on Linux,
// connecting to 0.0.0.0 or :: reaches the local host). When the interface addresses cannot
// be listed, every destination on a wildcard listener's port is treated as self (fail
// closed).
func (s *SelfAddrs) Contains(ap netip.AddrPort) bool {
	a := ap.Addr().Unmap().WithZone("")
	var local []netip.Addr
	var localErr error
	loaded := false
	for _, l := range s.List() {
		switch {
		case l.Port() != ap.Port():
			continue
		case l.Addr() == a || a.IsUnspecified():
			return true
		case !l.Addr().IsUnspecified():
			continue
		case a.IsLoopback():
			return true
		}
		if !loaded {
			local, localErr = s.interfaceAddrs()
			loaded = true
		}
		if localErr != nil || slices.Contains(local, a) {
			return true
		}
	}
	return false
}

// InterfaceAddrs lists the addresses of the machine's interfaces, unmapped and without zone.
func InterfaceAddrs() ([]netip.Addr, error) {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("list interface addresses: %w", err)
	}
	out := make([]netip.Addr, 0, len(as))
	for _, a := range as {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap().WithZone(""))
		}
	}
	return out, nil
}
