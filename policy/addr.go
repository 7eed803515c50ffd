package policy

import (
	"net/netip"
)

// This file is the one address classifier of the SSRF guard (STYLE.md rule 6): the proxy, the
// DNS filter and the kernel allow map all ask it, so they cannot disagree about what is
// internal.

// classRange maps a prefix to a class. Ranges are checked in order; the first match wins.
type classRange struct {
	prefix netip.Prefix
	class  AddrClass
}

// ipv4Ranges are the IPv4 special-purpose ranges (IANA IPv4 Special-Purpose Address
// Registry, RFC 6890) that are never a public destination. 198.18.0.0/15 (benchmarking,
// RFC 2544) is deliberately absent: airlock's tests use it for upstream hosts. Read-only.
var ipv4Ranges = []classRange{
	{netip.MustParsePrefix("0.0.0.0/8"), AddrUnspecified},        // "this network", RFC 791
	{netip.MustParsePrefix("10.0.0.0/8"), AddrPrivate},           // RFC 1918
	{netip.MustParsePrefix("100.64.0.0/10"), AddrCGNAT},          // RFC 6598
	{netip.MustParsePrefix("127.0.0.0/8"), AddrLoopback},         // RFC 1122
	{netip.MustParsePrefix("169.254.0.0/16"), AddrLinkLocal},     // RFC 3927; cloud metadata
	{netip.MustParsePrefix("172.16.0.0/12"), AddrPrivate},        // RFC 1918
	{netip.MustParsePrefix("192.0.0.0/24"), AddrReserved},        // IETF protocol assignments, RFC 6890
	{netip.MustParsePrefix("192.0.2.0/24"), AddrReserved},        // TEST-NET-1, RFC 5737
	{netip.MustParsePrefix("192.88.99.0/24"), AddrReserved},      // 6to4 relay anycast, deprecated by RFC 7526
	{netip.MustParsePrefix("192.168.0.0/16"), AddrPrivate},       // RFC 1918
	{netip.MustParsePrefix("198.51.100.0/24"), AddrReserved},     // TEST-NET-2, RFC 5737
	{netip.MustParsePrefix("203.0.113.0/24"), AddrReserved},      // TEST-NET-3, RFC 5737
	{netip.MustParsePrefix("224.0.0.0/4"), AddrMulticast},        // RFC 5771
	{netip.MustParsePrefix("255.255.255.255/32"), AddrBroadcast}, // RFC 919
	{netip.MustParsePrefix("240.0.0.0/4"), AddrReserved},         // RFC 1112, future use
}

// ipv6Ranges are the IPv6 ranges that are never a public destination and carry no IPv4
// address. 2001:db8::/32 (documentation, RFC 3849) is deliberately absent: airlock's tests use
// it for upstream hosts. Read-only.
var ipv6Ranges = []classRange{
	{netip.MustParsePrefix("::/128"), AddrUnspecified},
	{netip.MustParsePrefix("::1/128"), AddrLoopback},
	{netip.MustParsePrefix("100::/64"), AddrReserved},       // discard-only, RFC 6666
	{netip.MustParsePrefix("2001:10::/28"), AddrReserved},   // ORCHID, RFC 4843
	{netip.MustParsePrefix("2001:20::/28"), AddrReserved},   // ORCHIDv2, RFC 7343
	{netip.MustParsePrefix("64:ff9b:1::/48"), AddrReserved}, // local-use NAT64, RFC 8215: the embedding is site-defined
	{netip.MustParsePrefix("fc00::/7"), AddrULA},            // RFC 4193
	{netip.MustParsePrefix("fe80::/10"), AddrLinkLocal},     // RFC 4291
	{netip.MustParsePrefix("fec0::/10"), AddrReserved},      // site-local, deprecated by RFC 3879
	{netip.MustParsePrefix("ff00::/8"), AddrMulticast},      // RFC 4291
	{netip.MustParsePrefix("::/8"), AddrReserved},           // reserved by IETF, RFC 4291 (after the embedded forms)
}

// ClassifyAddr classifies addr for the SSRF guard (IPv4-mapped and embedded forms by the
// IPv4 address they carry).
//
// An IPv4-mapped address (::ffff:a.b.c.d) gets the class of its IPv4 address. Other IPv6
// forms that embed an IPv4 address (SIIT ::ffff:0:a.b.c.d, IPv4-compatible ::a.b.c.d, NAT64
// 64:ff9b::/96, 6to4 2002::/16, Teredo 2001::/32) are AddrEmbedded when the IPv4 address is
// not public, else AddrPublic: a packet to them can reach that IPv4 address through a
// translator or tunnel. A zone is ignored. The invalid Addr is AddrReserved.
func ClassifyAddr(a netip.Addr) AddrClass {
	if !a.IsValid() {
		return AddrReserved
	}
	a = a.WithZone("")
	if a.Is4() {
		return classify4(a)
	}
	if a.Is4In6() {
		return classify4(a.Unmap())
	}
	if v4, ok := embeddedIPv4(a); ok {
		if classify4(v4) != AddrPublic {
			return AddrEmbedded
		}
		return AddrPublic
	}
	for _, r := range ipv6Ranges {
		if r.prefix.Contains(a) {
			return r.class
		}
	}
	return AddrPublic
}

// classify4 classifies an IPv4 address.
func classify4(a netip.Addr) AddrClass {
	for _, r := range ipv4Ranges {
		if r.prefix.Contains(a) {
			return r.class
		}
	}
	return AddrPublic
}

var (
	siitPrefix   = netip.MustParsePrefix("::ffff:0:0:0/96") // RFC 2765 §2.1
	compatPrefix = netip.MustParsePrefix("::/96")           // IPv4-compatible, deprecated by RFC 4291 §2.5.5.1
	nat64Prefix  = netip.MustParsePrefix("64:ff9b::/96")    // RFC 6052
	sixToFour    = netip.MustParsePrefix("2002::/16")       // RFC 3056
	teredoPrefix = netip.MustParsePrefix("2001::/32")       // RFC 4380
)

// embeddedIPv4 extracts the IPv4 address an IPv6 address carries in one of the embedding
// forms, for classification.
func embeddedIPv4(a netip.Addr) (netip.Addr, bool) {
	b := a.As16()
	last := [4]byte{b[12], b[13], b[14], b[15]}
	switch {
	case siitPrefix.Contains(a), nat64Prefix.Contains(a):
		return netip.AddrFrom4(last), true
	case compatPrefix.Contains(a):
		if a == netip.IPv6Unspecified() || a == netip.IPv6Loopback() {
			return netip.Addr{}, false // :: and ::1 are not embeddings
		}
		return netip.AddrFrom4(last), true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), true // bits 16-47
	case teredoPrefix.Contains(a):
		// The client's IPv4 address is stored inverted in the last 32 bits (RFC 4380 §4).
		return netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}), true
	}
	return netip.Addr{}, false
}

// String names the class ("public", "loopback", ...).
func (c AddrClass) String() string {
	switch c {
	case AddrPublic:
		return "public"
	case AddrLoopback:
		return "loopback"
	case AddrPrivate:
		return "private"
	case AddrCGNAT:
		return "cgnat"
	case AddrLinkLocal:
		return "link-local"
	case AddrULA:
		return "ula"
	case AddrUnspecified:
		return "unspecified"
	case AddrMulticast:
		return "multicast"
	case AddrBroadcast:
		return "broadcast"
	case AddrReserved:
		return "reserved"
	case AddrEmbedded:
		return "embedded"
	}
	return "unknown"
}
