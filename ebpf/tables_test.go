package ebpf

import (
	"net/netip"
	"testing"
	"time"
)

func TestCompileCIDRsMergesContainingRanges(t *testing.T) {
	got, err := compileCIDRs([]CIDRRule{
		{Prefix: netip.MustParsePrefix("10.20.0.0/16"), Ports: []uint16{5432}, Raw: true},
		{Prefix: netip.MustParsePrefix("10.20.1.0/24"), Ports: []uint16{443}},
		{Prefix: netip.MustParsePrefix("2001:db8::/32"), Ports: []uint16{80}},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		prefix string
		bits   uint32
		ports  map[uint16]uint8 // port -> raw
	}{
		{"wide range keeps its own port", "10.20.0.0", 96 + 16, map[uint16]uint8{5432: 1}},
		{"narrow range inherits the wide range's port", "10.20.1.0", 96 + 24, map[uint16]uint8{443: 0, 5432: 1}},
		{"ipv6 range", "2001:db8::", 32, map[uint16]uint8{80: 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := airlockCidrKey{Prefixlen: tc.bits, Addr: addr16(netip.MustParseAddr(tc.prefix))}
			v, ok := got[k]
			if !ok {
				t.Fatalf("no entry for %s/%d in %v", tc.prefix, tc.bits, got)
			}
			if int(v.N) != len(tc.ports) {
				t.Fatalf("got %d ports, want %d", v.N, len(tc.ports))
			}
			for i := range v.N {
				raw, ok := tc.ports[v.Ports[i]]
				if !ok || raw != v.Raw[i] {
					t.Errorf("port %d raw %d: want %v", v.Ports[i], v.Raw[i], tc.ports)
				}
			}
		})
	}
}

func TestCompileCIDRsRejects(t *testing.T) {
	many := make([]uint16, cidrPorts+1)
	for i := range many {
		many[i] = uint16(i + 1)
	}
	for _, tc := range []struct {
		name  string
		rules []CIDRRule
	}{
		{"no ports", []CIDRRule{{Prefix: netip.MustParsePrefix("10.0.0.0/8")}}},
		{"invalid prefix", []CIDRRule{{Ports: []uint16{1}}}},
		{"too many ports", []CIDRRule{{Prefix: netip.MustParsePrefix("10.0.0.0/8"), Ports: many}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := compileCIDRs(tc.rules); err == nil {
				t.Fatal("got nil error, want one")
			}
		})
	}
}

func TestSchemaHash(t *testing.T) {
	spec, err := loadAirlock()
	if err != nil {
		t.Fatal(err)
	}
	a := schemaHash(spec)
	if b := schemaHash(spec); a != b {
		t.Fatalf("hash not stable: %x then %x", a, b)
	}
	spec.Maps["allow"].MaxEntries++
	if b := schemaHash(spec); a == b {
		t.Fatal("hash ignores a map's size")
	}
	spec.Maps["allow"].MaxEntries--
	spec.Maps["meta"].MaxEntries++
	if b := schemaHash(spec); a != b {
		t.Fatal("hash covers the meta map, whose layout must never matter")
	}
}

func TestLimiter(t *testing.T) {
	l := &limiter{rate: 2, tokens: 2}
	t0 := time.Unix(1000, 0)
	got := []bool{l.allow(t0), l.allow(t0), l.allow(t0), l.allow(t0.Add(500 * time.Millisecond))}
	want := []bool{true, true, false, true}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("allow #%d: got %v, want %v", i, got[i], want[i])
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"minimal", Config{Sandbox: "s1", Cgroup: "/sys/fs/cgroup/s1"}, true},
		{"sandbox with a slash", Config{Sandbox: "a/b", Cgroup: "/x"}, false},
		{"dot dot", Config{Sandbox: "..", Cgroup: "/x"}, false},
		{"no cgroup", Config{Sandbox: "s1"}, false},
		{"transparent on ipv6 only", Config{Sandbox: "s1", Cgroup: "/x", Transparent: &Transparent{Addr4: netip.MustParseAddrPort("[::1]:15001"), Ports: []uint16{80}}}, false},
		{"transparent without ports", Config{Sandbox: "s1", Cgroup: "/x", Transparent: &Transparent{Addr4: netip.MustParseAddrPort("127.0.0.1:15001")}}, false},
		{"listener without protocol", Config{Sandbox: "s1", Cgroup: "/x", Listeners: []Listener{{Addr: netip.MustParseAddrPort("127.0.0.1:1")}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.cfg.validate()
			if (err == nil) != tc.ok {
				t.Fatalf("validate: got %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestUnescapeMountinfo(t *testing.T) {
	if got := unescapeMountinfo(`/mnt/with\040space\134x`); got != `/mnt/with space\x` {
		t.Errorf("unescapeMountinfo = %q", got)
	}
}
