package sandbox

import (
	"fmt"
	"net/netip"
)

// DefaultSubnet is the pool the sandboxes' /30 links come from when none is given.
const DefaultSubnet = "10.200.0.0/16"

// link is one sandbox's /30: the host end (.1, where the sidecar listens) and the sandbox end
// (.2).
type link struct {
	Prefix  netip.Prefix
	Host    netip.Addr
	Sandbox netip.Addr
}

// parseSubnet checks that s is an IPv4 prefix with room for at least one /30.
func parseSubnet(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("--subnet %q: %w", s, err)
	}
	if !p.Addr().Is4() || p.Bits() > 30 {
		return netip.Prefix{}, fmt.Errorf("--subnet %s: need an IPv4 prefix of /30 or wider", s)
	}
	return p.Masked(), nil
}

// slots is how many /30 links subnet holds.
func slots(subnet netip.Prefix) int {
	n := 30 - subnet.Bits()
	if n > 20 {
		n = 20 // a million sandboxes is plenty; keeps the arithmetic small
	}
	return 1 << n
}

// linkAt is the index-th /30 of subnet.
func linkAt(subnet netip.Prefix, index int) link {
	b := subnet.Addr().As4()
	base := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	base += uint32(index) * 4
	addr := func(v uint32) netip.Addr {
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	return link{Prefix: netip.PrefixFrom(addr(base), 30), Host: addr(base + 1), Sandbox: addr(base + 2)}
}

// allocate returns the lowest index of subnet that no existing sandbox uses and whose /30
// holds none of inUse (the addresses of this namespace's interfaces: another state
// directory's sandboxes, or anything else of the host's).
func allocate(subnet netip.Prefix, existing []*State, inUse []netip.Addr) (int, error) {
	used := map[int]bool{}
	for _, a := range inUse {
		if a.Is4() && subnet.Contains(a) {
			used[indexOf(subnet, a)] = true
		}
	}
	for _, s := range existing {
		if s.Network == NetworkNone {
			continue // a --network none sandbox holds no link
		}
		if s.Subnet == subnet.String() {
			used[s.Index] = true
		} else if p, err := netip.ParsePrefix(s.Subnet); err == nil && p.Overlaps(subnet) {
			// Another pool overlapping this one: keep clear of its links by address.
			if a, err := netip.ParseAddr(s.HostAddr); err == nil && subnet.Contains(a) {
				used[indexOf(subnet, a)] = true
			}
		}
	}
	for i := 0; i < slots(subnet); i++ {
		if !used[i] {
			return i, nil
		}
	}
	return 0, fmt.Errorf("subnet %s is full (%d sandboxes): delete some or give a wider --subnet", subnet, slots(subnet))
}

func indexOf(subnet netip.Prefix, a netip.Addr) int {
	s, x := subnet.Addr().As4(), a.As4()
	d := (uint32(x[0])<<24 | uint32(x[1])<<16 | uint32(x[2])<<8 | uint32(x[3])) -
		(uint32(s[0])<<24 | uint32(s[1])<<16 | uint32(s[2])<<8 | uint32(s[3]))
	return int(d / 4)
}
