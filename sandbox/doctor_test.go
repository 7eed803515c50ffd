package sandbox_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/airlock-dev/airlock/ebpf"
	"github.com/airlock-dev/airlock/sandbox"
	"github.com/airlock-dev/airlock/test/privtest"
	"github.com/airlock-dev/airlock/test/testnet"
)

// TestDoctor runs the real checks on this machine: everything the tests themselves need must
// pass, and a subnet that overlaps one of this namespace's routes must fail with a fix. The
// netns check works in a throw-away namespace; nothing here changes this machine's network.
func TestDoctor(t *testing.T) {
	privtest.Require(t)
	store, err := sandbox.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m := &sandbox.Manager{Store: store, Kernel: ebpf.Host{}}
	cg := testnet.NewCgroup(t)
	checks := m.Doctor(context.Background(), sandbox.DoctorOptions{Subnet: "198.19.201.0/24", CgroupParent: cg.Path})
	byName := map[string]sandbox.Check{}
	for _, c := range checks {
		byName[c.Name] = c
		if c.Result == sandbox.Fail && c.Fix == "" {
			t.Errorf("check %s failed without a fix: %+v", c.Name, c)
		}
	}
	for _, name := range []string{"privileges", "cgroup v2", "kernel BPF features", "network namespaces", "subnet", "state directory"} {
		if c := byName[name]; c.Result != sandbox.Pass {
			t.Errorf("check %q = %+v, want PASS on the test machine", name, c)
		}
	}
	if c := byName["vault"]; c.Result != sandbox.Skip {
		t.Errorf("vault with no address = %+v, want SKIP", c)
	}

	// A subnet overlapping a route of this namespace (whatever the machine's own link is).
	routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	var used string
	for _, r := range routes {
		if r.Dst != nil {
			if p, ok := netip.AddrFromSlice(r.Dst.IP); ok {
				bits, _ := r.Dst.Mask.Size()
				if bits > 0 && bits <= 30 && !p.Unmap().IsLoopback() {
					used = netip.PrefixFrom(p.Unmap(), bits).String()
					break
				}
			}
		}
	}
	if used == "" {
		t.Skip("no IPv4 route of /30 or wider in this namespace to collide with")
	}
	checks = m.Doctor(context.Background(), sandbox.DoctorOptions{Subnet: used, CgroupParent: cg.Path})
	for _, c := range checks {
		if c.Name == "subnet" && (c.Result != sandbox.Fail || c.Fix == "") {
			t.Errorf("subnet %s overlapping a route: %+v, want FAIL with a fix", used, c)
		}
	}
	leftover := filepath.Join(sandbox.NetnsDir, fmt.Sprintf("airlock-doctor-%d", os.Getpid()))
	if _, err := os.Stat(leftover); err == nil {
		t.Errorf("the doctor's throw-away namespace %s was left behind", leftover)
	}
}
