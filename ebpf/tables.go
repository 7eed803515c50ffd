package ebpf

// The contents of the small configuration maps (listeners, cidrs, config, tports), built
// from a Config and written so that no moment is more permissive than either the old or the
// new contents allow together: new entries go in first, stale ones are removed after.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/cilium/ebpf"
)

// The config map's flags (bpf/airlock.h).
const (
	cfgTransparent  = 1
	cfgTransparent6 = 2
	cfgReport       = 4
	cfgLoopback     = 8
	cfgIdentities   = 16
	cfgIdentityTCP  = 32
)

// cidrPorts is CIDR_PORTS of bpf/airlock.h: the most ports one range can carry.
const cidrPorts = 32

// addr16 is the 16-byte form the programs use: IPv4 as ::ffff:a.b.c.d, zone dropped.
func addr16(a netip.Addr) [16]byte { return a.As16() }

// compileCIDRs turns the rules into LPM entries. A longest-prefix match returns only the
// most specific range, so each entry carries the ports of every rule whose range contains
// it. Errors wrap ErrInvalidConfig.
func compileCIDRs(rules []CIDRRule) (map[airlockCidrKey]airlockCidrVal, error) {
	type portFlag struct {
		port uint16
		raw  bool
	}
	prefixes := map[netip.Prefix][]portFlag{}
	for _, r := range rules {
		if !r.Prefix.IsValid() || len(r.Ports) == 0 {
			return nil, invalidf("CIDR rule %v: want a valid prefix and at least one port", r.Prefix)
		}
		p := r.Prefix.Masked()
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		for _, port := range r.Ports {
			prefixes[p] = append(prefixes[p], portFlag{port, r.Raw})
		}
	}
	out := map[airlockCidrKey]airlockCidrVal{}
	for p := range prefixes {
		var val airlockCidrVal
		for q, pfs := range prefixes {
			if q.Addr().Is4() != p.Addr().Is4() || q.Bits() > p.Bits() || !q.Contains(p.Addr()) {
				continue
			}
			for _, pf := range pfs {
				i := slices.Index(val.Ports[:val.N], pf.port)
				if i < 0 {
					if val.N == cidrPorts {
						return nil, invalidf("CIDR %v: more than %d distinct ports apply to it", p, cidrPorts)
					}
					i = int(val.N)
					val.Ports[i] = pf.port
					val.N++
				}
				if pf.raw {
					val.Raw[i] = 1
				}
			}
		}
		bits := p.Bits()
		if p.Addr().Is4() {
			bits += 96
		}
		out[airlockCidrKey{Prefixlen: uint32(bits), Addr: addr16(p.Addr())}] = val
	}
	return out, nil
}

// listenerEntries expands the listeners into map keys.
func listenerEntries(ls []Listener) (map[airlockListenerKey]uint8, error) {
	out := map[airlockListenerKey]uint8{}
	for _, l := range ls {
		addrs := []netip.Addr{l.Addr.Addr()}
		if l.Addr.Addr().IsUnspecified() {
			var err error
			if addrs, err = localAddrs(l.Addr.Addr().Is6()); err != nil {
				return nil, err
			}
		}
		for _, a := range addrs {
			out[airlockListenerKey{Addr: addr16(a), Port: l.Addr.Port(), Proto: uint8(l.Proto)}] = uint8(l.Kind)
		}
	}
	return out, nil
}

// localAddrs lists loopback and interface addresses: IPv4 ones, and IPv6 ones too when v6.
func localAddrs(v6 bool) ([]netip.Addr, error) {
	ifas, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("list interface addresses: %w", err)
	}
	out := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	if v6 {
		out = append(out, netip.IPv6Loopback())
	}
	for _, ifa := range ifas {
		ipn, ok := ifa.(*net.IPNet)
		if !ok {
			continue
		}
		a, ok := netip.AddrFromSlice(ipn.IP)
		if !ok {
			continue
		}
		if a = a.Unmap(); a.Is4() || v6 {
			out = append(out, a)
		}
	}
	return out, nil
}

// settings builds the config map's value.
func settings(cfg *Config) airlockSettings {
	var s airlockSettings
	if cfg.Report {
		s.Flags |= cfgReport
	}
	if cfg.OwnLoopback {
		s.Flags |= cfgLoopback
	}
	if cfg.Identities {
		s.Flags |= cfgIdentities
	}
	if cfg.IdentityTCP != nil {
		s.Flags |= cfgIdentityTCP
	}
	s.OpenCgid = cfg.cgid
	t := cfg.Transparent
	if t == nil {
		return s
	}
	s.Flags |= cfgTransparent
	a4 := t.Addr4.Addr().Unmap().As4()
	s.T4Addr = binary.NativeEndian.Uint32(a4[:])
	s.T4Port = htons(t.Addr4.Port())
	if t.Addr6.IsValid() {
		s.Flags |= cfgTransparent6
		a6 := t.Addr6.Addr().As16()
		for i := range s.T6Addr {
			s.T6Addr[i] = binary.NativeEndian.Uint32(a6[4*i:])
		}
		s.T6Port = htons(t.Addr6.Port())
	}
	return s
}

// htons returns p in network byte order, as a native integer (how ctx->user_port holds it).
func htons(p uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], p)
	return binary.NativeEndian.Uint16(b[:])
}

// syncMap makes m hold exactly want: it writes every wanted entry, then deletes the rest.
func syncMap[K comparable, V any](m *ebpf.Map, want map[K]V) error {
	for k, v := range want {
		if err := m.Put(k, v); err != nil {
			return fmt.Errorf("update map %s: %w", m.String(), err)
		}
	}
	var (
		k     K
		v     V
		stale []K
	)
	it := m.Iterate()
	for it.Next(&k, &v) {
		if _, ok := want[k]; !ok {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("iterate map %s: %w", m.String(), err)
	}
	for _, k := range stale {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete from map %s: %w", m.String(), err)
		}
	}
	return nil
}

// writeTables writes the configuration maps of objs from cfg and the exemption. The exempt
// map goes first: before a link on a pod's cgroup exists, the sidecar's own cgroup is
// already exempt. The config map's flag goes last: the programs consult the redirected
// ports only once it is set.
func writeTables(objs *objects, cfg Config, exempt airlockExemption) error {
	if err := objs.Exempt.Put(uint32(0), exempt); err != nil {
		return fmt.Errorf("update exempt map: %w", err)
	}
	ls, err := listenerEntries(cfg.Listeners)
	if err != nil {
		return err
	}
	if err := syncMap(objs.Listeners, ls); err != nil {
		return err
	}
	cidrs, err := compileCIDRs(cfg.CIDRs)
	if err != nil {
		return err
	}
	if err := syncMap(objs.Cidrs, cidrs); err != nil {
		return err
	}
	tports := map[uint16]uint8{}
	if cfg.Transparent != nil {
		for _, p := range cfg.Transparent.Ports {
			tports[p] = 1
		}
	}
	if err := syncMap(objs.Tports, tports); err != nil {
		return err
	}
	if err := objs.Config.Put(uint32(0), settings(&cfg)); err != nil {
		return fmt.Errorf("update config map: %w", err)
	}
	return nil
}
