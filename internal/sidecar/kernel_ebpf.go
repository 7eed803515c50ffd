package sidecar

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/ebpf"
	"github.com/airlock-dev/airlock/policy"
)

// ebpfEnforcer is the in-process eBPF enforcer behind the Enforcer interface.
type ebpfEnforcer struct {
	*ebpf.Enforcer
}

var _ Enforcer = ebpfEnforcer{}

// AttachEBPF attaches the in-process eBPF enforcer (package ebpf) to the sandbox's cgroup,
// or in pod mode to the pod's, with the sidecar's own container cgroup exempt. A pod cgroup
// that cannot be found is refused whatever the environment.
func AttachEBPF(spec KernelSpec) (Enforcer, error) {
	cgroup, exempt := spec.Cgroup, ""
	if spec.PodCgroup {
		pc, err := findPodCgroup(spec.CgroupRoot, spec.Logger)
		if err != nil {
			return nil, err
		}
		cgroup, exempt = pc.Pod, pc.Self
	}
	onDeny := spec.OnDeny
	idTCP := ebpfIdentityTCP(spec.IdentityTCP)
	if spec.PodCgroup {
		// In a pod without the node agent (which maps the containers' cgroups) nothing maps
		// them to identities for the kernel: raw TCP stays per sandbox there (docs/kernel.md).
		idTCP = nil
	}
	enf, err := ebpf.Open(ebpf.Config{
		Sandbox:      spec.Sandbox,
		Cgroup:       cgroup,
		ExemptCgroup: exempt,
		OwnLoopback:  spec.OwnLoopback && !spec.PodCgroup,
		Listeners:    ebpfListeners(spec.Listeners),
		CIDRs:        ebpfCIDRs(spec.CIDRs),
		Transparent:  ebpfTransparent(spec.Transparent),
		OnDeny:       func(ev ebpf.DenyEvent) { onDeny(denyAuditEvent(ev)) },
		Registerer:   spec.Registerer,
		Logger:       spec.Logger,
		RequireAll:   spec.RequirePacketGuard,
		Report:       spec.Report,
		Identities:   spec.Identities,
		IdentityTCP:  idTCP,
	})
	if err != nil {
		if errors.Is(err, ebpf.ErrInvalidConfig) {
			return nil, fmt.Errorf("kernel enforcement: %v", err)
		}
		// The kernel's features are probed only now: the probe loads a program per
		// feature (milliseconds at every start), and it names what is missing better
		// than a failed load does.
		if perr := ebpf.Probe(); perr != nil {
			return nil, Unavailable(perr)
		}
		return nil, Unavailable(err)
	}
	if ok, why := enf.PacketGuard(); !ok && why != nil {
		spec.Logger.WithField("error", oneLine(why)).Warn("packet sockets are not refused in the sandbox (needs the BPF LSM); production refuses to start without it unless --packet-guard best-effort")
	}
	return ebpfEnforcer{enf}, nil
}

// SetCIDRs implements Enforcer.
func (e ebpfEnforcer) SetCIDRs(rules []policy.CIDRRule) error {
	return e.Enforcer.SetCIDRs(ebpfCIDRs(rules))
}

// SetIdentityTCP implements identityEnforcer.
func (e ebpfEnforcer) SetIdentityTCP(rules map[string][]policy.CIDRRule) error {
	return e.Enforcer.SetIdentityTCP(ebpfIdentityTCP(rules))
}

var _ identityEnforcer = ebpfEnforcer{}

func ebpfIdentityTCP(rules map[string][]policy.CIDRRule) map[string][]ebpf.CIDRRule {
	out := make(map[string][]ebpf.CIDRRule, len(rules))
	for name, rs := range rules {
		out[name] = ebpfCIDRs(rs)
	}
	return out
}

// Counters implements Enforcer.
func (e ebpfEnforcer) Counters() (KernelCounters, error) {
	c, err := e.Enforcer.Counters()
	return KernelCounters(c), err
}

