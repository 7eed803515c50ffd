package sidecar

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-dev/airlock/policy"
)

// fakePeers answers PeerCgroup with the id it was set to.
type fakePeers struct{ id uint64 }

func (f *fakePeers) PeerCgroup(netip.AddrPort) (uint64, error) { return f.id, nil }
func (f *fakePeers) SetIdentities(bool) error                  { return nil }

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

func TestIdentitiesByCgroup(t *testing.T) {
	pol, err := policy.Parse("p.yaml", []byte(`apiVersion: airlock/v1
kind: EgressPolicy
metadata: {name: p}
spec:
  egress: [{name: a, hosts: [a.test]}]
  identities: {reviewer: {}}
`))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir() // a directory plays the sandbox's cgroup: its id is its inode
	peers := &fakePeers{}
	r := &identities{cgroup: root, peers: peers, policy: func() *policy.Policy { return pol },
		cgID: func(p string) (uint64, error) {
			fi, err := os.Stat(p)
			if err != nil {
				return 0, err
			}
			return fi.Sys().(*syscall.Stat_t).Ino, nil
		}}
	client := netip.MustParseAddrPort("10.0.0.2:40000")

	peers.id = inode(t, root)
	if name, err := r.Identity(client); err != nil || name != "" {
		t.Errorf("the sandbox's cgroup: %q, %v; want the sandbox's own (\"\")", name, err)
	}
	// exec --as makes the identity's cgroup after the sidecar started: a new id is looked up.
	dir := filepath.Join(root, policy.IdentityCgroupDir("reviewer"))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	peers.id = inode(t, dir)
	if name, err := r.Identity(client); err != nil || name != "reviewer" {
		t.Errorf("the identity's cgroup: %q, %v; want reviewer", name, err)
	}
	// A cgroup below the sandbox's that is no identity's (or any other) is refused.
	other := filepath.Join(root, "other")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	peers.id = inode(t, other)
	if name, err := r.Identity(client); err == nil || !strings.Contains(err.Error(), "neither the sandbox's") {
		t.Errorf("another cgroup: %q, %v; want an error", name, err)
	}
	r.peers = nil
	if _, err := r.Identity(client); !errors.Is(err, errNoIdentityKernel) {
		t.Errorf("without the kernel: %v, want errNoIdentityKernel", err)
	}
}
