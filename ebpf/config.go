package ebpf

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
)

// DefaultPinRoot is where sandboxes' links and maps are pinned, one directory per sandbox.
const DefaultPinRoot = "/sys/fs/bpf/airlock"

// DefaultDenyEventsPerSecond is the rate at which deny events reach Config.OnDeny when
// Config.DenyEventsPerSecond is zero.
const DefaultDenyEventsPerSecond = 50

// Proto is a transport protocol of a listener.
type Proto uint8

// The protocols a listener can have (IANA protocol numbers, as the kernel uses them).
const (
	TCP Proto = 6
	UDP Proto = 17
)

// ListenerKind says which of the sidecar's listeners an address is. It only labels the
// entry; every kind is reachable from the sandbox. The admin listener is never one of them.
type ListenerKind uint8

// The listener kinds.
const (
	ListenerProxy       ListenerKind = 1
	ListenerTransparent ListenerKind = 2
	ListenerDNS         ListenerKind = 3
	ListenerLLM         ListenerKind = 4
)

// Listener is one of the sidecar's listeners that sandbox processes may connect to (TCP) or
// send to (UDP).
type Listener struct {
	// Addr is the listening address. An unspecified address (0.0.0.0, ::) stands for the
	// loopback address and every interface address of its family (:: also the IPv4 ones)
	// as they are when the listener is set.
	Addr netip.AddrPort
	// Proto is TCP or UDP.
	Proto Proto
	// Kind labels the listener.
	Kind ListenerKind
}

// CIDRRule is an address range a policy rule names, allowed for TCP on Ports.
type CIDRRule struct {
	// Prefix is the range; an IPv4 range also covers its IPv4-mapped IPv6 form.
	Prefix netip.Prefix
	// Ports are the allowed destination ports; at least one.
	Ports []uint16
	// Raw marks a `protocol: tcp` rule: its connections go straight to the destination even
	// in transparent mode. Other CIDR rules' connections to a transparent port are
	// redirected to the proxy like any other.
	Raw bool
}

// Transparent configures transparent mode: TCP connections to Ports are redirected to the
// transparent listener, which learns the original destination from OriginalDst.
type Transparent struct {
	// Addr4 is the IPv4 transparent listener. Required.
	Addr4 netip.AddrPort
	// Addr6 is the IPv6 transparent listener. Zero means none: native IPv6 connections to
	// Ports are then denied (clients fall back to IPv4), never let through.
	Addr6 netip.AddrPort
	// Ports are the redirected destination ports (e.g. 80, 443); at most 16.
	Ports []uint16
}

// Config configures an Enforcer. Sandbox and Cgroup are required; every other zero value is
// usable.
type Config struct {
	// Sandbox names the pin directory (PinRoot/PinDirName(Sandbox)) and the metrics. Letters,
	// digits, '.', '_' and '-'. Required.
	Sandbox string
	// Cgroup is the sandbox's cgroup v2 directory. Required.
	Cgroup string
	// ExemptCgroup, when set, is a cgroup v2 directory strictly below Cgroup whose tasks, and
	// those of every cgroup below it, the programs leave alone: no decision, no counter, no
	// event. It is how a sidecar that is a container of the pod it enforces (Cgroup is the
	// pod's cgroup) keeps its own egress: it exempts its own container cgroup. The root of the
	// cgroup v2 hierarchy must be visible above it (its depth is counted up to the root).
	// Empty means nothing below Cgroup is exempt. With it set, Open also refuses pins of
	// Sandbox whose links are attached to another cgroup that still exists (another pod with
	// the same sandbox name) instead of moving them here.
	ExemptCgroup string
	// PinRoot is the bpffs directory holding one directory per sandbox. Empty means
	// DefaultPinRoot; bpffs is mounted at /sys/fs/bpf when it is not.
	PinRoot string
	// Listeners are the sidecar's listeners the sandbox may reach. Nil means none.
	Listeners []Listener
	// CIDRs are the policy's address ranges. Nil means none.
	CIDRs []CIDRRule
	// Transparent enables transparent mode. Nil disables it.
	Transparent *Transparent
	// OnDeny receives deny events from the kernel, at most DenyEventsPerSecond (the rest are
	// counted in DenyEvent.Suppressed of the next one delivered). It is called from one
	// goroutine. Nil drops them.
	OnDeny func(DenyEvent)
	// DenyEventsPerSecond limits OnDeny. Zero means DefaultDenyEventsPerSecond.
	DenyEventsPerSecond int
	// Registerer gets the airlock_kernel_* metrics. Nil leaves them unregistered.
	Registerer prometheus.Registerer
	// Logger receives operational logs. Nil discards them.
	Logger *logrus.Logger
	// GCInterval is how often expired allow entries are removed. Zero means a minute.
	GCInterval time.Duration
	// Report puts the hooks in report mode (a policy's `mode: report`): what enforce would
	// deny is allowed and reported (DenyEvent.Report), never refused. False enforces.
	Report bool
	// OwnLoopback says the sandbox's processes live in a network namespace of their own
	// (a local sandbox), so its loopback reaches only them: TCP and UDP to 127.0.0.0/8, ::1
	// and the unspecified addresses (which connect(2) sends to loopback) are allowed. False
	// denies loopback like any other address but the listeners: in a pod the sandbox shares
	// the sidecar's loopback, and with it the admin listener.
	OwnLoopback bool
	// RequireAll makes Open fail when an optional hook cannot be loaded (the packet socket
	// guard, which needs the BPF LSM active). False logs a warning and goes on without it.
	// Production sets it.
	RequireAll bool
	// Now is the wall clock Allow's deadlines are read against. Nil means time.Now.
	Now func() time.Time
	// Identities says the policy has identities (spec.identities): a task in any cgroup
	// below Cgroup (an identity's) may then connect only to the listeners, through the
	// transparent redirect, to its own loopback and to its own identity's protocol tcp
	// ranges (IdentityTCP, for a cgroup SetIdentityCgroups maps to that identity; one it
	// maps to "" is treated like Cgroup's own tasks), never
	// straight to an address the allow map or an http rule's cidrs hold, since only the
	// sidecar applies an identity's rules (DenyIdentity). False treats every task alike.
	Identities bool
	// IdentityTCP are each identity's protocol tcp rules, by identity name (see
	// Enforcer.SetIdentityTCP), in force for the cgroups SetIdentityCgroups maps: a cgroup
	// below Cgroup that it does not map gets no raw TCP. Nil (as opposed to empty) leaves
	// raw TCP per sandbox, for as long as the Enforcer is open: every identity's task has
	// the sandbox's protocol tcp ranges (a pod, where no one maps containers' cgroups yet).
	IdentityTCP map[string][]CIDRRule

	cgid uint64 // Cgroup's id, set by Open
}