func ebpfListeners(ls []KernelListener) []ebpf.Listener {
	kinds := map[ListenerKind]ebpf.ListenerKind{
		ListenerProxy: ebpf.ListenerProxy, ListenerTransparent: ebpf.ListenerTransparent,
		ListenerDNS: ebpf.ListenerDNS, ListenerLLM: ebpf.ListenerLLM,
	}
	out := make([]ebpf.Listener, 0, len(ls))
	for _, l := range ls {
		proto := ebpf.TCP
		if l.UDP {
			proto = ebpf.UDP
		}
		out = append(out, ebpf.Listener{Addr: l.Addr, Proto: proto, Kind: kinds[l.Kind]})
	}
	return out
}

func ebpfCIDRs(rules []policy.CIDRRule) []ebpf.CIDRRule {
	out := make([]ebpf.CIDRRule, 0, len(rules))
	for _, r := range rules {
		out = append(out, ebpf.CIDRRule{Prefix: r.Prefix, Ports: r.Ports, Raw: r.Raw})
	}
	return out
}

func ebpfTransparent(t *KernelTransparent) *ebpf.Transparent {
	if t == nil {
		return nil
	}
	return &ebpf.Transparent{Addr4: t.Addr4, Ports: t.Ports}
}

// denyAuditEvent turns a kernel deny event into the contract's audit event.
func denyAuditEvent(ev ebpf.DenyEvent) audit.Event {
	e := audit.Event{
		Time: ev.Time, Kind: audit.KindConnect, Decision: audit.DecisionDeny,
		Reason:   string(policy.KernelReason(string(ev.Reason))),
		Identity: ev.Identity,
	}
	if ev.Report {
		e.Decision = audit.DecisionReport // would_deny follows from it
	}
	if ev.Dest.IsValid() {
		e.Destination = ev.Dest.String()
		e.Addr = ev.Dest.String()
	}
	detail := fmt.Sprintf("denied by the kernel (%s, proto %d)", ev.Hook, ev.Proto)
	if ev.Report {
		detail = fmt.Sprintf("allowed by the kernel in report mode; enforce would deny it (%s, proto %d)", ev.Hook, ev.Proto)
	}
	if ev.PID != 0 {
		detail += fmt.Sprintf(": pid %d (%s) uid %d", ev.PID, ev.Comm, ev.UID)
		e.Client = fmt.Sprintf("pid:%d", ev.PID)
	}
	if ev.Suppressed > 0 {
		detail += fmt.Sprintf("; %d more kernel denials not audited (rate limit)", ev.Suppressed)
	}
	e.Detail = detail
	return e
}

// findPodCgroup finds the pod's cgroup and the sidecar's own, or refuses with one line.
func findPodCgroup(root string, log *logrus.Logger) (ebpf.PodCgroups, error) {
	pc, err := ebpf.FindPodCgroup(root)
	if err != nil {
		return pc, fmt.Errorf("--pod-cgroup: cannot find this pod's cgroup: %s", oneLine(err))
	}
	if err := ebpf.CheckNodePinRoot(""); err != nil {
		return pc, fmt.Errorf("--pod-cgroup: %s", oneLine(err))
	}
	log.WithFields(logrus.Fields{"pod_cgroup": pc.Pod, "exempt_cgroup": pc.Self}).Info("pod mode: kernel enforcement goes on the pod's cgroup; this container's cgroup is exempt")
	if !strings.Contains(filepath.Base(pc.Pod), "pod") {
		// Kubelet names pod cgroups pod<UID> (cgroupfs) or kubepods-...-pod<UID>.slice
		// (systemd). Another name may mean the runtime put this process in a sub-cgroup of its
		// container's, and only this container is enforced.
		log.WithField("pod_cgroup", pc.Pod).Warn("pod mode: the parent of this container's cgroup is not named like a Kubernetes pod cgroup (pod<UID>); check that it holds the app containers")
	}
	// Pins of pods deleted from this node are nobody else's to remove.
	removed, err := ebpf.RemoveDefunct("")
	if len(removed) > 0 {
		log.WithField("sandboxes", removed).Info("pod mode: removed the pins of deleted pods")
	}
	if err != nil {
		log.WithField("error", oneLine(err)).Warn("pod mode: could not remove every deleted pod's pins")
	}
	return pc, nil
}
