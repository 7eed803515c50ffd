package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/dnsfilter"
	"github.com/airlock-dev/airlock/ebpf"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/proxy"
)

// The enforcer is what the DNS filter writes allowed answers into.
var _ dnsfilter.AllowMap = (*ebpf.Enforcer)(nil)

// The enforcer answers the transparent listener's question.
var _ proxy.OriginalDestination = (*ebpf.Enforcer)(nil)

// defaultTransparentPorts are the TCP ports redirected to the transparent listener.
const defaultTransparentPorts = "80,443"

// kernel is the sidecar's kernel enforcement on the sandbox cgroup.
type kernel struct {
	enf           *ebpf.Enforcer
	transparentLn net.Listener // nil when transparent mode is off
}

// startKernel attaches kernel enforcement to --cgroup, or with --pod-cgroup to the pod's
// cgroup with the sidecar's own cgroup exempt. Without either it does nothing. When the
// kernel cannot enforce (probe or attach fails), production refuses to start with one line;
// staging and development log a WARN and go on with the proxy and DNS filter only (nil
// kernel, nil error). A pod cgroup that cannot be found is refused in every environment.
func startKernel(cfg *runConfig, pol *policy.Policy, log *logrus.Logger, al audit.Sink, reg prometheus.Registerer, proxyLn net.Listener) (*kernel, error) {
	if cfg.cgroup == "" && !cfg.pod.enabled {
		return nil, nil
	}
	cgroup := cfg.cgroup
	unavailable := func(err error) (*kernel, error) {
		line := oneLine(err)
		where := cgroup
		if where == "" {
			where = "the pod's cgroup"
		}
		if cfg.environment == "production" {
			return nil, failf("--environment production: kernel enforcement on %s unavailable: %s", where, line)
		}
		log.WithField("cgroup", where).WithField("error", line).Warn("kernel enforcement unavailable; running with the proxy and DNS filter only (production would refuse to start)")
		return nil, nil
	}
	exempt := ""
	if cfg.pod.enabled {
		pc, err := findPodCgroup(cfg, log)
		if err != nil {
			return nil, err
		}
		cgroup, exempt = pc.Pod, pc.Self
	}
	k := &kernel{}
	listeners := []ebpf.Listener{{Addr: addrPortOf(proxyLn.Addr()), Proto: ebpf.TCP, Kind: ebpf.ListenerProxy}}
	var transparent *ebpf.Transparent
	if cfg.transparentAddr != "off" {
		ln, err := net.Listen("tcp", cfg.transparentAddr)
		if err != nil {
			return nil, failf("--transparent-addr: %v", err)
		}
		ap := addrPortOf(ln.Addr())
		if !ap.Addr().Unmap().Is4() {
			ln.Close()
			return nil, failf("--transparent-addr %s: use an IPv4 address (IPv4-mapped destinations are redirected to it too)", cfg.transparentAddr)
		}
		ports, err := parsePorts(cfg.transparentPorts)
		if err != nil {
			ln.Close()
			return nil, failf("--transparent-ports %q: %v", cfg.transparentPorts, err)
		}
		k.transparentLn = ln
		transparent = &ebpf.Transparent{Addr4: ap, Ports: ports}
		listeners = append(listeners, ebpf.Listener{Addr: ap, Proto: ebpf.TCP, Kind: ebpf.ListenerTransparent})
	}
	for _, l := range []struct {
		addr   string
		protos []ebpf.Proto
		kind   ebpf.ListenerKind
	}{
		{cfg.dnsAddr, []ebpf.Proto{ebpf.UDP, ebpf.TCP}, ebpf.ListenerDNS},
		{cfg.llmAddr, []ebpf.Proto{ebpf.TCP}, ebpf.ListenerLLM},
	} {
		if l.addr == "off" {
			continue
		}
		ap, err := listenAddrPort(l.addr)
		if err != nil {
			k.closeListener()
			return nil, failf("listener %s: %v", l.addr, err)
		}
		for _, p := range l.protos {
			listeners = append(listeners, ebpf.Listener{Addr: ap, Proto: p, Kind: l.kind})
		}
	}
	enf, err := ebpf.Open(ebpf.Config{
		Sandbox:      cfg.sandbox,
		Cgroup:       cgroup,
		ExemptCgroup: exempt,
		Listeners:    listeners,
		CIDRs:        policyCIDRs(pol),
		Transparent:  transparent,
		OnDeny:       func(ev ebpf.DenyEvent) { al.Log(denyAuditEvent(ev)) },
		Registerer:   reg,
		Logger:       log,
		RequireAll:   cfg.packetGuardRequired(),
		Report:       pol.Mode() == policy.ModeReport,
	})
	if err != nil {
		k.closeListener()
		if errors.Is(err, ebpf.ErrInvalidConfig) {
			return nil, failf("kernel enforcement: %v", err)
		}
		// The kernel's features are probed only now: the probe loads a program per
		// feature (milliseconds at every start), and it names what is missing better
		// than a failed load does.
		if perr := ebpf.Probe(); perr != nil {
			return unavailable(perr)
		}
		return unavailable(err)
	}
	k.enf = enf
	if ok, why := enf.PacketGuard(); !ok && why != nil {
		log.WithField("error", oneLine(why)).Warn("packet sockets are not refused in the sandbox (needs the BPF LSM); production refuses to start without it unless --packet-guard best-effort")
	}
	return k, nil
}

