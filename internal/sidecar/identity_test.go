package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/airlock-dev/airlock/policy"
)

// fakePeers answers PeerCgroup with the id it was set to, and QueryCgroup with query's (an
// error for 0).
type fakePeers struct{ id, query uint64 }

func (f *fakePeers) PeerCgroup(netip.AddrPort) (uint64, error) { return f.id, nil }
func (f *fakePeers) SetIdentities(bool) error                  { return nil }
func (f *fakePeers) QueryCgroup(netip.AddrPort, uint16) (uint64, error) {
	if f.query == 0 {
		return 0, errors.New("no record")
	}
	return f.query, nil
}

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
	// A DNS query over TCP is its connection's; over UDP, the kernel's record of the query.
	peers.id, peers.query = inode(t, root), inode(t, dir)
	if name, err := r.QueryIdentity(client, 7, true); err != nil || name != "" {
		t.Errorf("a TCP query from the sandbox's cgroup: %q, %v; want \"\"", name, err)
	}
	if name, err := r.QueryIdentity(client, 7, false); err != nil || name != "reviewer" {
		t.Errorf("a UDP query from the identity's cgroup: %q, %v; want reviewer", name, err)
	}
	peers.query = 0
	if name, err := r.QueryIdentity(client, 7, false); err == nil {
		t.Errorf("a UDP query without a record: %q, want an error", name)
	}
	r.peers = nil
	if _, err := r.Identity(client); !errors.Is(err, errNoIdentityKernel) {
		t.Errorf("without the kernel: %v, want errNoIdentityKernel", err)
	}
	if _, err := r.QueryIdentity(client, 7, false); !errors.Is(err, errNoIdentityKernel) {
		t.Errorf("a UDP query without the kernel: %v, want errNoIdentityKernel", err)
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

// fakePodPeers answers PeerContainer with the container it was set to, or its error, and
// QueryContainer with query.
type fakePodPeers struct {
	container, query string
	err              error
}

func (f *fakePodPeers) PeerContainer(netip.AddrPort) (string, error) { return f.container, f.err }
func (f *fakePodPeers) SetIdentities(bool) error                     { return nil }
func (f *fakePodPeers) QueryContainer(netip.AddrPort, uint16) (string, error) {
	return f.query, f.err
}

// TestPodIdentitiesByContainer: in a pod, the container the node agent names is mapped by
// --identity-containers; a container not mapped is the sandbox's own policy, and a
// connection the agent cannot tell is refused.
func TestPodIdentitiesByContainer(t *testing.T) {
	peers := &fakePodPeers{}
	r := &podIdentities{peers: peers, containers: map[string]string{"reviewer": "reviewer", "author": "author", "helper": "author"}}
	client := netip.MustParseAddrPort("127.0.0.1:40000")
	for _, tc := range []struct{ container, want string }{
		{"reviewer", "reviewer"}, {"author", "author"}, {"helper", "author"}, {"tools", ""},
	} {
		peers.container = tc.container
		if got, err := r.Identity(client); err != nil || got != tc.want {
			t.Errorf("container %s: %q, %v; want %q", tc.container, got, err, tc.want)
		}
	}
	// A DNS query: over TCP its connection's container, over UDP the query's.
	peers.container, peers.query = "tools", "reviewer"
	if got, err := r.QueryIdentity(client, 7, true); err != nil || got != "" {
		t.Errorf("a TCP query from tools: %q, %v; want \"\"", got, err)
	}
	if got, err := r.QueryIdentity(client, 7, false); err != nil || got != "reviewer" {
		t.Errorf("a UDP query from reviewer: %q, %v; want reviewer", got, err)
	}
	peers.err = errors.New("cgroup 42 of the connection is no container's of the pod")
	if got, err := r.Identity(client); err == nil || got != "" {
		t.Errorf("an unknown cgroup: %q, %v; want an error", got, err)
	}
	if got, err := r.QueryIdentity(client, 7, false); err == nil || got != "" {
		t.Errorf("a UDP query of an unknown cgroup: %q, %v; want an error", got, err)
	}
	r.peers = nil
	if _, err := r.Identity(client); !errors.Is(err, errNoIdentityKernel) {
		t.Errorf("without the node agent: %v, want errNoIdentityKernel", err)
	}
}

func TestIdentityContainersNeedTheNodeAgent(t *testing.T) {
	c := Config{IdentityContainers: map[string]string{"reviewer": "reviewer"}, PacketGuard: "auto", TransparentPorts: DefaultTransparentPorts, TransparentAddr: Off}
	if err := c.validateKernel(); err == nil || !strings.Contains(err.Error(), "--identity-containers is for a pod with --node-agent") {
		t.Errorf("without --node-agent: %v", err)
	}
	c.NodeAgent = true
	if err := c.validateKernel(); err != nil && strings.Contains(err.Error(), "identity-containers") {
		t.Errorf("with --node-agent: %v", err)
	}
}

// podAgent is a node agent's enforcer for TestPodIdentitiesThroughTheSidecar: it names the
// container it is set to for every connection (as the agent would from the kernel's record).
type podAgent struct {
	fakeEnforcer
	// mu guards container and err.
	mu        sync.Mutex
	container string
	err       error
	// identities is the last SetIdentities.
	identities atomic.Bool
}

func (a *podAgent) set(container string, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.container, a.err = container, err
}

func (a *podAgent) PeerContainer(netip.AddrPort) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.container, a.err
}

