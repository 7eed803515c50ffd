package egress

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/airlock-dev/airlock/policy"
)

const public = "198.18.0.10" // a public address in the tests' range

// TestMixedAnswers holds the one rule: an answer with any internal address no rule names is
// refused whole, whatever form the internal address takes; naming the range allows it.
func TestMixedAnswers(t *testing.T) {
	cidrRule := "    - name: internal\n      cidrs: [\"10.0.0.0/8\"]\n      ports: [443]\n"
	tests := []mixedCase{
		{name: "public only", answer: []string{public, "2001:db8::10"}},
		{name: "public and private", answer: []string{public, "10.0.0.1"}, want: ErrInternalAddress},
		{name: "private first", answer: []string{"10.0.0.1", public}, want: ErrInternalAddress},
		{name: "public and loopback", answer: []string{public, "127.0.0.1"}, want: ErrInternalAddress},
		{name: "public and IPv6 loopback", answer: []string{public, "::1"}, want: ErrInternalAddress},
		{name: "public and IPv6 ULA", answer: []string{"2001:db8::10", "fd12:3456::1"}, want: ErrInternalAddress},
		{name: "public and IPv6 link-local", answer: []string{public, "fe80::1"}, want: ErrInternalAddress},
		{name: "public and metadata", answer: []string{public, "169.254.169.254"}, want: ErrInternalAddress},
		{name: "public and CGNAT", answer: []string{public, "100.64.0.1"}, want: ErrInternalAddress},
		{name: "public and IPv4-mapped private", answer: []string{public, "::ffff:10.0.0.1"}, want: ErrInternalAddress},
		{name: "public and NAT64 of private", answer: []string{public, "64:ff9b::a00:1"}, want: ErrInternalAddress},
		{name: "public and 6to4 of private", answer: []string{public, "2002:a00:1::1"}, want: ErrInternalAddress},
		{name: "public and Teredo of private", answer: []string{public, "2001:0:4136:e378:8000:63bf:f5ff:fffe"}, want: ErrInternalAddress},
		{name: "public and unspecified", answer: []string{public, "0.0.0.0"}, want: ErrSelfAddress},
		{name: "range names the private address", answer: []string{public, "10.0.0.1"},
			rules: func(*testing.T) Rules { return prefixes("10.0.0.0/8") }},
		{name: "range names the mapped form's address", answer: []string{public, "::ffff:10.0.0.1"},
			rules: func(*testing.T) Rules { return prefixes("10.0.0.0/8") }},
		{name: "range names the ULA", answer: []string{"2001:db8::10", "fd12:3456::1"},
			rules: func(*testing.T) Rules { return prefixes("fd12::/16") }},
		{name: "range names one internal address, not the other", answer: []string{public, "10.0.0.1", "169.254.169.254"},
			rules: func(*testing.T) Rules { return prefixes("10.0.0.0/8") }, want: ErrInternalAddress},
		{name: "every range named", answer: []string{public, "10.0.0.1", "fe80::1"},
			rules: func(*testing.T) Rules { return AllRanges() }},
		{name: "policy rule names the range and port", answer: []string{public, "10.0.0.1"},
			rules: func(t *testing.T) Rules { return mustPolicy(t, "enforce", cidrRule) }},
		{name: "policy rule names the range, not the port", answer: []string{public, "10.0.0.1"},
			rules: func(t *testing.T) Rules {
				return mustPolicy(t, "enforce", "    - name: internal\n      cidrs: [\"10.0.0.0/8\"]\n      ports: [80]\n")
			}, want: ErrInternalAddress},
		{name: "policy rule names another range", answer: []string{public, "169.254.169.254"},
			rules: func(t *testing.T) Rules { return mustPolicy(t, "enforce", cidrRule) }, want: ErrInternalAddress},
		{name: "report mode still refuses", answer: []string{public, "10.0.0.1"},
			rules: func(t *testing.T) Rules {
				return mustPolicy(t, "report", "    - name: web\n      hosts: [\"svc.test\"]\n      ports: [443]\n")
			}, want: ErrInternalAddress},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { testMixedAnswer(t, tc) })
	}
}

