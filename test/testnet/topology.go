//go:build linux

package testnet

import (
	"net/netip"
	"testing"
)

// The fixed addresses of the topology. Everything lives in the test's own namespaces.
var (
	// SidecarAddr4 and SidecarAddr6 are the sidecar end of the veth pair: the source address
	// of everything the sidecar namespace sends to the upstream world.
	SidecarAddr4 = netip.MustParseAddr("198.19.255.254")
	SidecarAddr6 = netip.MustParseAddr("2001:db8:ffff::1")
	// UpstreamRange4 and UpstreamRange6 are routed from the sidecar namespace to the upstream
	// namespace (and, with a higher metric, to "unreachable").
	UpstreamRange4 = netip.MustParsePrefix("198.18.0.0/15")
	UpstreamRange6 = netip.MustParsePrefix("2001:db8::/32")
)

// Interface names; they are per namespace, so every topology can use the same ones.
const (
	sidecarLink  = "sc0"
	upstreamLink = "up0"
)

// Topology is a sidecar namespace joined by a veth pair to an upstream namespace that plays
// the outside world.
type Topology struct {
	// Sidecar is where airlock and its clients run.
	Sidecar *Netns
	// Upstream holds every upstream host address (AddUpstreamAddr).
	Upstream *Netns
}

// NewTopology creates the two namespaces, the veth pair between them, the routes and the
// unreachable backstops, and removes everything in t.Cleanup. It never touches the
// machine's own network namespace: the veth pair is created inside the sidecar namespace
// with its peer placed directly in the upstream one.
func NewTopology(t testing.TB) *Topology {
	t.Helper()
	base := uniqueName()
	sc := NewNetns(t, base+"-sc")
	up := NewNetns(t, base+"-up")
	for _, n := range []*Netns{sc, up} {
		// Without duplicate address detection IPv6 addresses are usable at once.
		for _, k := range []string{"net/ipv6/conf/all/accept_dad", "net/ipv6/conf/default/accept_dad"} {
			if err := n.WriteSysctl(k, "0"); err != nil {
				t.Fatalf("netns %s: sysctl %s: %v", n.Name, k, err)
			}
		}
	}

	sc.IP(t, "link", "add", sidecarLink, "type", "veth", "peer", "name", upstreamLink, "netns", up.Name)
	t.Cleanup(func() {
		// Deleting one end deletes the pair; deleting the namespaces (registered earlier, so
		// run later) would too, but say it explicitly.
		_ = runIP("-n", sc.Name, "link", "del", sidecarLink)
	})

	// Backstops first, so nothing can leave the sidecar namespace by another path even for a
	// moment: a packet that escapes enforcement dies here.
	sc.IP(t, "route", "add", "unreachable", UpstreamRange4.String(), "metric", "4000")
	sc.IP(t, "route", "add", "unreachable", "default", "metric", "4000")
	sc.IP(t, "-6", "route", "add", "unreachable", UpstreamRange6.String(), "metric", "4000")
	sc.IP(t, "-6", "route", "add", "unreachable", "default", "metric", "4000")
	up.IP(t, "route", "add", "unreachable", "default", "metric", "4000")
	up.IP(t, "-6", "route", "add", "unreachable", "default", "metric", "4000")

	sc.IP(t, "addr", "add", SidecarAddr4.String()+"/32", "dev", sidecarLink)
	sc.IP(t, "addr", "add", SidecarAddr6.String()+"/128", "dev", sidecarLink, "nodad")
	sc.IP(t, "link", "set", sidecarLink, "up")
	up.IP(t, "link", "set", upstreamLink, "up")

	sc.IP(t, "route", "add", UpstreamRange4.String(), "dev", sidecarLink, "src", SidecarAddr4.String(), "metric", "100")
	sc.IP(t, "-6", "route", "add", UpstreamRange6.String(), "dev", sidecarLink, "src", SidecarAddr6.String(), "metric", "100")
	up.IP(t, "route", "add", SidecarAddr4.String()+"/32", "dev", upstreamLink)
	up.IP(t, "-6", "route", "add", SidecarAddr6.String()+"/128", "dev", upstreamLink)
	return &Topology{Sidecar: sc, Upstream: up}
}

// AddUpstreamAddr gives the upstream namespace address a (which must lie in 198.18.0.0/15 or
// 2001:db8::/32), so that the sidecar reaches it over the veth pair. Adding an address twice
// fails.
func (tp *Topology) AddUpstreamAddr(t testing.TB, a netip.Addr) {
	t.Helper()
	a = a.Unmap()
	switch {
	case a.Is4() && UpstreamRange4.Contains(a):
		tp.Upstream.IP(t, "addr", "add", a.String()+"/32", "dev", upstreamLink)
	case a.Is6() && UpstreamRange6.Contains(a):
		tp.Upstream.IP(t, "addr", "add", a.String()+"/128", "dev", upstreamLink, "nodad")
	default:
		t.Fatalf("testnet: upstream address %s is outside %s and %s", a, UpstreamRange4, UpstreamRange6)
	}
}

// AddSidecarLocalAddr adds a to the sidecar namespace's loopback device, so that a listener
// there stands in for an internal destination (169.254.169.254, 10.0.0.1, ...) that the sidecar
// must never connect to. The address exists only inside the test's namespace.
func (tp *Topology) AddSidecarLocalAddr(t testing.TB, a netip.Addr) {
	t.Helper()
	bits := 32
	if a.Is6() {
		bits = 128
	}
	tp.Sidecar.IP(t, "addr", "add", netip.PrefixFrom(a, bits).String(), "dev", "lo")
}
