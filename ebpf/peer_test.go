//go:build linux

package ebpf

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/test/testnet"
)

// peerListen is a listener in the fixture's sandbox namespace the programs treat as one of
// the sidecar's (added to the Config), whose accepted connections the tests look up.
var peerListen = netip.MustParseAddrPort("127.0.0.1:3130")

// TestPeerCgroupAndIdentityTasks: the kernel records which cgroup connected each connection
// to a listener, a task of a cgroup below the enforced one (an identity's) reaches only the
// listeners when Identities is set, and the enforced cgroup's own tasks are unchanged.
func TestPeerCgroupAndIdentityTasks(t *testing.T) {
	f := newFixture(t, func(c *Config) {
		c.Identities = true
		c.Listeners = append(c.Listeners, Listener{Addr: peerListen, Proto: TCP, Kind: ListenerProxy})
	})
	ln, err := f.tp.Sidecar.Listen("tcp", peerListen.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	child := f.cg.Child(t, "airlock-id-reviewer")
	own, id := f.probe(nil), f.probe(child)
	if err := f.enf.Allow(hostA, []uint16{80}, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got := own.Do(t, "connect 4 tcp 198.18.0.10:80"); got != "OK" {
		t.Errorf("the sandbox's own task to an allowed address: %s, want OK", got)
	}
	if got := id.Do(t, "connect 4 tcp 198.18.0.10:80"); got != "EPERM" {
		t.Errorf("an identity's task straight to an allowed address: %s, want EPERM", got)
	}
	if _, ok := f.waitDeny(func(ev DenyEvent) bool { return ev.Reason == DenyIdentity }); !ok {
		t.Error("no identity_direct deny event")
	}
	// Without Config.IdentityTCP (a pod) raw TCP is per sandbox: every identity has it.
	if got := id.Do(t, "connect 4 tcp 198.18.1.5:5432"); got != "ECONNREFUSED" {
		t.Errorf("an identity's task to a protocol tcp range, raw TCP per sandbox: %s, want it let through (ECONNREFUSED)", got)
	}
	// SetIdentityTCP switches the per-identity rule on at runtime (a pod's node agent, told
	// after the attach) and nil off again.
	if err := f.enf.SetIdentityTCP(map[string][]CIDRRule{}); err != nil {
		t.Fatal(err)
	}
	if got := id.Do(t, "connect 4 tcp 198.18.1.5:5432"); got != "EPERM" {
		t.Errorf("an unmapped identity task to a protocol tcp range, per-identity rule on: %s, want EPERM", got)
	}
	if err := f.enf.SetIdentityTCP(nil); err != nil {
		t.Fatal(err)
	}
	if got := id.Do(t, "connect 4 tcp 198.18.1.5:5432"); got != "ECONNREFUSED" {
		t.Errorf("an identity's task to a protocol tcp range, per-identity rule off again: %s, want ECONNREFUSED", got)
	}
	for _, tc := range []struct {
		probe interface {
			Do(testing.TB, string) string
		}
		path string
	}{{own, f.cg.Path}, {id, child.Path}} {
		want, err := CgroupID(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		if got := tc.probe.Do(t, "hold c 4 "+peerListen.String()); got != "OK" {
			t.Fatalf("hold a connection to the listener: %s", got)
		}
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		peer := c.RemoteAddr().(*net.TCPAddr).AddrPort()
		if got, err := f.enf.PeerCgroup(peer); err != nil || got != want {
			t.Errorf("PeerCgroup(%v) = %d, %v; want %d (%s)", peer, got, err, want, tc.path)
		}
		c.Close()
	}
	if _, err := f.enf.PeerCgroup(netip.MustParseAddrPort("127.0.0.1:1")); !errors.Is(err, ErrNoPeer) {
		t.Errorf("PeerCgroup of an unknown peer: %v, want ErrNoPeer", err)
	}
	// Without identities the same task may connect straight to the allowed address.
	if err := f.enf.SetIdentities(false); err != nil {
		t.Fatal(err)
	}
	if got := id.Do(t, "connect 4 tcp 198.18.0.10:80"); got != "OK" {
		t.Errorf("with Identities off: %s, want OK", got)
	}
}

// TestQueryCgroup: the kernel records which cgroup's task sent each UDP datagram to the DNS
// listener, keyed by its source and its first two bytes (a DNS message's ID), whether it was
// sent with the listener's address or on a socket connected to it.
func TestQueryCgroup(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Identities = true })
	child := f.cg.Child(t, "airlock-id-reviewer")
	for _, tc := range []struct {
		name, path string
		probe      *testnet.SandboxProbe
	}{
		{"own", f.cg.Path, f.probe(nil)},
		{"identity", child.Path, f.probe(child)},
	} {
		want, err := CgroupID(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		for _, cmd := range []string{"sendto 4 ", "udpconnsend 4 ", "sendto 6 "} {
			if got := tc.probe.Do(t, cmd+dnsAddr.String()); got != "OK" {
				t.Fatalf("%s: %s: %s", tc.name, cmd, got)
			}
			from, id := f.readQuery()
			if got, err := f.enf.QueryCgroup(from, id); err != nil || got != want {
				t.Errorf("%s, %s: QueryCgroup(%v, %#x) = %d, %v; want %d", tc.name, cmd, from, id, got, err, want)
			}
			if _, err := f.enf.QueryCgroup(from, id+1); !errors.Is(err, ErrNoPeer) {
				t.Errorf("%s, %s: QueryCgroup with another ID: %v, want ErrNoPeer", tc.name, cmd, err)
			}
		}
	}
}

// TestQueryGSORefused: a UDP GSO super-packet to the DNS listener is never sent: the
// listener would receive each segment as a datagram, and only the first one's ID is recorded,
// so a later segment could match the record another query left.
func TestQueryGSORefused(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Identities = true })
	p := f.probe(nil)
	if got := p.Do(t, "udpgso 4 "+dnsAddr.String()); got != "EPERM" {
		t.Errorf("UDP GSO to the DNS listener: %s, want EPERM", got)
	}
	f.assertNoDatagram(f.dns, dnsAddr)
	if got := p.Do(t, "sendto 4 "+dnsAddr.String()); got != "OK" {
		t.Fatalf("a plain datagram to the DNS listener: %s", got)
	}
	if from, id := f.readQuery(); id != uint16('p')<<8|'r' {
		t.Errorf("read %#x from %v, want the plain datagram", id, from)
	}
}

// readQuery reads one datagram from the fixture's DNS listener and returns its source and
// its first two bytes, big-endian (a DNS message's ID).
func (f *fixture) readQuery() (netip.AddrPort, uint16) {
	f.t.Helper()
	_ = f.dns.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 512)
	n, from, err := f.dns.ReadFrom(buf)
	if err != nil || n < 2 {
		f.t.Fatalf("read the query: %d bytes, %v", n, err)
	}
	ap := from.(*net.UDPAddr).AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), uint16(buf[0])<<8 | uint16(buf[1])
}
