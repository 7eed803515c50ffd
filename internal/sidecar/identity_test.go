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

// The sidecar makes each identity's cgroup and maps it, and gives the kernel each
// identity's raw TCP rules: its own, or the sandbox's when it has no egress of its own.
func TestIdentityCgroupsAndTCP(t *testing.T) {
	pol, err := policy.Parse("p.yaml", []byte(`apiVersion: airlock/v1
kind: EgressPolicy
metadata: {name: p}
spec:
  egress:
    - {name: a, hosts: [a.test]}
    - {name: ssh, cidrs: [198.18.7.0/24], ports: [22], protocol: tcp}
  identities:
    reviewer: {egress: [{name: a, hosts: [a.test]}]}
    author: {egress: [{name: one, cidrs: [198.18.7.5/32], ports: [22], protocol: tcp}]}
    plain: {}
`))
	if err != nil {
		t.Fatal(err)
	}
	tcp := identityTCP(pol)
	if got := tcp["author"]; len(got) != 1 || got[0].Prefix.String() != "198.18.7.5/32" {
		t.Errorf("author's raw TCP = %v, want 198.18.7.5/32", got)
	}
	if got := tcp["plain"]; len(got) != 1 || got[0].Prefix.String() != "198.18.7.0/24" {
		t.Errorf("plain's raw TCP = %v, want the sandbox's 198.18.7.0/24", got)
	}
	if got := tcp["reviewer"]; len(got) != 0 {
		t.Errorf("reviewer's raw TCP = %v, want none", got)
	}

	root := t.TempDir()
	// One identity's directory exists already (exec --as made it): it is mapped, not remade.
	pre := filepath.Join(root, policy.IdentityCgroupDir("author"))
	if err := os.Mkdir(pre, 0o755); err != nil {
		t.Fatal(err)
	}
	ino := func(p string) (uint64, error) {
		fi, err := os.Stat(p)
		if err != nil {
			return 0, err
		}
		return fi.Sys().(*syscall.Stat_t).Ino, nil
	}
	found, err := makeIdentityCgroups(root, pol.IdentityNames(), ino)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 3 || found[inode(t, pre)] != "author" {
		t.Errorf("found %v, want the three identities, author's at its existing directory", found)
	}
	for _, name := range pol.IdentityNames() {
		if found[inode(t, filepath.Join(root, policy.IdentityCgroupDir(name)))] != name {
			t.Errorf("%s's cgroup is not mapped to it: %v", name, found)
		}
	}
	// A cgroup that cannot be made is left out, and said.
	found, err = makeIdentityCgroups(filepath.Join(root, "missing"), []string{"author"}, ino)
	if err == nil || len(found) != 0 {
		t.Errorf("under a missing cgroup: %v, %v; want an error and nothing mapped", found, err)
	}
}
