package sidecar

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/ebpf"
	"github.com/airlock-dev/airlock/internal/node"
	"github.com/airlock-dev/airlock/policy"
)

// AttachNodeAgent returns the AttachFunc of `--node-agent`: kernel enforcement held by the
// node agent (`airlock node`), reached over the abstract unix socket name in the pod's
// network namespace (empty: node.SocketName) with node.Client. The sidecar needs no
// privilege for it. Transparent mode works through it too: each accepted connection's
// original destination is one request to the agent.
// Attaching waits up to wait for the agent to confirm enforcement of the pod, then returns
// an error wrapping ErrKernelUnavailable (production then refuses to start, so the pod
// never starts on a node without the agent). After the start a lost agent is redialled in
// the background and told the sidecar's current tables again; meanwhile every call fails
// with an error wrapping node.ErrUnreachable.
func AttachNodeAgent(name string, wait time.Duration) AttachFunc {
	return func(spec KernelSpec) (Enforcer, error) {
		cfg := node.ClientConfig{SocketName: name, Hello: helloOf(spec), Logger: spec.Logger}
		if cfg.Logger == nil {
			cfg.Logger = logrus.New()
		}
		if spec.OnDeny != nil {
			cfg.OnDeny = func(d node.DenyEvent) { spec.OnDeny(denyAuditEventOf(d)) }
		}
		c, err := node.Dial(cfg, wait)
		if err != nil {
			return nil, Unavailable(fmt.Errorf("%w (is the airlock-node DaemonSet running on this node?)", err))
		}
		a := agentEnforcer{c: c, containers: spec.IdentityContainers}
		if spec.Registerer != nil {
			if err := spec.Registerer.Register(newAgentCollector(a, spec.Sandbox)); err != nil {
				c.Close()
				return nil, fmt.Errorf("register kernel metrics: %w", err)
			}
		}
		return a, nil
	}
}

// helloOf builds the hello from the sidecar's kernel spec (node.Dial sets its version).
func helloOf(spec KernelSpec) node.Hello {
	h := node.Hello{CIDRs: nodeCIDRs(spec.CIDRs), Report: spec.Report, RequirePacketGuard: spec.RequirePacketGuard,
		Identities: spec.Identities}
	if spec.Identities {
		h.IdentityTCP = nodeIdentityTCP(spec.IdentityContainers, spec.IdentityTCP)
	}
	for _, l := range spec.Listeners {
		h.Listeners = append(h.Listeners, node.Listener{Addr: l.Addr.String(), UDP: l.UDP, Kind: string(l.Kind)})
	}
	if t := spec.Transparent; t != nil {
		h.Transparent = &node.Transparent{Addr4: t.Addr4.String(), Ports: t.Ports}
	}
	return h
}

// nodeCIDRs converts the policy's ranges. The result is never nil: an older agent reads
// the hello's "cidrs" as a list (see node's wire golden files).
func nodeCIDRs(rules []policy.CIDRRule) []node.CIDR {
	out := make([]node.CIDR, 0, len(rules))
	for _, r := range rules {
		out = append(out, node.CIDR{Prefix: r.Prefix.String(), Ports: r.Ports, Raw: r.Raw})
	}
	return out
}

// nodeIdentityTCP is the agent's table of each identity's raw TCP: which container is which
// identity, and each identity's rules (every identity of the policy listed, so that none
// falls back to the sandbox's). Never nil.
func nodeIdentityTCP(containers map[string]string, rules map[string][]policy.CIDRRule) *node.IdentityTCP {
	out := &node.IdentityTCP{Containers: map[string]string{}, Rules: map[string][]node.CIDR{}}
	maps.Copy(out.Containers, containers)
	for name, rs := range rules {
		out.Rules[name] = nodeCIDRs(rs)
	}
	return out
}

