package sidecar

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/internal/nodeproto"
	"github.com/airlock-dev/airlock/policy"
)

// ErrNodeAgent is wrapped by the errors of the node agent's Enforcer while the agent cannot
// be reached: the DNS filter then refuses to answer, so nothing new is opened (fail closed).
var ErrNodeAgent = errors.New("node agent unreachable")

// agentCallTimeout bounds one request to the node agent.
const agentCallTimeout = 5 * time.Second

// AttachNodeAgent returns the AttachFunc of `--node-agent`: kernel enforcement held by the
// node agent (`airlock node`), reached over the abstract unix socket name in the pod's
// network namespace (empty: nodeproto.SocketName). The sidecar needs no privilege for it.
// Transparent mode works through it too: each accepted connection's original destination is
// one request to the agent.
// Attaching waits up to wait for the agent to confirm enforcement of the pod, then returns
// an error wrapping ErrKernelUnavailable (production then refuses to start, so the pod
// never starts on a node without the agent). After the start a lost agent is redialled in
// the background and told the sidecar's current tables again.
func AttachNodeAgent(name string, wait time.Duration) AttachFunc {
	if name == "" {
		name = nodeproto.SocketName
	}
	return func(spec KernelSpec) (Enforcer, error) {
		a := &agentEnforcer{name: name, onDeny: spec.OnDeny, log: spec.Logger, done: make(chan struct{}),
			hello: helloOf(spec)}
		if a.log == nil {
			a.log = logrus.New()
		}
		deadline := time.Now().Add(wait)
		for try := 0; ; try++ {
			err := a.connect()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return nil, Unavailable(fmt.Errorf("node agent on %s: %w (is the airlock-node DaemonSet running on this node?)", name, err))
			}
			if try%20 == 0 { // every 10 s
				a.log.WithField("error", oneLine(err)).Info("waiting for the node agent to confirm kernel enforcement")
			}
			time.Sleep(500 * time.Millisecond)
		}
		if spec.Registerer != nil {
			if err := spec.Registerer.Register(newAgentCollector(a, spec.Sandbox)); err != nil {
				a.Close()
				return nil, fmt.Errorf("register kernel metrics: %w", err)
			}
		}
		return a, nil
	}
}

// helloOf builds the hello from the sidecar's kernel spec.
func helloOf(spec KernelSpec) nodeproto.Hello {
	h := nodeproto.Hello{Version: nodeproto.Version, CIDRs: protoCIDRs(spec.CIDRs), Report: spec.Report,
		RequirePacketGuard: spec.RequirePacketGuard}
	for _, l := range spec.Listeners {
		h.Listeners = append(h.Listeners, nodeproto.Listener{Addr: l.Addr.String(), UDP: l.UDP, Kind: string(l.Kind)})
	}
	if t := spec.Transparent; t != nil {
		h.Transparent = &nodeproto.Transparent{Addr4: t.Addr4.String(), Ports: t.Ports}
	}
	return h
}

func protoCIDRs(rules []policy.CIDRRule) []nodeproto.CIDR {
	out := make([]nodeproto.CIDR, 0, len(rules))
	for _, r := range rules {
		out = append(out, nodeproto.CIDR{Prefix: r.Prefix.String(), Ports: r.Ports, Raw: r.Raw})
	}
	return out
}

// agentEnforcer is the Enforcer of the node agent: every operation is a request to it.
type agentEnforcer struct {
	name   string
	onDeny func(audit.Event)
	log    *logrus.Logger
	done   chan struct{}

	// mu guards hello (the tables to tell a redialled agent), conn, pending, nextID,
	// redialling and closed.
	mu         sync.Mutex
	hello      nodeproto.Hello
	conn       *agentConn
	nextID     uint64
	redialling bool
	closed     bool
}

// agentConn is one connection to the agent.
type agentConn struct {
	c  net.Conn
	pc *nodeproto.Conn
	// wmu serialises writes.
	wmu sync.Mutex
	// mu guards pending.
	mu      sync.Mutex
	pending map[uint64]chan nodeproto.Reply
}

var _ Enforcer = (*agentEnforcer)(nil)

// connect dials the agent, checks it is root on the node, says hello and starts reading.
func (a *agentEnforcer) connect() error {
	c, err := net.DialTimeout("unix", a.name, agentCallTimeout)
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	if err := checkAgentPeer(c.(*net.UnixConn)); err != nil {
		c.Close()
		return err
	}
	ac := &agentConn{c: c, pc: nodeproto.NewConn(c), pending: map[uint64]chan nodeproto.Reply{}}
	go a.read(ac)
	a.mu.Lock()
	hello := a.hello
	a.mu.Unlock()
	r, err := a.call(ac, nodeproto.Request{Op: nodeproto.OpHello, Hello: &hello})
	if err == nil && r.Welcome == nil {
		err = errors.New("the agent's answer has no welcome")
	}
	if err != nil {
		c.Close()
		return fmt.Errorf("hello: %w", err)
	}
	a.mu.Lock()
	a.conn = ac
	a.mu.Unlock()
	fields := logrus.Fields{"sandbox": r.Welcome.Sandbox, "adopted": r.Welcome.Adopted, "protocol": r.Welcome.Version}
	a.log.WithFields(fields).Info("the node agent enforces this pod")
	if !r.Welcome.PacketGuard && r.Welcome.PacketGuardError != "" {
		a.log.WithField("error", r.Welcome.PacketGuardError).Warn("packet sockets are not refused in the sandbox (needs the BPF LSM on the node)")
	}
	return nil
}

// checkAgentPeer refuses an agent socket held by anything but root: the agent runs as root
// on the node; a process of the pod that bound the name first (possible only while no agent
// holds it) runs as another user in a restricted namespace.
func checkAgentPeer(c *net.UnixConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("SO_PEERCRED: %w", cerr)
	}
	if cred.Uid != 0 {
		return fmt.Errorf("the socket's owner runs as uid %d, not root: not the node agent", cred.Uid)
	}
	return nil
}