type mixedCase struct {
	name   string
	answer []string
	rules  func(t *testing.T) Rules
	want   error // nil: allowed, every address kept
}

func testMixedAnswer(t *testing.T, tc mixedCase) {
	g, res, d := newTestGuard(t)
	res.set("svc.test", addrs(tc.answer...))
	var rules Rules = Ranges(nil)
	if tc.rules != nil {
		rules = tc.rules(t)
	}
	tg, err := g.Resolve(context.Background(), "svc.test", 443, rules)
	if tc.want != nil {
		if !errors.Is(err, tc.want) {
			t.Fatalf("got %v, want %v", err, tc.want)
		}
		if den := denialOf(t, err); den.Decision.Verdict != policy.Deny || den.Decision.Port != 443 || den.Decision.Detail == "" {
			t.Errorf("got decision %+v, want a deny for port 443 with a detail", den.Decision)
		}
		return
	}
	if err != nil {
		t.Fatalf("got %v, want allowed", err)
	}
	var want []netip.Addr
	for _, a := range addrs(tc.answer...) {
		if a = a.Unmap(); !slices.Contains(want, a) {
			want = append(want, a)
		}
	}
	if got := tg.Addrs(); !slices.Equal(got, want) {
		t.Errorf("got addresses %v, want %v", got, want)
	}
	if len(d.dials()) != 0 {
		t.Errorf("Resolve dialled %v", d.dials())
	}
}

// TestDenialReasons checks the reason codes callers put in deny responses.
func TestDenialReasons(t *testing.T) {
	tests := []struct {
		name, host string
		want       error
		reason     policy.Reason
	}{
		{name: "invalid host", host: "bad host!", want: ErrInvalidHost, reason: policy.ReasonInvalidHost},
		{name: "internal", host: "10.0.0.1", want: ErrInternalAddress, reason: policy.ReasonInternalAddress},
		{name: "self", host: "0.0.0.0", want: ErrSelfAddress, reason: "self_address"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, _, _ := newTestGuard(t)
			_, err := g.Resolve(context.Background(), tc.host, 443, Ranges(nil))
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if den := denialOf(t, err); den.Decision.Reason != tc.reason {
				t.Errorf("got reason %q, want %q", den.Decision.Reason, tc.reason)
			}
		})
	}
}

// TestOwnListeners: with every range named, the own-address rule alone refuses the sidecar's
// listeners, in every form a host or an answer can take.
func TestOwnListeners(t *testing.T) {
	tests := []struct {
		name   string
		host   string
		answer []string // for host "svc.test"
		port   int
	}{
		{name: "IPv4 literal", host: "127.0.0.1", port: 4000},
		{name: "IPv4 alternate spelling", host: "2130706433", port: 4000},
		{name: "IPv4-mapped literal", host: "[::ffff:127.0.0.1]", port: 4000},
		{name: "IPv6 literal", host: "[::1]", port: 4001},
		{name: "IPv4 wildcard through an interface address", host: "198.18.0.5", port: 3128},
		{name: "IPv4 wildcard through loopback", host: "127.0.0.9", port: 3128},
		{name: "IPv4 wildcard through the mapped interface address", host: "[::ffff:198.18.0.5]", port: 3128},
		{name: "IPv6 wildcard through an IPv6 interface address", host: "[2001:db8::5]", port: 3129},
		{name: "IPv6 wildcard through an IPv4 interface address", host: "198.18.0.5", port: 3129},
		{name: "unspecified IPv4", host: "0.0.0.0", port: 4000},
		{name: "unspecified IPv6", host: "[::]", port: 9},
		{name: "name answering public and a listener", host: "svc.test", answer: []string{public, "127.0.0.1"}, port: 4000},
		{name: "name answering a mapped listener", host: "svc.test", answer: []string{"::ffff:198.18.0.5"}, port: 3128},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, res, d := newTestGuard(t)
			for _, ap := range []string{"127.0.0.1:4000", "[::1]:4001", "0.0.0.0:3128", "[::]:3129"} {
				g.Self().Add(netip.MustParseAddrPort(ap))
			}
			res.set("svc.test", addrs(tc.answer...))
			_, err := g.Resolve(context.Background(), tc.host, tc.port, AllRanges())
			if !errors.Is(err, ErrSelfAddress) {
				t.Fatalf("got %v, want ErrSelfAddress", err)
			}
			if len(d.dials()) != 0 {
				t.Errorf("dialled %v", d.dials())
			}
		})
	}
}

