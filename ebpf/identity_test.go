//go:build linux

package ebpf

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/test/testnet"
)

// cidrHost2 is a second address of the fixture's protocol tcp range (198.18.1.0/24, port
// 5432), with no listener either: a connection the kernel lets through is refused by the
// host (ECONNREFUSED), one it denies fails with EPERM.
var cidrHost2 = netip.MustParseAddr("198.18.1.6")

// TestIdentityRawTCP: an identity's task connects straight to a destination only when its
// own protocol tcp rules and the sandbox's both allow it; an identity with no rules, a
// cgroup nobody mapped, and a rule wider than the sandbox's get nothing more; reloads and a
// restarted sidecar (a new Enforcer on the pinned maps) keep it so.
func TestIdentityRawTCP(t *testing.T) {
	f := newFixture(t, func(c *Config) {
		c.Identities = true
		c.IdentityTCP = map[string][]CIDRRule{
			"author": {{Prefix: netip.MustParsePrefix("198.18.1.5/32"), Ports: []uint16{5432}}},
			"wide":   {{Prefix: netip.MustParsePrefix("198.18.0.0/16"), Ports: []uint16{5432, 80}}},
		}
	})
	f.tp.AddUpstreamAddr(t, cidrHost2)
	cgs := map[string]*testnet.Cgroup{}
	for _, name := range []string{"author", "reviewer", "wide", "stray"} {
		cgs[name] = f.cg.Child(t, "airlock-id-"+name)
	}
	ids := map[string]uint64{}
	mapped := map[uint64]string{}
	for name, cg := range cgs {
		id, err := CgroupID(cg.Path)
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = id
		if name != "stray" {
			mapped[id] = name
		}
	}
	if err := f.enf.SetIdentityCgroups(mapped); err != nil {
		t.Fatal(err)
	}
	probes := map[string]*testnet.SandboxProbe{"sandbox": f.probe(nil)}
	for name, cg := range cgs {
		probes[name] = f.probe(cg)
	}
	type want map[string]string // probe -> result
	check := func(t *testing.T, dest string, w want) {
		t.Helper()
		for who, res := range w {
			if got := probes[who].Do(t, "connect 4 tcp "+dest); got != res {
				t.Errorf("%s to %s: %s, want %s", who, dest, got, res)
			}
		}
	}
	const through, denied = "ECONNREFUSED", "EPERM"
	check(t, "198.18.1.5:5432", want{"sandbox": through, "author": through, "reviewer": denied, "stray": denied, "wide": through})
	check(t, "198.18.1.6:5432", want{"sandbox": through, "author": denied, "reviewer": denied, "wide": through})
	// An AF_INET6 socket to the IPv4-mapped address (connect6) meets the same rules.
	for who, res := range (want{"author": through, "reviewer": denied, "stray": denied}) {
		if got := probes[who].Do(t, "connect 6 tcp 198.18.1.5:5432"); got != res {
			t.Errorf("%s to 198.18.1.5:5432 from an AF_INET6 socket: %s, want %s", who, got, res)
		}
	}
	// wide's rule names port 80 and all of 198.18.0.0/16, which the sandbox's raw rules do
	// not: the kernel holds it to the sandbox's too.
	check(t, "198.18.0.20:80", want{"wide": denied})
	ev, ok := f.waitDeny(func(ev DenyEvent) bool { return ev.Reason == DenyIdentity && ev.Cgroup == ids["reviewer"] })
	if !ok {
		t.Fatal("no identity_direct deny event carrying the reviewer's cgroup")
	}
	if ev.Dest.String() != "198.18.1.5:5432" || ev.Identity != "reviewer" {
		t.Errorf("reviewer's deny event: dest %v identity %q, want 198.18.1.5:5432 and reviewer", ev.Dest, ev.Identity)
	}

	t.Run("reload", func(t *testing.T) {
		err := f.enf.SetIdentityTCP(map[string][]CIDRRule{
			"reviewer": {{Prefix: netip.MustParsePrefix("198.18.1.6/32"), Ports: []uint16{5432}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		check(t, "198.18.1.5:5432", want{"author": denied, "reviewer": denied, "wide": denied})
		check(t, "198.18.1.6:5432", want{"author": denied, "reviewer": through})
		// A cgroup handed to another identity takes that identity's rules.
		moved := map[uint64]string{ids["author"]: "reviewer", ids["reviewer"]: "author"}
		if err := f.enf.SetIdentityCgroups(moved); err != nil {
			t.Fatal(err)
		}
		check(t, "198.18.1.6:5432", want{"author": through, "reviewer": denied, "wide": denied})
	})

	t.Run("restart", func(t *testing.T) {
		if err := f.enf.Close(); err != nil {
			t.Fatal(err)
		}
		enf := f.open() // the same cfg: author 198.18.1.5/32 again
		if !enf.Adopted() {
			t.Fatal("the new Enforcer did not adopt the pinned maps")
		}
		// The previous Enforcer's cgroups are forgotten until mapped again: no raw TCP.
		check(t, "198.18.1.5:5432", want{"author": denied, "sandbox": through})
		if err := enf.SetIdentityCgroups(map[uint64]string{ids["author"]: "author"}); err != nil {
			t.Fatal(err)
		}
		check(t, "198.18.1.5:5432", want{"author": through, "reviewer": denied})
	})

	// A cgroup mapped to "" is the sandbox's own identity (a pod's default container): the
	// sandbox's raw TCP, and straight to an allowed address like the enforced cgroup's tasks.
	t.Run("sandbox's own", func(t *testing.T) {
		if err := f.enf.SetIdentityCgroups(map[uint64]string{ids["author"]: "author", ids["stray"]: ""}); err != nil {
			t.Fatal(err)
		}
		if err := f.enf.Allow(hostA, []uint16{80}, time.Now().Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		check(t, "198.18.1.6:5432", want{"stray": through, "author": denied})
		check(t, "198.18.0.10:80", want{"stray": "OK", "author": denied, "sandbox": "OK"})
	})

	t.Run("invalid", func(t *testing.T) {
		if err := f.enf.SetIdentityCgroups(make(map[uint64]string, 0)); err != nil {
			t.Errorf("SetIdentityCgroups with none: %v", err)
		}
		many := map[uint64]string{}
		for i := range maxIdentityCgroups + 1 {
			many[uint64(i+1)] = "author"
		}
		if err := f.enf.SetIdentityCgroups(many); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("SetIdentityCgroups with %d cgroups: %v, want ErrInvalidConfig", len(many), err)
		}
		if err := f.enf.SetIdentityCgroups(map[uint64]string{ids["author"]: "author"}); err != nil {
			t.Fatal(err)
		}
		bad := map[string][]CIDRRule{"a": {{Prefix: netip.MustParsePrefix("198.18.1.0/24")}}}
		if err := f.enf.SetIdentityTCP(bad); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("SetIdentityTCP with a rule without ports: %v, want ErrInvalidConfig", err)
		}
		check(t, "198.18.1.5:5432", want{"author": through})
	})
}