// QueryContainer names the same container for a UDP DNS query.
func (a *podAgent) QueryContainer(client netip.AddrPort, _ uint16) (string, error) {
	return a.PeerContainer(client)
}

func (a *podAgent) SetIdentities(on bool) error { a.identities.Store(on); return nil }

const podIdentityPolicy = `apiVersion: airlock/v1
kind: EgressPolicy
metadata: {name: pod-identities}
spec:
  egress:
    - name: git
      hosts: [git.test]
  identities:
    reviewer:
      egress:
        - name: git-read
          hosts: [git.test]
          http: [{methods: [GET]}]
    author: {}
`

// TestPodIdentitiesThroughTheSidecar: a sidecar with --node-agent and --identity-containers
// decides each request by the identity of the container the agent names: the reviewer
// container's POST is refused naming reviewer, a container not mapped is the pod's own
// policy, and a connection the agent cannot tell is identity_unknown. The hello asks the
// kernel's identity rule.
func TestPodIdentitiesThroughTheSidecar(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "policy.yaml")
	writePolicy(t, file, podIdentityPolicy+"\n")
	agent := &podAgent{}
	var hello KernelSpec
	cfg := testConfig(t, file, &syncBuffer{})
	cfg.NodeAgent, cfg.IdentityContainers = true, map[string]string{"reviewer": "reviewer", "author": "author"}
	cfg.AttachKernel = func(spec KernelSpec) (Enforcer, error) { hello = spec; return agent, nil }
	s := startSidecar(t, cfg)
	if !hello.Identities {
		t.Error("the kernel spec (the agent's hello) does not ask for the identity rule")
	}
	if hello.IdentityTCP == nil || hello.IdentityContainers["reviewer"] != "reviewer" {
		t.Errorf("the kernel spec (the agent's hello) lacks the identities' raw TCP (%v) or containers (%v)", hello.IdentityTCP, hello.IdentityContainers)
	}
	client := proxyClient(s.Addrs().Proxy)
	denial := func(container string, err error, method string) (int, string, string) {
		t.Helper()
		agent.set(container, err)
		req, _ := http.NewRequest(method, "http://git.test/repo", nil)
		resp, rerr := client.Do(req)
		if rerr != nil {
			t.Fatalf("%s %s: %v", container, method, rerr)
		}
		defer resp.Body.Close()
		var d struct{ Reason, Identity string }
		_ = json.NewDecoder(resp.Body).Decode(&d)
		return resp.StatusCode, d.Reason, d.Identity
	}
	if code, reason, id := denial("reviewer", nil, "POST"); code != 403 || reason != "method_not_allowed" || id != "reviewer" {
		t.Errorf("reviewer POST: %d %s identity %q, want 403 method_not_allowed naming reviewer", code, reason, id)
	}
	// author and the unmapped container get past the method rule; the upstream is out of
	// reach (no resolver answers git.test), so anything but a policy refusal will do.
	for _, c := range []string{"author", "tools"} {
		if code, reason, _ := denial(c, nil, "POST"); code == 403 {
			t.Errorf("%s POST: refused (%s), want it past the policy", c, reason)
		}
	}
	if code, reason, _ := denial("", errors.New("cgroup 7 of the connection is no container's of the pod"), "GET"); code != 403 || reason != "identity_unknown" {
		t.Errorf("a connection the agent cannot tell: %d %s, want 403 identity_unknown", code, reason)
	}
}

// TestPodIdentitiesRefuseAnUndefinedIdentity: a sidecar whose --identity-containers names an
// identity the policy does not define refuses to start, naming the container and identity.
func TestPodIdentitiesRefuseAnUndefinedIdentity(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.yaml")
	writePolicy(t, file, podIdentityPolicy+"\n")
	cfg := testConfig(t, file, &syncBuffer{})
	cfg.NodeAgent, cfg.IdentityContainers = true, map[string]string{"reviewer": "admin"}
	cfg.AttachKernel = func(KernelSpec) (Enforcer, error) { return &podAgent{}, nil }
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Start(context.Background())
	if err == nil {
		s.Close()
		t.Fatal("started with an identity the policy lacks")
	}
	if !strings.Contains(err.Error(), `container "reviewer" is mapped to identity "admin", which policy "pod-identities" does not define`) {
		t.Errorf("start: %v", err)
	}
}