// sandboxName matches a sandbox name: 1 to 64 of A-Z, a-z, 0-9, '_', '.' and '-'. (A loop,
// not a regexp: the {1,64} repetition compiles to a program whose making was most of the
// package's start-up cost in every airlock process.)
var sandboxName nameMatcher

type nameMatcher struct{}

// MatchString reports whether s is a valid sandbox name (see sandboxName).
func (nameMatcher) MatchString(s string) bool {
	if len(s) < 1 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '_', c == '.', c == '-':
		default:
			return false
		}
	}
	return true
}

// pinDot stands for '.' in a pin directory's name. bpffs refuses to create or look up any
// name that contains a dot (kernel/bpf/inode.c, bpf_lookup: EPERM), while a pod's sandbox
// name is "NAMESPACE.POD". '~' is outside the characters a sandbox name may use, so the
// mapping is one to one and a name without a dot keeps its directory.
const pinDot = "~"

// PinDirName is the name of sandbox's pin directory under the pin root: sandbox with each
// '.' written as '~'.
func PinDirName(sandbox string) string { return strings.ReplaceAll(sandbox, ".", pinDot) }

// sandboxFromPinDir is PinDirName's inverse.
func sandboxFromPinDir(dir string) string { return strings.ReplaceAll(dir, pinDot, ".") }

// validate checks c and fills in defaults. Errors wrap ErrInvalidConfig.
func (c Config) validate() (Config, error) {
	switch {
	case !sandboxName.MatchString(c.Sandbox) || c.Sandbox == "." || c.Sandbox == "..":
		return c, invalidf("sandbox name %q: use 1-64 letters, digits, '.', '_' or '-'", c.Sandbox)
	case c.Cgroup == "":
		return c, invalidf("Cgroup is required")
	case c.ExemptCgroup != "" && (filepath.Clean(c.ExemptCgroup) == filepath.Clean(c.Cgroup) || !isUnder(c.ExemptCgroup, c.Cgroup)):
		return c, invalidf("exempt cgroup %s must lie strictly below the enforced cgroup %s", c.ExemptCgroup, c.Cgroup)
	case c.DenyEventsPerSecond < 0, c.GCInterval < 0:
		return c, invalidf("DenyEventsPerSecond and GCInterval must not be negative")
	}
	if c.PinRoot == "" {
		c.PinRoot = DefaultPinRoot
	}
	c.PinRoot = filepath.Clean(c.PinRoot)
	if c.DenyEventsPerSecond == 0 {
		c.DenyEventsPerSecond = DefaultDenyEventsPerSecond
	}
	if c.GCInterval == 0 {
		c.GCInterval = time.Minute
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	for _, l := range c.Listeners {
		if !l.Addr.IsValid() || (l.Proto != TCP && l.Proto != UDP) {
			return c, invalidf("listener %v/%d: want a valid address and TCP or UDP", l.Addr, l.Proto)
		}
	}
	if _, err := compileCIDRs(c.CIDRs); err != nil {
		return c, err
	}
	if t := c.Transparent; t != nil {
		switch {
		case !t.Addr4.IsValid() || !t.Addr4.Addr().Unmap().Is4():
			return c, invalidf("transparent IPv4 listener %v: want an IPv4 address and port", t.Addr4)
		case t.Addr6.IsValid() && (!t.Addr6.Addr().Is6() || t.Addr6.Addr().Is4In6()):
			return c, invalidf("transparent IPv6 listener %v: want an IPv6 address and port", t.Addr6)
		case len(t.Ports) == 0 || len(t.Ports) > 16:
			return c, invalidf("transparent ports %v: want 1 to 16 ports", t.Ports)
		}
	}
	return c, nil
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrInvalidConfig)
}
