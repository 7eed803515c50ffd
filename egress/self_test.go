package egress

import (
	"errors"
	"net"
	"net/netip"
	"testing"
)

func TestSelfAddrsContains(t *testing.T) {
	s := NewSelfAddrs(func() ([]netip.Addr, error) { return addrs("198.18.0.5", "2001:db8::5"), nil })
	for _, ap := range []string{"127.0.0.1:4000", "[::1]:4001", "0.0.0.0:3128", "[::]:3129", "[::ffff:127.0.0.1]:4002", "[fe80::1%eth0]:4003"} {
		s.Add(netip.MustParseAddrPort(ap))
	}
	tests := []struct {
		name string
		ap   string
		want bool
	}{
		{name: "IPv4 listener", ap: "127.0.0.1:4000", want: true},
		{name: "IPv4 listener, mapped destination", ap: "[::ffff:127.0.0.1]:4000", want: true},
		{name: "IPv6 listener", ap: "[::1]:4001", want: true},
		{name: "mapped listener, IPv4 destination", ap: "127.0.0.1:4002", want: true},
		{name: "zoned listener, destination without zone", ap: "[fe80::1]:4003", want: true},
		{name: "IPv4 wildcard, interface address", ap: "198.18.0.5:3128", want: true},
		{name: "IPv4 wildcard, mapped interface address", ap: "[::ffff:198.18.0.5]:3128", want: true},
		{name: "IPv4 wildcard, IPv6 interface address", ap: "[2001:db8::5]:3128", want: true},
		{name: "IPv4 wildcard, loopback", ap: "127.0.0.9:3128", want: true},
		{name: "IPv6 wildcard, IPv4 interface address", ap: "198.18.0.5:3129", want: true},
		{name: "IPv6 wildcard, IPv6 loopback", ap: "[::1]:3129", want: true},
		{name: "unspecified destination, listener port", ap: "0.0.0.0:4000", want: true},
		{name: "IPv6 unspecified destination, listener port", ap: "[::]:4001", want: true},
		{name: "other loopback, exact listener's port", ap: "127.0.0.2:4000", want: false},
		{name: "remote address, wildcard port", ap: "198.18.0.1:3128", want: false},
		{name: "interface address, other port", ap: "198.18.0.5:80", want: false},
		{name: "IPv6 listener address, other port", ap: "[::1]:4000", want: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := s.Contains(netip.MustParseAddrPort(tc.ap)); got != tc.want {
				t.Errorf("Contains(%s) = %v, want %v", tc.ap, got, tc.want)
			}
		})
	}
}

func TestSelfAddrsFailClosed(t *testing.T) {
	s := NewSelfAddrs(func() ([]netip.Addr, error) { return nil, errors.New("no netlink") })
	s.Add(netip.MustParseAddrPort("0.0.0.0:3128"))
	if !s.Contains(netip.MustParseAddrPort("198.18.0.1:3128")) {
		t.Errorf("unknown interfaces: got false, want true (fail closed)")
	}
	if s.Contains(netip.MustParseAddrPort("198.18.0.1:80")) {
		t.Errorf("other port: got true, want false")
	}
}

func TestSelfAddrsAddListener(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s := NewSelfAddrs(nil)
	s.AddListener(l)
	s.AddListener(l) // registering twice keeps one entry
	s.AddListener(nil)
	ap := l.Addr().(*net.TCPAddr).AddrPort()
	if got := s.List(); len(got) != 1 || got[0] != ap {
		t.Errorf("List() = %v, want [%s]", got, ap)
	}
	mapped := netip.AddrPortFrom(netip.AddrFrom16(ap.Addr().As16()), ap.Port())
	for _, a := range []netip.AddrPort{ap, mapped} {
		if !s.Contains(a) {
			t.Errorf("Contains(%s) = false, want true", a)
		}
	}
}
