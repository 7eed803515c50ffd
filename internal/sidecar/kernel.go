package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/airlock-dev/airlock/dnsfilter"
	"github.com/airlock-dev/airlock/ebpf"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/proxy"
	"golang.org/x/sys/unix"
)

// kernel is the sidecar's kernel enforcement on the sandbox cgroup, and the transparent
// listener that needs it.
type kernel struct {
	s *Sidecar

	enf           Enforcer     // nil without kernel enforcement
	transparentLn net.Listener // nil when transparent mode is off

	// mu guards gen, the generation of the last policy applied, and serialises applies.
	mu  sync.Mutex
	gen uint64

	closeOnce sync.Once
}

func (k *kernel) name() string { return "kernel enforcement" }

// start attaches kernel enforcement to --cgroup, or with --pod-cgroup to the pod's cgroup.
// Without either it does nothing. When the kernel cannot enforce, production refuses to
// start with one line; staging and development log a WARN and go on with the proxy and DNS
// filter only.
func (k *kernel) start(context.Context) error {
	cfg := &k.s.cfg
	if !cfg.kernelEnabled() {
		return nil
	}
	spec, err := k.spec()
	if err != nil {
		return err
	}
	enf, err := cfg.AttachKernel(spec)
	if errors.Is(err, ErrKernelUnavailable) {
		return k.unavailable(err)
	}
	if err != nil {
		return err
	}
	k.enf = enf
	if k.transparentLn != nil {
		k.s.self.AddListener(k.transparentLn)
	}
	k.mapIdentityCgroups(k.s.store.Current())
	return nil
}

// mapIdentityCgroups makes the policy's identity cgroups below a local sandbox's cgroup
// (--cgroup) and tells the kernel which identity each is, so their raw TCP rules hold from
// their first process on. In a pod the identities' cgroups are its containers', which the
// node agent reports (not here). A cgroup it cannot make is logged: that identity's tasks
// then get no raw TCP (fail closed).
func (k *kernel) mapIdentityCgroups(p *policy.Policy) {
	if _, ok := k.enf.(identityEnforcer); !ok || k.s.cfg.Cgroup == "" || len(p.IdentityNames()) == 0 {
		return
	}
	found, err := makeIdentityCgroups(k.s.cfg.Cgroup, p.IdentityNames(), ebpf.CgroupID)
	if err != nil {
		k.s.log.WithField("error", oneLine(err)).Warn("identity cgroups: their tasks get no raw TCP (protocol: tcp rules)")
	}
	k.setIdentityCgroups(found)
}

// setIdentityCgroups tells the kernel which cgroups are which identity's.
func (k *kernel) setIdentityCgroups(found map[uint64]string) {
	ie, ok := k.enf.(identityEnforcer)
	if !ok {
		return
	}
	if err := ie.SetIdentityCgroups(found); err != nil {
		k.s.log.WithField("error", oneLine(err)).Error("kernel: identity cgroups not updated")
	}
}

// unavailable refuses to start in production and otherwise warns and goes on without
// kernel enforcement.
func (k *kernel) unavailable(err error) error {
	k.closeListener()
	k.transparentLn = nil
	where := k.s.cfg.Cgroup
	switch {
	case k.s.cfg.NodeAgent:
		where = "the pod's cgroup (node agent)"
	case where == "":
		where = "the pod's cgroup"
	}
	line := oneLine(err)
	if k.s.cfg.Environment == "production" {
		return fmt.Errorf("--environment production: kernel enforcement on %s unavailable: %s", where, line)
	}
	k.s.log.WithField("cgroup", where).WithField("error", line).Warn("kernel enforcement unavailable; running with the proxy and DNS filter only (production would refuse to start)")
	return nil
}

// spec opens the transparent listener and describes what the kernel must allow.
func (k *kernel) spec() (KernelSpec, error) {
	cfg, s := &k.s.cfg, k.s
	pol := s.store.Current()
	spec := KernelSpec{
		Sandbox: cfg.Sandbox, Cgroup: cfg.Cgroup, PodCgroup: cfg.PodCgroup, CgroupRoot: cfg.CgroupRoot,
		Listeners:          []KernelListener{{Addr: addrOf(s.sockets.proxy), Kind: ListenerProxy}},
		CIDRs:              pol.CIDRRules(),
		Report:             pol.Mode() == policy.ModeReport,
		Identities:         len(pol.IdentityNames()) > 0,
		IdentityTCP:        identityTCP(pol),
		IdentityContainers: cfg.IdentityContainers,
		RequirePacketGuard: cfg.packetGuardRequired(),
		OnDeny:             s.audit.LogDenial, // a flood of kernel denials is summarised
		Registerer:         s.reg,
		Logger:             s.log,
	}
	if cfg.SandboxNetns != "" {
		if err := separateNetns(cfg.SandboxNetns); err != nil {
			return spec, err
		}
		spec.OwnLoopback = true
	}
	if cfg.TransparentAddr != Off {
		t, err := k.listenTransparent()
		if err != nil {
			return spec, err
		}
		spec.Transparent = t
		spec.Listeners = append(spec.Listeners, KernelListener{Addr: t.Addr4, Kind: ListenerTransparent})
	}
	for _, l := range []struct {
		addr string
		udp  []bool
		kind ListenerKind
	}{
		{cfg.DNSAddr, []bool{true, false}, ListenerDNS},
		{cfg.LLMAddr, []bool{false}, ListenerLLM},
	} {
		if l.addr == Off {
			continue
		}
		ap, err := listenAddrPort(l.addr)
		if err != nil {
			k.closeListener()
			return spec, fmt.Errorf("listener %s: %v", l.addr, err)
		}
		for _, udp := range l.udp {
			spec.Listeners = append(spec.Listeners, KernelListener{Addr: ap, UDP: udp, Kind: l.kind})
		}
	}
	return spec, nil
}

