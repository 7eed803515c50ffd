package policy

import (
	"net/netip"
	"testing"
)

func TestClassifyAddr(t *testing.T) {
	tests := []struct {
		addr string
		want AddrClass
	}{
		// IPv4
		{"127.0.0.1", AddrLoopback},
		{"127.255.255.254", AddrLoopback},
		{"10.0.0.1", AddrPrivate},
		{"172.16.0.1", AddrPrivate},
		{"172.31.255.255", AddrPrivate},
		{"172.32.0.1", AddrPublic},
		{"192.168.1.1", AddrPrivate},
		{"100.64.0.1", AddrCGNAT},
		{"100.127.255.255", AddrCGNAT},
		{"100.128.0.1", AddrPublic},
		{"169.254.169.254", AddrLinkLocal},
		{"0.0.0.0", AddrUnspecified},
		{"0.1.2.3", AddrUnspecified},
		{"224.0.0.1", AddrMulticast},
		{"239.255.255.250", AddrMulticast},
		{"255.255.255.255", AddrBroadcast},
		{"240.0.0.1", AddrReserved},
		{"255.255.255.254", AddrReserved},
		{"192.0.0.8", AddrReserved},
		{"192.0.2.1", AddrReserved},
		{"198.51.100.1", AddrReserved},
		{"203.0.113.1", AddrReserved},
		{"192.88.99.1", AddrReserved},
		{"198.18.0.1", AddrPublic},
		{"198.19.255.255", AddrPublic},
		{"8.8.8.8", AddrPublic},
		{"1.1.1.1", AddrPublic},
		// IPv6
		{"::1", AddrLoopback},
		{"::", AddrUnspecified},
		{"fe80::1", AddrLinkLocal},
		{"febf::1", AddrLinkLocal},
		{"fc00::1", AddrULA},
		{"fd12:3456::1", AddrULA},
		{"ff02::1", AddrMulticast},
		{"fec0::1", AddrReserved},
		{"100::1", AddrReserved},
		{"2001:10::1", AddrReserved},
		{"2001:20::1", AddrReserved},
		{"::2:0:0:1", AddrReserved},
		{"2001:db8::1", AddrPublic},
		{"2001:db8:ffff::1", AddrPublic},
		{"2606:4700::1111", AddrPublic},
		// IPv4-mapped: the class of the IPv4 address.
		{"::ffff:127.0.0.1", AddrLoopback},
		{"::ffff:10.1.2.3", AddrPrivate},
		{"::ffff:169.254.169.254", AddrLinkLocal},
		{"::ffff:198.18.0.1", AddrPublic},
		// SIIT ::ffff:0:a.b.c.d
		{"::ffff:0:127.0.0.1", AddrEmbedded},
		{"::ffff:0:8.8.8.8", AddrPublic},
		// IPv4-compatible ::a.b.c.d
		{"::127.0.0.1", AddrEmbedded},
		{"::10.0.0.1", AddrEmbedded},
		{"::0.0.0.2", AddrEmbedded},
		{"::8.8.8.8", AddrPublic},
		// NAT64 64:ff9b::/96
		{"64:ff9b::127.0.0.1", AddrEmbedded},
		{"64:ff9b::a9fe:a9fe", AddrEmbedded},
		{"64:ff9b::8.8.8.8", AddrPublic},
		{"64:ff9b:1::1", AddrReserved},
		// 6to4 2002::/16, IPv4 in bits 16-47
		{"2002:7f00:1::", AddrEmbedded},
		{"2002:a9fe:a9fe::1", AddrEmbedded},
		{"2002:c0a8:101::1", AddrEmbedded},
		{"2002:808:808::1", AddrPublic},
		// Teredo 2001::/32, client IPv4 inverted in the last 32 bits
		{"2001:0:4136:e378:8000:63bf:80ff:fffe", AddrEmbedded}, // client 127.0.0.1
		{"2001:0:4136:e378:8000:63bf:f5ff:fffe", AddrEmbedded}, // client 10.0.0.1
		{"2001:0:4136:e378:8000:63bf:f7f7:f7f7", AddrPublic},   // client 8.8.8.8
		// zone ignored
		{"fe80::1%eth0", AddrLinkLocal},
	}
	for _, tc := range tests {
		t.Run(tc.addr, func(t *testing.T) {
			a := netip.MustParseAddr(tc.addr)
			if got := ClassifyAddr(a); got != tc.want {
				t.Errorf("ClassifyAddr(%s) = %v, want %v", tc.addr, got, tc.want)
			}
		})
	}
	t.Run("invalid", func(t *testing.T) {
		if got := ClassifyAddr(netip.Addr{}); got != AddrReserved {
			t.Errorf("got %v, want %v", got, AddrReserved)
		}
	})
}

func TestAddrClassString(t *testing.T) {
	want := map[AddrClass]string{
		AddrPublic: "public", AddrLoopback: "loopback", AddrPrivate: "private", AddrCGNAT: "cgnat",
		AddrLinkLocal: "link-local", AddrULA: "ula", AddrUnspecified: "unspecified",
		AddrMulticast: "multicast", AddrBroadcast: "broadcast", AddrReserved: "reserved",
		AddrEmbedded: "embedded", AddrClass(99): "unknown",
	}
	for c, s := range want {
		t.Run(s, func(t *testing.T) {
			if got := c.String(); got != s {
				t.Errorf("got %q, want %q", got, s)
			}
		})
	}
}