// agentEnforcer is the Enforcer of the node agent: node.Client, in the sidecar's types.
type agentEnforcer struct {
	c *node.Client
	// containers maps the pod's container names to identities (--identity-containers).
	containers map[string]string
}

var (
	_ Enforcer          = agentEnforcer{}
	_ podPeers          = agentEnforcer{}
	_ identityTCPSetter = agentEnforcer{}
	_ podUsage          = agentEnforcer{}
)

// SetIdentityTCP implements identityTCPSetter: the agent maps the pod's containers to their
// identities (a restarted one too) and holds each to its rules; nil (no identities) gives
// every container the sandbox's raw TCP again.
func (a agentEnforcer) SetIdentityTCP(rules map[string][]policy.CIDRRule) error {
	if rules == nil {
		return a.c.SetIdentityTCP(nil)
	}
	return a.c.SetIdentityTCP(nodeIdentityTCP(a.containers, rules))
}

// Allow implements Enforcer.
func (a agentEnforcer) Allow(addr netip.Addr, ports []uint16, until time.Time) error {
	return a.c.Allow(addr, ports, until)
}

// Revoke implements Enforcer.
func (a agentEnforcer) Revoke(addr netip.Addr, ports []uint16) error { return a.c.Revoke(addr, ports) }

// SetCIDRs implements Enforcer.
func (a agentEnforcer) SetCIDRs(rules []policy.CIDRRule) error { return a.c.SetCIDRs(nodeCIDRs(rules)) }

// SetReport implements Enforcer.
func (a agentEnforcer) SetReport(report bool) error { return a.c.SetReport(report) }

// OriginalDst implements Enforcer: the agent looks the connection up by its peer address.
func (a agentEnforcer) OriginalDst(c net.Conn) (netip.AddrPort, error) {
	ta, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("original destination of %v: not a TCP connection", c.RemoteAddr())
	}
	return a.c.OriginalDst(ta.AddrPort())
}

// SetIdentities implements identitySwitch.
func (a agentEnforcer) SetIdentities(on bool) error { return a.c.SetIdentities(on) }

// PeerContainer implements podPeers: the agent answers from the kernel's record of the
// connecting cgroup and the pod's containers.
func (a agentEnforcer) PeerContainer(peer netip.AddrPort) (string, error) {
	return a.c.PeerContainer(peer)
}

// QueryContainer implements podPeers, for a UDP query to the DNS filter.
func (a agentEnforcer) QueryContainer(client netip.AddrPort, id uint16) (string, error) {
	return a.c.QueryContainer(client, id)
}

// ContainerUsage implements podUsage: the agent reads the pod's containers' cgroups.
func (a agentEnforcer) ContainerUsage() ([]node.ContainerUsage, error) { return a.c.Usage() }

// Counters implements Enforcer. The node agent's protocol (version 1, strictly decoded
// both ways) carries no received-bytes counters: RxBytes and RxPackets are 0 through it.
func (a agentEnforcer) Counters() (KernelCounters, error) {
	c, err := a.c.Counters()
	return KernelCounters{Bytes: c.Bytes, Packets: c.Packets, Connections: c.Connections, Denies: c.Denies,
		EventsLost: c.EventsLost}, err
}

// Close implements Enforcer: it ends the connection; the agent keeps the pod enforced.
func (a agentEnforcer) Close() error { return a.c.Close() }

// denyAuditEventOf turns the agent's deny event into the contract's audit event.
func denyAuditEventOf(d node.DenyEvent) audit.Event {
	ev := ebpf.DenyEvent{Time: d.Time, Hook: ebpf.Hook(d.Hook), Reason: ebpf.DenyReason(d.Reason), PID: d.PID,
		UID: d.UID, Comm: d.Comm, Proto: d.Proto, Report: d.Report, Suppressed: d.Suppressed}
	if ap, err := netip.ParseAddrPort(d.Dest); err == nil {
		ev.Dest = ap
	}
	return denyAuditEvent(ev)
}