// packetGuardRequired says whether a missing packet socket guard (BPF LSM) stops the start:
// --packet-guard auto means yes in production only.
func (c *runConfig) packetGuardRequired() bool {
	return c.packetGuard == "required" || (c.packetGuard == "auto" && c.environment == "production")
}

// validateKernel checks the kernel enforcement flags before anything starts.
func validateKernel(c *runConfig) error {
	switch c.packetGuard {
	case "auto", "required", "best-effort":
	default:
		return failf("--packet-guard %q: use auto, required or best-effort", c.packetGuard)
	}
	if _, err := parsePorts(c.transparentPorts); err != nil {
		return failf("--transparent-ports %q: %v", c.transparentPorts, err)
	}
	if err := validatePod(c); err != nil {
		return err
	}
	if (c.cgroup != "" || c.pod.enabled) && c.transparentAddr != "off" {
		ap, err := listenAddrPort(c.transparentAddr)
		if err != nil || !ap.Addr().Unmap().Is4() {
			return failf("--transparent-addr %q: want an IPv4 ip:port (IPv4-mapped destinations are redirected to it too) or off", c.transparentAddr)
		}
	}
	return nil
}

// listener is the transparent listener, or nil.
func (k *kernel) listener() net.Listener {
	if k == nil {
		return nil
	}
	return k.transparentLn
}

// originalDst is the proxy's OriginalDst: the enforcer, or nil without transparent mode.
func (k *kernel) originalDst() proxy.OriginalDestination {
	if k == nil || k.transparentLn == nil {
		return nil
	}
	return k.enf
}

// allowMap is the DNS filter's AllowMap: the enforcer, or nil without kernel enforcement.
// (A nil *ebpf.Enforcer in the interface would not be nil; this returns a true nil.)
func (k *kernel) allowMap() dnsfilter.AllowMap {
	if k == nil {
		return nil
	}
	return k.enf
}

// reload applies a reloaded policy's CIDR rules to the kernel maps.
func (k *kernel) reload(pol *policy.Policy) error {
	if k == nil {
		return nil
	}
	return errors.Join(k.enf.SetCIDRs(policyCIDRs(pol)), k.enf.SetReport(pol.Mode() == policy.ModeReport))
}

func (k *kernel) closeListener() {
	if k != nil && k.transparentLn != nil {
		k.transparentLn.Close()
	}
}

// close releases the sidecar's handles; the pinned enforcement stays (fail closed).
func (k *kernel) close() {
	if k == nil {
		return
	}
	k.closeListener()
	if k.enf != nil {
		_ = k.enf.Close()
	}
}

// policyCIDRs lists the policy's CIDR rules for the kernel: protocol tcp rules are raw TCP
// (never redirected), the others are reachable on their ports like DNS-learned addresses.
func policyCIDRs(pol *policy.Policy) []ebpf.CIDRRule {
	var out []ebpf.CIDRRule
	for _, r := range pol.Rules() {
		if len(r.CIDRs) == 0 {
			continue
		}
		ports := r.Ports
		if len(ports) == 0 {
			ports = []int{80, 443}
		}
		p16 := make([]uint16, 0, len(ports))
		for _, p := range ports {
			p16 = append(p16, uint16(p))
		}
		for _, c := range r.CIDRs {
			pfx, err := netip.ParsePrefix(c)
			if err != nil {
				continue // the loader validated every CIDR; nothing to do with an impossible one
			}
			out = append(out, ebpf.CIDRRule{Prefix: pfx, Ports: p16, Raw: r.Protocol == policy.ProtocolTCP})
		}
	}
	return out
}

// denyAuditEvent turns a kernel deny event into the contract's audit event.
func denyAuditEvent(ev ebpf.DenyEvent) audit.Event {
	e := audit.Event{
		Time: ev.Time, Kind: audit.KindConnect, Decision: audit.DecisionDeny,
		Reason: string(policy.KernelReason(string(ev.Reason))),
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

// parsePorts parses "80,443".
func parsePorts(s string) ([]uint16, error) {
	var out []uint16
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 16)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("want comma-separated ports 1-65535, e.g. %s", defaultTransparentPorts)
		}
		out = append(out, uint16(n))
	}
	return out, nil
}

// listenAddrPort parses a listener flag: "ip:port", or ":port" for every address.
func listenAddrPort(s string) (netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("want ip:port: %w", err)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	return netip.ParseAddrPort(net.JoinHostPort(host, port))
}

func addrPortOf(a net.Addr) netip.AddrPort {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.AddrPort()
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap
}

// oneLine joins a multi-line error (errors.Join) into one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
}
