package sidecar

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"sync"

	"github.com/airlock-dev/airlock/dnsfilter"
	"github.com/airlock-dev/airlock/ebpf"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/proxy"
)

// peerEnforcer is an Enforcer that can tell which cgroup's task connected a connection the
// sidecar accepted: the in-process eBPF one (a local sandbox).
type peerEnforcer interface {
	PeerCgroup(peer netip.AddrPort) (uint64, error)
	// QueryCgroup is PeerCgroup for a UDP query to the DNS filter, by its message ID.
	QueryCgroup(client netip.AddrPort, id uint16) (uint64, error)
	identitySwitch
}

// podPeers is an Enforcer that can tell which container of the pod connected a connection
// the sidecar accepted: the node agent's.
type podPeers interface {
	PeerContainer(peer netip.AddrPort) (string, error)
	// QueryContainer is PeerContainer for a UDP query to the DNS filter, by its message ID.
	QueryContainer(client netip.AddrPort, id uint16) (string, error)
	identitySwitch
}

// identitySwitch is an Enforcer that switches the kernel's identity rule (an identity's
// tasks reach out only through the sidecar) on or off as the policy has identities or not.
type identitySwitch interface {
	SetIdentities(on bool) error
}

// identityTCPSetter is an Enforcer that holds each identity to its own protocol: tcp rules
// (the in-process eBPF one, and the node agent's, which maps the pod's containers itself).
type identityTCPSetter interface {
	// SetIdentityTCP replaces every identity's protocol: tcp rules, by identity name; nil
	// when the policy has no identities.
	SetIdentityTCP(rules map[string][]policy.CIDRRule) error
}

// identityEnforcer is an identityTCPSetter whose identity cgroups the sidecar maps (the
// in-process eBPF one, in a local sandbox).
type identityEnforcer interface {
	identityTCPSetter
	// SetIdentityCgroups replaces which cgroup ids are which identity's.
	SetIdentityCgroups(cgroups map[uint64]string) error
}

// identityTCP lists each identity's protocol: tcp rules, for the kernel; nil when the
// policy has no identities.
func identityTCP(p *policy.Policy) map[string][]policy.CIDRRule {
	if len(p.IdentityNames()) == 0 {
		return nil
	}
	out := map[string][]policy.CIDRRule{}
	for _, name := range p.IdentityNames() {
		ip, _ := p.Identity(name)
		for _, r := range ip.CIDRRules() {
			if r.Raw {
				out[name] = append(out[name], r)
			}
		}
	}
	return out
}

// makeIdentityCgroups makes each identity's cgroup v2 directory below the sandbox's
// (`sandbox exec --as` makes the same, and finds it made) and returns their ids by name. The
// sidecar makes them so that the kernel knows each identity's cgroup, and its raw TCP, before
// the identity's first process runs. A directory that cannot be made or read is left out
// (its tasks then get no raw TCP) and its error returned, joined with the others.
func makeIdentityCgroups(cgroup string, names []string, cgID func(string) (uint64, error)) (map[uint64]string, error) {
	out := map[uint64]string{}
	var errs []error
	for _, name := range names {
		dir := filepath.Join(cgroup, policy.IdentityCgroupDir(name))
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			errs = append(errs, fmt.Errorf("make identity %s's cgroup: %w", name, err))
			continue
		}
		id, err := cgID(dir)
		if err != nil {
			errs = append(errs, fmt.Errorf("identity %s's cgroup: %w", name, err))
			continue
		}
		out[id] = name
	}
	return out, errors.Join(errs...)
}

// sandboxIdentities tells the identity of a connection (proxy, model API) and of a DNS query.
type sandboxIdentities interface {
	proxy.Identities
	dnsfilter.Identities
}

// errNoIdentityKernel is why a policy's identities cannot be told apart: no kernel
// enforcement that records connecting cgroups.
var errNoIdentityKernel = errors.New("no kernel enforcement on the sandbox's cgroup (--cgroup, or the node agent in a pod) records which cgroup connected, so identities cannot be told apart")

// identities maps the cgroup that connected (from the kernel) to an identity of the policy:
// the sandbox's cgroup itself is the sandbox's own policy (""), its child
// policy.IdentityCgroupDir(NAME) is identity NAME, and any other cgroup is unknown.
type identities struct {
	cgroup string                       // the sandbox's cgroup v2 directory
	peers  peerEnforcer                 // nil: identities cannot be told apart
	policy func() *policy.Policy        // the policy in force
	cgID   func(string) (uint64, error) // a cgroup directory's id
	// onScan, when set, is told the identity cgroups (not the sandbox's) a scan found, for
	// the kernel to map a remade one.
	onScan func(map[uint64]string)

	// mu guards byID, the cgroup ids of the sandbox's cgroup and of the identity cgroups
	// that existed at the last scan.
	mu   sync.Mutex
	byID map[uint64]string
}

