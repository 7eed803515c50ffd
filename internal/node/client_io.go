package node

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// call sends req on cc and waits for its reply. It returns an error wrapping
// ErrUnreachable when the connection ends or the agent does not answer in time, and the
// agent's error (prefixed "node agent: ") when it refuses the request.
func (c *Client) call(cc *clientConn, req Request) (Reply, error) {
	c.mu.Lock()
	c.nextID++
	req.ID = c.nextID
	c.mu.Unlock()
	ch := make(chan Reply, 1)
	cc.mu.Lock()
	if cc.pending == nil {
		cc.mu.Unlock()
		return Reply{}, ErrUnreachable
	}
	cc.pending[req.ID] = ch
	cc.mu.Unlock()
	cc.wmu.Lock()
	_ = cc.c.SetWriteDeadline(time.Now().Add(callTimeout))
	err := cc.pc.Write(req)
	cc.wmu.Unlock()
	if err != nil {
		cc.c.Close()
		return Reply{}, fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return Reply{}, ErrUnreachable
		}
		if r.Error != "" {
			return r, fmt.Errorf("node agent: %s", r.Error)
		}
		return r, nil
	case <-time.After(callTimeout):
		cc.c.Close() // a stuck agent is a lost one
		return Reply{}, fmt.Errorf("%w: no answer in %s", ErrUnreachable, callTimeout)
	}
}

// do sends req on the current connection. After Close it returns net.ErrClosed.
func (c *Client) do(req Request) (Reply, error) {
	c.mu.Lock()
	cc, closed := c.conn, c.closed
	c.mu.Unlock()
	if closed {
		return Reply{}, net.ErrClosed
	}
	if cc == nil {
		return Reply{}, ErrUnreachable
	}
	return c.call(cc, req)
}

// Allow makes addr reachable from the pod on ports until the given time.
func (c *Client) Allow(addr netip.Addr, ports []uint16, until time.Time) error {
	_, err := c.do(Request{Op: OpAllow, Addr: addr.String(), Ports: ports, Until: until})
	return err
}

// Revoke makes addr unreachable on ports again.
func (c *Client) Revoke(addr netip.Addr, ports []uint16) error {
	_, err := c.do(Request{Op: OpRevoke, Addr: addr.String(), Ports: ports})
	return err
}

// SetCIDRs replaces the pod's CIDR rules. The rules are remembered for a redialled agent
// too, even when this request fails.
func (c *Client) SetCIDRs(cidrs []CIDR) error {
	c.mu.Lock()
	c.hello.CIDRs = cidrs
	c.mu.Unlock()
	_, err := c.do(Request{Op: OpCIDRs, CIDRs: cidrs})
	return err
}

// SetReport switches report mode on or off. The mode is remembered for a redialled agent
// too, even when this request fails.
func (c *Client) SetReport(report bool) error {
	c.mu.Lock()
	c.hello.Report = report
	c.mu.Unlock()
	_, err := c.do(Request{Op: OpReport, Report: report})
	return err
}

// OriginalDst returns where the redirected TCP connection from peer (a process of the pod,
// as the transparent listener saw it) was going.
func (c *Client) OriginalDst(peer netip.AddrPort) (netip.AddrPort, error) {
	r, err := c.do(Request{Op: OpOrigDst, Addr: peer.String()})
	if err != nil {
		return netip.AddrPort{}, err
	}
	dst, err := netip.ParseAddrPort(r.OrigDst)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("node agent: original destination: %w", err)
	}
	return dst, nil
}

// SetIdentities switches the pod's identities on or off in the kernel (Hello.Identities).
// The switch is remembered for a redialled agent too, even when this request fails.
func (c *Client) SetIdentities(on bool) error {
	c.mu.Lock()
	c.hello.Identities = on
	c.mu.Unlock()
	_, err := c.do(Request{Op: OpIdentities, Identities: on})
	return err
}

// SetIdentityTCP replaces each identity's raw TCP rules and which container is which
// identity (Hello.IdentityTCP; nil: every container has the sandbox's raw TCP). The table is
// remembered for a redialled agent too, even when this request fails. Nil when the hello had
// none sends nothing, so a sidecar without identities talks to an older agent as before.
func (c *Client) SetIdentityTCP(it *IdentityTCP) error {
	c.mu.Lock()
	was := c.hello.IdentityTCP
	c.hello.IdentityTCP = it
	c.mu.Unlock()
	if it == nil && was == nil {
		return nil
	}
	_, err := c.do(Request{Op: OpIdentityTCP, IdentityTCP: it})
	return err
}

// PeerContainer returns the name of the pod's container (as the API server names it) whose
// process connected the TCP connection from peer (its address and port, as the sidecar's
// listener saw it), from the kernel's record; an error when the agent cannot tell (no
// record, a cgroup that is no container's of the pod). An older agent answers with an
// unknown operation error.
func (c *Client) PeerContainer(peer netip.AddrPort) (string, error) {
	r, err := c.do(Request{Op: OpPeer, Addr: peer.String()})
	if err != nil {
		return "", err
	}
	if r.Container == "" {
		return "", errors.New("node agent: no container in the answer")
	}
	return r.Container, nil
}

// QueryContainer is PeerContainer for the UDP query with DNS message ID id that the DNS
// filter received from client.
func (c *Client) QueryContainer(client netip.AddrPort, id uint16) (string, error) {
	r, err := c.do(Request{Op: OpPeer, Addr: client.String(), Query: &id})
	if err != nil {
		return "", err
	}
	if r.Container == "" {
		return "", errors.New("node agent: no container in the answer")
	}
	return r.Container, nil
}

// Counters reads the pod's kernel counters.
func (c *Client) Counters() (Counters, error) {
	r, err := c.do(Request{Op: OpCounters})
	if err != nil {
		return Counters{}, err
	}
	if r.Counters == nil {
		return Counters{}, errors.New("node agent: no counters in the answer")
	}
	return *r.Counters, nil
}

// Close ends the connection and stops redialling; the agent keeps the pod enforced (fail
// closed). Close is idempotent; later calls return net.ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	close(c.done)
	if c.conn != nil {
		c.conn.c.Close()
	}
	return nil
}

// Usage reads the CPU time and memory of each running app container of the sidecar's pod
// (OpUsage). An agent older than the operation answers with an error containing
// `unknown operation "usage"`.
func (c *Client) Usage() ([]ContainerUsage, error) {
	r, err := c.do(Request{Op: OpUsage})
	if err != nil {
		return nil, err
	}
	return r.Usage, nil
}