// TestResolveOnce: a name is resolved once and only the checked address is dialled; a
// rebinding resolver that answers loopback the second time is never asked again.
func TestResolveOnce(t *testing.T) {
	tests := []struct {
		name string
		dial func(g *Guard) error
	}{
		{name: "Resolve then Dial", dial: func(g *Guard) error {
			tg, err := g.Resolve(context.Background(), "rebind.test", 80, Ranges(nil))
			if err != nil {
				return err
			}
			c, _, err := g.Dial(context.Background(), tg)
			if err == nil {
				c.Close()
			}
			return err
		}},
		{name: "DialContext", dial: func(g *Guard) error {
			c, err := g.DialContext(Ranges(nil))(context.Background(), "tcp", "rebind.test:80")
			if err == nil {
				c.Close()
			}
			return err
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, res, d := newTestGuard(t)
			res.set("rebind.test", addrs(public), addrs("127.0.0.1"))
			if err := tc.dial(g); err != nil {
				t.Fatal(err)
			}
			if n := res.count("rebind.test"); n != 1 {
				t.Errorf("got %d queries, want 1", n)
			}
			want := []netip.AddrPort{netip.MustParseAddrPort(public + ":80")}
			if got := d.dials(); !slices.Equal(got, want) {
				t.Errorf("dialled %v, want %v", got, want)
			}
		})
	}
}

// TestIPLiterals: IP literals are parsed, never resolved, and checked like any answer.
func TestIPLiterals(t *testing.T) {
	tests := []struct {
		name, host string
		want       error
		addr       string
	}{
		{name: "public IPv4", host: "198.18.0.1", addr: "198.18.0.1"},
		{name: "public IPv6 bracketed", host: "[2001:db8::1]", addr: "2001:db8::1"},
		{name: "public IPv6 bare", host: "2001:db8::1", addr: "2001:db8::1"},
		{name: "mapped public", host: "[::ffff:198.18.0.1]", addr: "198.18.0.1"},
		{name: "private", host: "10.0.0.1", want: ErrInternalAddress},
		{name: "hex loopback", host: "0x7f000001", want: ErrInternalAddress},
		{name: "short loopback", host: "127.1", want: ErrInternalAddress},
		{name: "metadata", host: "169.254.169.254", want: ErrInternalAddress},
		{name: "NAT64 of metadata", host: "[64:ff9b::a9fe:a9fe]", want: ErrInternalAddress},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, res, _ := newTestGuard(t)
			tg, err := g.Resolve(context.Background(), tc.host, 443, Ranges(nil))
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if len(res.queries) != 0 {
				t.Errorf("resolver asked %v", res.queries)
			}
			if tc.want == nil && !slices.Equal(tg.Addrs(), addrs(tc.addr)) {
				t.Errorf("got %v, want %v", tg.Addrs(), tc.addr)
			}
		})
	}
}

type book map[string]netip.Addr

func (b book) Resolved(name string, a netip.Addr) bool { return b[name] == a }

