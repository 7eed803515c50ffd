package egress

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/airlock-dev/airlock/policy"
)

// NoProxy lists the destinations dialled directly rather than through the upstream proxy:
// host patterns written as the policy writes them ("api.example.com" exactly;
// "*.example.com" any subdomain, not the apex) and address ranges ("10.0.0.0/8", or one
// address). The zero value exempts nothing. Build it with ParseNoProxy.
type NoProxy struct {
	exact    []string       // normalised names and IP literals
	suffixes []string       // ".example.com" for "*.example.com"
	prefixes []netip.Prefix // masked ranges
}

// ParseNoProxy parses entries (empty entries are skipped). Errors wrap ErrInvalidConfig
// and name the entry.
func ParseNoProxy(entries []string) (NoProxy, error) {
	var n NoProxy
	for _, e := range entries {
		e = strings.TrimSpace(e)
		switch {
		case e == "":
			continue
		case strings.Contains(e, "/"):
			p, err := netip.ParsePrefix(e)
			if err != nil {
				return NoProxy{}, fmt.Errorf("upstream no-proxy entry %q: not a CIDR range (use 10.0.0.0/8): %w", e, ErrInvalidConfig)
			}
			if p.Addr().Is4In6() && p.Bits() >= 96 { // ::ffff:10.0.0.0/104 is 10.0.0.0/8
				p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
			}
			n.prefixes = append(n.prefixes, p.Masked())
		case strings.HasPrefix(e, "*."):
			h, err := policy.NormalizeHost(e[2:])
			if err != nil || h.IsIP() {
				return NoProxy{}, fmt.Errorf("upstream no-proxy entry %q: not a host pattern (use *.example.com): %w", e, ErrInvalidConfig)
			}
			n.suffixes = append(n.suffixes, "."+h.Name)
		default:
			h, err := policy.NormalizeHost(e)
			if err != nil || strings.Contains(e, "*") {
				return NoProxy{}, fmt.Errorf("upstream no-proxy entry %q: not a host name, address or range (a wildcard is *.example.com): %w", e, ErrInvalidConfig)
			}
			if h.IsIP() {
				a := h.Addr.Unmap()
				n.prefixes = append(n.prefixes, netip.PrefixFrom(a, a.BitLen()))
				continue
			}
			n.exact = append(n.exact, h.Name)
		}
	}
	return n, nil
}

// Empty reports whether n exempts nothing.
func (n NoProxy) Empty() bool {
	return len(n.exact) == 0 && len(n.suffixes) == 0 && len(n.prefixes) == 0
}

// Match reports whether a destination is exempt: host (a name, or an IP literal in any
// spelling policy.NormalizeHost accepts) matches a pattern or range, or addr (the checked
// address; the zero Addr when there is none) is in a range.
func (n NoProxy) Match(host string, addr netip.Addr) bool {
	if h, err := policy.NormalizeHost(host); err == nil {
		if h.IsIP() && n.inRange(h.Addr) {
			return true
		}
		if !h.IsIP() && (slices.Contains(n.exact, h.Name) ||
			slices.ContainsFunc(n.suffixes, func(s string) bool { return strings.HasSuffix(h.Name, s) })) {
			return true
		}
	}
	return addr.IsValid() && n.inRange(addr)
}

func (n NoProxy) inRange(a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	return slices.ContainsFunc(n.prefixes, func(p netip.Prefix) bool { return p.Contains(a) })
}
