package node

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
)

// ErrUnreachable is wrapped by a Client's errors while the agent cannot be reached (before
// the first welcome, and between a lost connection and the redial's welcome). The sidecar's
// DNS filter then refuses to answer, so nothing new is opened (fail closed).
var ErrUnreachable = errors.New("node agent unreachable")

// callTimeout bounds one request to the agent: an agent that does not answer in time is a
// lost one.
const callTimeout = 5 * time.Second

// ClientConfig configures a Client.
type ClientConfig struct {
	// SocketName is the agent's abstract unix socket in the pod's network namespace. Empty
	// means SocketName.
	SocketName string
	// Hello is what the client says at every connect (the first and each redial). Its
	// Version is always ProtocolVersion; SetCIDRs and SetReport keep its CIDRs and Report
	// current, so a redialled agent is told the tables of now, not of the start.
	Hello Hello
	// OnDeny receives the agent's kernel deny events, from the client's read loop (in the
	// order the agent sent them). Nil drops them.
	OnDeny func(DenyEvent)
	// Logger gets the operational logs. Nil discards them.
	Logger *logrus.Logger
}

// Client is the sidecar's side of the protocol: one connection to the node agent that
// enforces the sidecar's pod, redialled in the background when it is lost. Its methods are
// safe for concurrent use; each is one request, answered by the agent or failed (with
// ErrUnreachable while there is no connection).
type Client struct {
	name   string
	onDeny func(DenyEvent)
	log    *logrus.Logger
	done   chan struct{}

	// mu guards hello (the tables to tell a redialled agent), conn, nextID, redialling and
	// closed.
	mu         sync.Mutex
	hello      Hello
	conn       *clientConn
	nextID     uint64
	redialling bool
	closed     bool
}

// clientConn is one connection to the agent.
type clientConn struct {
	c  net.Conn
	pc *Conn
	// wmu serialises writes.
	wmu sync.Mutex
	// mu guards pending (nil once the connection ended).
	mu      sync.Mutex
	pending map[uint64]chan Reply
}

// Dial connects to the agent and says hello; it retries for up to wait until the agent
// welcomes the sidecar (the agent binds the socket only once the pod's sidecar container
// runs). The error is the last attempt's: the dial, the agent's peer check, or the agent's
// refusal (for example ErrVersion's text). After Dial a lost agent is redialled in the
// background until Close.
func Dial(cfg ClientConfig, wait time.Duration) (*Client, error) {
	c := &Client{name: cfg.SocketName, onDeny: cfg.OnDeny, log: cfg.Logger, done: make(chan struct{}), hello: cfg.Hello}
	if c.name == "" {
		c.name = SocketName
	}
	if c.log == nil {
		c.log = logrus.New()
		c.log.SetOutput(io.Discard)
	}
	c.hello.Version = ProtocolVersion
	deadline := time.Now().Add(wait)
	for try := 0; ; try++ {
		err := c.connect()
		if err == nil {
			return c, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("node agent on %s: %w", c.name, err)
		}
		if try%20 == 0 { // every 10 s
			c.log.WithField("error", err.Error()).Info("waiting for the node agent to confirm kernel enforcement")
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// connect dials the agent, checks it is root on the node, says hello and starts reading.
func (c *Client) connect() error {
	nc, err := net.DialTimeout("unix", c.name, callTimeout)
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	if err := checkAgentIsRoot(nc.(*net.UnixConn)); err != nil {
		nc.Close()
		return err
	}
	cc := &clientConn{c: nc, pc: NewConn(nc), pending: map[uint64]chan Reply{}}
	go c.read(cc)
	c.mu.Lock()
	hello := c.hello
	c.mu.Unlock()
	r, err := c.call(cc, Request{Op: OpHello, Hello: &hello})
	if err == nil && r.Welcome == nil {
		err = errors.New("the agent's answer has no welcome")
	}
	if err != nil {
		nc.Close()
		return fmt.Errorf("hello: %w", err)
	}
	c.mu.Lock()
	c.conn = cc
	c.mu.Unlock()
	fields := logrus.Fields{"sandbox": r.Welcome.Sandbox, "adopted": r.Welcome.Adopted, "protocol": r.Welcome.Version}
	c.log.WithFields(fields).Info("the node agent enforces this pod")
	if !r.Welcome.PacketGuard && r.Welcome.PacketGuardError != "" {
		c.log.WithField("error", r.Welcome.PacketGuardError).Warn("packet sockets are not refused in the sandbox (needs the BPF LSM on the node)")
	}
	return nil
}

// checkAgentIsRoot refuses an agent socket held by anything but root: the agent runs as
// root on the node; a process of the pod that bound the name first (possible only while no
// agent holds it) runs as another user in a restricted namespace.
func checkAgentIsRoot(c *net.UnixConn) error {
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

// read delivers the agent's replies to their callers and its deny events to OnDeny, until
// the connection ends; then it fails the pending calls and starts redialling.
func (c *Client) read(cc *clientConn) {
	for {
		var r Reply
		if err := cc.pc.Read(&r); err != nil {
			break
		}
		if r.ID == 0 {
			if r.Deny != nil && c.onDeny != nil {
				c.onDeny(*r.Deny)
			}
			continue
		}
		cc.mu.Lock()
		ch := cc.pending[r.ID]
		delete(cc.pending, r.ID)
		cc.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
	cc.c.Close()
	cc.mu.Lock()
	for id, ch := range cc.pending {
		close(ch)
		delete(cc.pending, id)
	}
	cc.pending = nil
	cc.mu.Unlock()
	c.lost(cc)
}

// lost forgets a connection that ended and redials in the background.
func (c *Client) lost(cc *clientConn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != cc {
		return // never became current (a failed hello)
	}
	c.conn = nil
	if c.closed || c.redialling {
		return
	}
	c.redialling = true
	c.log.Error("lost the node agent: no new address is opened until it is back (the pod stays enforced)")
	go c.redial()
}

// redial reconnects until it succeeds or the client is closed.
func (c *Client) redial() {
	delay := 200 * time.Millisecond
	for {
		select {
		case <-c.done:
			return
		case <-time.After(delay):
		}
		if err := c.connect(); err == nil {
			c.mu.Lock()
			c.redialling = false
			c.mu.Unlock()
			return
		}
		delay = min(2*delay, 2*time.Second)
	}
}
