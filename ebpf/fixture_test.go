//go:build linux

package ebpf

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/test/privtest"
	"github.com/airlock-dev/airlock/test/testnet"
)

func TestMain(m *testing.M) {
	testnet.RunProbeIfRequested()
	runFindPodIfRequested()
	os.Exit(m.Run())
}

// testPinRoot keeps test pins apart from a real sidecar's.
const testPinRoot = "/sys/fs/bpf/airlock-test"

// The fixture's addresses (inside the test's own namespaces).
var (
	hostA    = netip.MustParseAddr("198.18.0.10") // echo server on 80, 443, 8080
	hostB    = netip.MustParseAddr("198.18.0.20") // echo server on 80
	hostV6   = netip.MustParseAddr("2001:db8::10")
	resolver = netip.MustParseAddrPort("198.18.0.53:53") // a UDP listener playing an outside resolver
	cidrHost = netip.MustParseAddr("198.18.1.5")         // in a CIDR rule, port 5432, no listener
	dnsAddr  = netip.MustParseAddrPort("127.0.0.1:5353")
	proxyTCP = netip.MustParseAddrPort("127.0.0.1:3128")
	adminTCP = netip.MustParseAddrPort("127.0.0.1:9090")
)

// fixture is a sandbox: a topology, a cgroup, and an Enforcer on it, the test process
// playing the sidecar (outside the cgroup).
type fixture struct {
	t        *testing.T
	tp       *testnet.Topology
	cg       *testnet.Cgroup
	sandbox  string
	cfg      Config
	enf      *Enforcer
	dns      net.PacketConn // the DNS filter's UDP listener (sidecar namespace)
	resolver net.PacketConn // the outside resolver (upstream namespace)

	// mu guards denies.
	mu     sync.Mutex
	denies []DenyEvent
}

var fixtureSeq int

func newFixture(t *testing.T, edit func(*Config)) *fixture {
	t.Helper()
	privtest.Require(t)
	if err := Probe(); err != nil {
		t.Fatalf("kernel lacks what the enforcement needs: %v", err)
	}
	fixtureSeq++
	f := &fixture{t: t, tp: testnet.NewTopology(t), cg: testnet.NewCgroup(t),
		sandbox: fmt.Sprintf("t%d-%d", os.Getpid(), fixtureSeq)}
	// Let every group open ICMP ping sockets in the sandbox's namespace, so that it is the
	// sock_create hook, not this sysctl, that refuses them.
	if err := f.tp.Sidecar.WriteSysctl("net/ipv4/ping_group_range", "0 2147483647"); err != nil {
		t.Fatal(err)
	}
	for _, a := range []netip.Addr{hostA, hostB, hostV6, resolver.Addr(), cidrHost} {
		f.tp.AddUpstreamAddr(t, a)
	}
	for _, ap := range []string{"198.18.0.10:80", "198.18.0.10:443", "198.18.0.10:8080", "198.18.0.20:80", "[2001:db8::10]:80"} {
		f.echo(f.tp.Upstream, ap)
	}
	for _, ap := range []netip.AddrPort{proxyTCP, adminTCP} {
		f.echo(f.tp.Sidecar, ap.String())
	}
	var err error
	if f.dns, err = f.tp.Sidecar.ListenPacket("udp", dnsAddr.String()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.dns.Close() })
	if f.resolver, err = f.tp.Upstream.ListenPacket("udp", resolver.String()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.resolver.Close() })

	f.cfg = Config{
		Sandbox: f.sandbox,
		Cgroup:  f.cg.Path,
		PinRoot: testPinRoot,
		Listeners: []Listener{
			{Addr: proxyTCP, Proto: TCP, Kind: ListenerProxy},
			{Addr: dnsAddr, Proto: UDP, Kind: ListenerDNS},
			{Addr: dnsAddr, Proto: TCP, Kind: ListenerDNS},
		},
		CIDRs:  []CIDRRule{{Prefix: netip.MustParsePrefix("198.18.1.0/24"), Ports: []uint16{5432}, Raw: true}},
		OnDeny: f.onDeny,
	}
	if edit != nil {
		edit(&f.cfg)
	}
	t.Cleanup(func() {
		if f.enf != nil {
			f.enf.Close()
		}
		if err := Remove(testPinRoot, f.sandbox); err != nil {
			t.Errorf("Remove: %v", err)
		}
	})
	f.open()
	return f
}

// open opens (or re-opens) the Enforcer with f.cfg.
func (f *fixture) open() *Enforcer {
	f.t.Helper()
	enf, err := Open(f.cfg)
	if err != nil {
		f.t.Fatalf("Open: %v", err)
	}
	f.enf = enf
	return enf
}

func (f *fixture) onDeny(ev DenyEvent) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.denies = append(f.denies, ev)
}

// waitDeny polls (bounded) for a deny event matching match.
func (f *fixture) waitDeny(match func(DenyEvent) bool) (DenyEvent, bool) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		f.mu.Lock()
		for _, ev := range f.denies {
			if match(ev) {
				f.mu.Unlock()
				return ev, true
			}
		}
		f.mu.Unlock()
		time.Sleep(5 * time.Millisecond) // polling the event reader, bounded
	}
	return DenyEvent{}, false
}

// probe starts a sandbox process in the fixture's cgroup (or cg) and network namespace.
func (f *fixture) probe(cg *testnet.Cgroup) *testnet.SandboxProbe {
	f.t.Helper()
	if cg == nil {
		cg = f.cg
	}
	return testnet.StartSandboxProbe(f.t, cg, f.tp.Sidecar)
}

// echo serves a line echo on addr in ns until the test ends.
func (f *fixture) echo(ns *testnet.Netns, addr string) {
	f.t.Helper()
	l, err := ns.Listen("tcp", addr)
	if err != nil {
		f.t.Fatalf("listen %s: %v", addr, err)
	}
	f.t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := io.WriteString(c, line); err != nil {
						return
					}
				}
			}()
		}
	}()
}

// assertNoDatagram proves that nothing reached pc before a canary datagram sent now from
// the sidecar namespace (outside the sandbox) on the same path: datagrams on one veth path
// arrive in order, so anything the sandbox managed to send earlier would arrive first.
func (f *fixture) assertNoDatagram(pc net.PacketConn, to netip.AddrPort) {
	f.t.Helper()
	err := f.tp.Sidecar.Do(func() error {
		c, err := net.Dial("udp", to.String())
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("canary"))
		return err
	})
	if err != nil {
		f.t.Fatalf("send canary: %v", err)
	}
	_ = pc.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 64)
	n, from, err := pc.ReadFrom(buf)
	if err != nil {
		f.t.Fatalf("read canary: %v", err)
	}
	if got := string(buf[:n]); got != "canary" {
		f.t.Fatalf("listener %s received %q from %v before the canary: the sandbox's datagram got out", to, got, from)
	}
}