// listenTransparent opens --transparent-addr (IPv4 only: IPv4-mapped destinations are
// redirected to it too).
func (k *kernel) listenTransparent() (*KernelTransparent, error) {
	cfg := &k.s.cfg
	ln, err := net.Listen("tcp", cfg.TransparentAddr)
	if err != nil {
		return nil, fmt.Errorf("--transparent-addr: %v", err)
	}
	ap := addrOf(ln)
	if !ap.Addr().Unmap().Is4() {
		ln.Close()
		return nil, fmt.Errorf("--transparent-addr %s: use an IPv4 address (IPv4-mapped destinations are redirected to it too)", cfg.TransparentAddr)
	}
	ports, err := ParsePorts(cfg.TransparentPorts)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("--transparent-ports %q: %v", cfg.TransparentPorts, err)
	}
	k.transparentLn = ln
	return &KernelTransparent{Addr4: ap, Ports: ports}, nil
}

// originalDst is the proxy's OriginalDst: the enforcer, or nil without transparent mode.
// (A nil Enforcer in the interface would not be nil; this returns a true nil.)
func (k *kernel) originalDst() proxy.OriginalDestination {
	if k.enf == nil || k.transparentLn == nil {
		return nil
	}
	return k.enf
}

// allowMap is the DNS filter's AllowMap: the enforcer, or nil without kernel enforcement.
func (k *kernel) allowMap() dnsfilter.AllowMap {
	if k.enf == nil {
		return nil
	}
	return k.enf
}

// applyPolicy puts a reloaded policy's CIDR rules and mode into the kernel, unless a newer
// generation is already there.
func (k *kernel) applyPolicy(gen uint64, p *policy.Policy) {
	if k.enf == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if gen <= k.gen {
		k.s.log.WithField("generation", gen).Warn("kernel: refused a policy older than the one applied")
		return
	}
	k.gen = gen
	err := errors.Join(k.enf.SetCIDRs(p.CIDRRules()), k.enf.SetReport(p.Mode() == policy.ModeReport))
	// Each identity's raw TCP before the switch: identities that appear never have the
	// sandbox's raw TCP meanwhile.
	if ie, ok := k.enf.(identityTCPSetter); ok {
		err = errors.Join(err, ie.SetIdentityTCP(identityTCP(p)))
	}
	if is, ok := k.enf.(identitySwitch); ok {
		err = errors.Join(err, is.SetIdentities(len(p.IdentityNames()) > 0))
	}
	if err != nil {
		k.s.log.WithField("error", err.Error()).Error("kernel CIDR rules not updated after policy reload")
	}
	k.mapIdentityCgroups(p)
}

func (k *kernel) closeListener() {
	if k.transparentLn != nil {
		k.transparentLn.Close()
	}
}

// close releases the sidecar's handles; the pinned enforcement stays (fail closed).
func (k *kernel) close(context.Context) error {
	k.closeOnce.Do(func() {
		k.closeListener()
		if k.enf != nil {
			_ = k.enf.Close()
		}
	})
	return nil
}

// ParsePorts parses a port list such as "80,443".
func ParsePorts(s string) ([]uint16, error) {
	var out []uint16
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 16)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("want comma-separated ports 1-65535, e.g. %s", DefaultTransparentPorts)
		}
		out = append(out, uint16(n))
	}
	return out, nil
}

// listenAddrPort parses a listener address: "ip:port", or ":port" for every address.
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

// oneLine joins a multi-line error (errors.Join) into one line.
func oneLine(err error) string {
	if err == nil {
		return ""
	}
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
}

// separateNetns checks that path is a network namespace other than this process's own: only
// then is the sandbox's loopback its own, and allowing it cannot reach the sidecar's.
func separateNetns(path string) error {
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		return fmt.Errorf("--sandbox-netns %s: %w", path, err)
	}
	if fs.Type != unix.NSFS_MAGIC {
		return fmt.Errorf("--sandbox-netns %s: not a namespace file (nsfs), e.g. /run/netns/NAME", path)
	}
	theirs, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("--sandbox-netns %s: %w", path, err)
	}
	// The calling thread's, not the process's (/proc/self is the main thread's): when the
	// sidecar runs inside exec --ephemeral's process, a thread locked to a goroutine may be in
	// the sandbox's namespace, the main thread included; every thread that can run this
	// goroutine, and so open the sidecar's listeners, is in the process's own.
	ours, err := os.Stat("/proc/thread-self/ns/net")
	if err != nil {
		return fmt.Errorf("--sandbox-netns: this process's network namespace: %w", err)
	}
	if os.SameFile(theirs, ours) {
		return fmt.Errorf("--sandbox-netns %s is the sidecar's own network namespace: the sandbox would share its loopback (and the admin listener); leave the flag out", path)
	}
	return nil
}