func TestPin(t *testing.T) {
	g, res, _ := newTestGuard(t)
	res.set("svc.test", addrs("198.18.0.1", "198.18.0.2"))
	named, err := g.Resolve(context.Background(), "svc.test", 80, Ranges(nil))
	if err != nil {
		t.Fatal(err)
	}
	literal, err := g.Resolve(context.Background(), "198.18.0.3", 80, Ranges(nil))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		t     Target
		want  string
		names NameAddrs
		ok    bool
	}{
		{name: "one of the name's addresses", t: named, want: "198.18.0.2", ok: true},
		{name: "mapped form of one", t: named, want: "::ffff:198.18.0.1", ok: true},
		{name: "not an address of the name", t: named, want: "198.18.0.9"},
		{name: "DNS filter answered it", t: named, want: "198.18.0.2", names: book{"svc.test": netip.MustParseAddr("198.18.0.2")}, ok: true},
		{name: "DNS filter never answered it", t: named, want: "198.18.0.2", names: book{"svc.test": netip.MustParseAddr("198.18.0.1")}},
		{name: "IP literal skips the DNS filter", t: literal, want: "198.18.0.3", names: book{}, ok: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := netip.MustParseAddr(tc.want)
			got, err := tc.t.Pin(want, tc.names)
			if !tc.ok {
				if den := denialOf(t, err); !errors.Is(err, ErrOriginalDstMismatch) || den.Decision.Reason != "original_destination_mismatch" {
					t.Fatalf("got %v, want ErrOriginalDstMismatch", err)
				}
				return
			}
			if err != nil || !slices.Equal(got.Addrs(), []netip.Addr{want.Unmap()}) {
				t.Fatalf("got %v, %v; want only %s", got.Addrs(), err, want.Unmap())
			}
		})
	}
}

func TestDialTriesCheckedAddressesInOrder(t *testing.T) {
	g, res, d := newTestGuard(t)
	res.set("svc.test", addrs("198.18.0.1", "2001:db8::1", "198.18.0.2"))
	d.fail[netip.MustParseAddrPort("198.18.0.1:80")] = true
	tg, err := g.Resolve(context.Background(), "svc.test", 80, Ranges(nil))
	if err != nil {
		t.Fatal(err)
	}
	c, ap, err := g.Dial(context.Background(), tg)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if want := netip.MustParseAddrPort("[2001:db8::1]:80"); ap != want {
		t.Errorf("got %s, want %s", ap, want)
	}
	if got := d.dials(); len(got) != 2 {
		t.Errorf("dialled %v, want the first two addresses", got)
	}
	if _, _, err := g.Dial(context.Background(), Target{}); !errors.Is(err, ErrUnchecked) {
		t.Errorf("zero Target: got %v, want ErrUnchecked", err)
	}
}

// TestCheckUnderNewRules: a tunnel's addresses, checked when it opened, are checked again
// under a later policy.
func TestCheckUnderNewRules(t *testing.T) {
	g, res, _ := newTestGuard(t)
	res.set("svc.test", addrs(public, "10.0.0.1"))
	tg, err := g.Resolve(context.Background(), "svc.test", 443, prefixes("10.0.0.0/8"))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Check(tg, Ranges(nil)); !errors.Is(err, ErrInternalAddress) {
		t.Errorf("got %v, want ErrInternalAddress", err)
	}
	g.Self().Add(netip.MustParseAddrPort(public + ":443"))
	if err := g.Check(tg, AllRanges()); !errors.Is(err, ErrSelfAddress) {
		t.Errorf("got %v, want ErrSelfAddress", err)
	}
}

func TestResolveFailure(t *testing.T) {
	g, res, _ := newTestGuard(t)
	res.set("empty.test", []netip.Addr{})
	for _, host := range []string{"missing.test", "empty.test"} {
		t.Run(host, func(t *testing.T) {
			_, err := g.Resolve(context.Background(), host, 80, Ranges(nil))
			var den *Denial
			if !errors.Is(err, ErrResolve) || errors.As(err, &den) {
				t.Errorf("got %v, want ErrResolve and no denial", err)
			}
		})
	}
}

func TestNewRejectsNegativeTimeout(t *testing.T) {
	if _, err := New(Config{DialTimeout: -1}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("got %v, want ErrInvalidConfig", err)
	}
}
