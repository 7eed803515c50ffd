package sidecar

import (
	"errors"
	"net"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// Enforcer is kernel enforcement on the sandbox's cgroup, as the sidecar uses it. AttachEBPF
// returns the in-process eBPF implementation; a node agent that enforces for many pods can be
// another. Every method is safe for concurrent use.
type Enforcer interface {
	// Allow makes addr reachable on ports until the given time; the DNS filter calls it for
	// every address of an allowed answer before the answer leaves. An existing entry is
	// extended, never shortened.
	Allow(addr netip.Addr, ports []uint16, until time.Time) error
	// Revoke removes addr for those ports.
	Revoke(addr netip.Addr, ports []uint16) error
	// SetCIDRs replaces the policy's address ranges (on a reload).
	SetCIDRs(rules []policy.CIDRRule) error
	// SetReport switches report mode on or off (on a reload).
	SetReport(report bool) error
	// OriginalDst returns where a connection accepted by the transparent listener was
	// going.
	OriginalDst(c net.Conn) (netip.AddrPort, error)
	// Counters reads the sandbox's kernel counters.
	Counters() (KernelCounters, error)
	// Close releases the sidecar's handles; enforcement itself stays (fail closed).
	Close() error
}

// KernelCounters are the kernel's per-sandbox counters.
type KernelCounters struct {
	Bytes, Packets, Connections, Denies, EventsLost uint64
	// RxBytes and RxPackets are what the sandbox received.
	RxBytes, RxPackets uint64
}

// AttachFunc attaches kernel enforcement as spec says. An error wrapping ErrKernelUnavailable
// means this kernel cannot enforce (staging and development then go on without kernel
// enforcement, production refuses to start); any other error stops the start.
type AttachFunc func(spec KernelSpec) (Enforcer, error)

// ErrKernelUnavailable means the kernel lacks what enforcement needs (a feature, a
// permission).
var ErrKernelUnavailable = errors.New("kernel enforcement unavailable")

// KernelSpec is what an AttachFunc is told.
type KernelSpec struct {
	// Sandbox names the sandbox (pins, metrics).
	Sandbox string
	// Cgroup is the sandbox's cgroup v2 directory; empty with PodCgroup.
	Cgroup string
	// PodCgroup asks to find the pod's cgroup (the parent of this process's) under
	// CgroupRoot and exempt this container's own.
	PodCgroup  bool
	CgroupRoot string
	// OwnLoopback says the sandbox's network namespace is its own, so its loopback is
	// allowed (it reaches only the sandbox's own processes).
	OwnLoopback bool
	// Listeners are the sidecar's listeners the sandbox may reach.
	Listeners []KernelListener
	// CIDRs are the policy's address ranges; Report its mode.
	CIDRs  []policy.CIDRRule
	Report bool
	// Identities says the policy has identities: their tasks may reach only the sidecar
	// (and protocol tcp ranges), which applies their rules.
	Identities bool
	// IdentityTCP are each identity's protocol tcp rules, by name: an identity's tasks may
	// connect straight only where its own and the sandbox's both allow.
	IdentityTCP map[string][]policy.CIDRRule
	// IdentityContainers maps a pod's container names to identities (Config's): the node
	// agent maps each container's cgroup to its identity for IdentityTCP.
	IdentityContainers map[string]string
	// Transparent, when set, redirects TCP connections to its ports to its listener.
	Transparent *KernelTransparent
	// RequirePacketGuard makes attach fail when packet sockets cannot be refused.
	RequirePacketGuard bool
	// OnDeny receives the kernel's deny events as audit events.
	OnDeny func(audit.Event)
	// Registerer gets the kernel metrics; Logger the operational logs.
	Registerer prometheus.Registerer
	Logger     *logrus.Logger
}

// ListenerKind labels one of the sidecar's listeners for the kernel.
type ListenerKind string

// The listener kinds.
const (
	ListenerProxy       ListenerKind = "proxy"
	ListenerTransparent ListenerKind = "transparent"
	ListenerDNS         ListenerKind = "dns"
	ListenerLLM         ListenerKind = "llm"
)

// KernelListener is one of the sidecar's listeners the sandbox may reach.
type KernelListener struct {
	Addr netip.AddrPort
	// UDP is set for a UDP socket; TCP otherwise.
	UDP  bool
	Kind ListenerKind
}

// KernelTransparent is transparent mode: TCP connections to Ports go to Addr4.
type KernelTransparent struct {
	Addr4 netip.AddrPort
	Ports []uint16
}

// Unavailable wraps err, the reason this kernel cannot enforce, so that it matches
// ErrKernelUnavailable; its message is err's.
func Unavailable(err error) error { return &unavailableError{err: err} }

type unavailableError struct{ err error }

func (e *unavailableError) Error() string   { return e.err.Error() }
func (e *unavailableError) Unwrap() []error { return []error{ErrKernelUnavailable, e.err} }