var (
	_ proxy.Identities     = (*identities)(nil)
	_ dnsfilter.Identities = (*identities)(nil)
)

// Identity implements proxy.Identities.
func (r *identities) Identity(client netip.AddrPort) (string, error) {
	if r.peers == nil {
		return "", errNoIdentityKernel
	}
	id, err := r.peers.PeerCgroup(client)
	if err != nil {
		return "", err
	}
	return r.nameOf(id)
}

// QueryIdentity implements dnsfilter.Identities: a TCP query's identity is its connection's,
// a UDP query's the one the kernel recorded for it.
func (r *identities) QueryIdentity(client netip.AddrPort, msgID uint16, tcp bool) (string, error) {
	if tcp {
		return r.Identity(client)
	}
	if r.peers == nil {
		return "", errNoIdentityKernel
	}
	id, err := r.peers.QueryCgroup(client, msgID)
	if err != nil {
		return "", err
	}
	return r.nameOf(id)
}

// nameOf returns the identity of cgroup id. A cgroup id not seen before makes it look at the
// identity cgroups again (exec --as makes them when first used; a deleted and remade one has
// a new id).
func (r *identities) nameOf(id uint64) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if name, ok := r.byID[id]; ok {
		return name, nil
	}
	r.byID = r.scan()
	if r.onScan != nil {
		found := maps.Clone(r.byID)
		maps.DeleteFunc(found, func(_ uint64, name string) bool { return name == "" })
		r.onScan(found)
	}
	if name, ok := r.byID[id]; ok {
		return name, nil
	}
	return "", fmt.Errorf("cgroup %d is neither the sandbox's (%s) nor an identity's below it", id, r.cgroup)
}

// scan reads the ids of the sandbox's cgroup and of each identity's cgroup that exists.
func (r *identities) scan() map[uint64]string {
	out := make(map[uint64]string)
	if id, err := r.cgID(r.cgroup); err == nil {
		out[id] = ""
	}
	for _, name := range r.policy().IdentityNames() {
		if id, err := r.cgID(filepath.Join(r.cgroup, policy.IdentityCgroupDir(name))); err == nil {
			out[id] = name
		}
	}
	return out
}

// podIdentities maps the container that connected (the node agent tells, from the kernel's
// record and the pod's containers) to an identity: a container --identity-containers names
// is its identity, any other container of the pod the sandbox's own policy (""), and a
// connection the agent cannot tell is an error (identity_unknown).
type podIdentities struct {
	peers      podPeers          // nil: identities cannot be told apart
	containers map[string]string // container name to identity
}

var (
	_ proxy.Identities     = (*podIdentities)(nil)
	_ dnsfilter.Identities = (*podIdentities)(nil)
)

// Identity implements proxy.Identities.
func (r *podIdentities) Identity(client netip.AddrPort) (string, error) {
	if r.peers == nil {
		return "", errNoIdentityKernel
	}
	c, err := r.peers.PeerContainer(client)
	if err != nil {
		return "", err
	}
	return r.containers[c], nil
}

// QueryIdentity implements dnsfilter.Identities, like identities.QueryIdentity.
func (r *podIdentities) QueryIdentity(client netip.AddrPort, msgID uint16, tcp bool) (string, error) {
	if tcp {
		return r.Identity(client)
	}
	if r.peers == nil {
		return "", errNoIdentityKernel
	}
	c, err := r.peers.QueryContainer(client, msgID)
	if err != nil {
		return "", err
	}
	return r.containers[c], nil
}

// identitiesOf is the proxy's, the DNS filter's and the model API's Identities: the kernel lookup (a local
// sandbox's cgroups, or a pod's containers through the node agent), which refuses every
// connection when there is no kernel to ask (they ask only when the policy has
// identities). warn logs that case once at start.
func (s *Sidecar) identitiesOf(warn bool) sandboxIdentities {
	if s.cfg.NodeAgent {
		r := &podIdentities{containers: s.cfg.IdentityContainers}
		if pp, ok := s.kernel.enf.(podPeers); ok {
			r.peers = pp
		}
		s.warnNoIdentityKernel(warn && r.peers == nil)
		return r
	}
	r := &identities{cgroup: s.cfg.Cgroup, policy: s.store.Current, cgID: ebpf.CgroupID}
	if pe, ok := s.kernel.enf.(peerEnforcer); ok && s.cfg.Cgroup != "" {
		r.peers = pe
		r.onScan = s.kernel.setIdentityCgroups
	}
	s.warnNoIdentityKernel(warn && r.peers == nil)
	return r
}

func (s *Sidecar) warnNoIdentityKernel(noKernel bool) {
	if noKernel && len(s.store.Current().IdentityNames()) > 0 {
		s.log.Warn("the policy has identities but " + errNoIdentityKernel.Error() + ": every request is refused (identity_unknown)")
	}
}
