package sidecar

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/ebpf"
	"github.com/airlock-dev/airlock/internal/nodeproto"
	"github.com/airlock-dev/airlock/policy"
)

// read delivers the agent's replies to their callers and its deny events to the audit log,
// until the connection ends; then it fails the pending calls and starts redialling.
func (a *agentEnforcer) read(ac *agentConn) {
	for {
		var r nodeproto.Reply
		if err := ac.pc.Read(&r); err != nil {
			break
		}
		if r.ID == 0 {
			if r.Deny != nil && a.onDeny != nil {
				a.onDeny(denyAuditEventOf(r.Deny))
			}
			continue
		}
		ac.mu.Lock()
		ch := ac.pending[r.ID]
		delete(ac.pending, r.ID)
		ac.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
	ac.c.Close()
	ac.mu.Lock()
	for id, ch := range ac.pending {
		close(ch)
		delete(ac.pending, id)
	}
	ac.pending = nil
	ac.mu.Unlock()
	a.lost(ac)
}

// lost forgets a connection that ended and redials in the background.
func (a *agentEnforcer) lost(ac *agentConn) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.conn != ac {
		return // never became current (a failed hello)
	}
	a.conn = nil
	if a.closed || a.redialling {
		return
	}
	a.redialling = true
	a.log.Error("lost the node agent: no new address is opened until it is back (the pod stays enforced)")
	go a.redial()
}

// redial reconnects until it succeeds or the enforcer is closed.
func (a *agentEnforcer) redial() {
	delay := 200 * time.Millisecond
	for {
		select {
		case <-a.done:
			return
		case <-time.After(delay):
		}
		if err := a.connect(); err == nil {
			a.mu.Lock()
			a.redialling = false
			a.mu.Unlock()
			return
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// call sends req on ac and waits for its reply.
func (a *agentEnforcer) call(ac *agentConn, req nodeproto.Request) (nodeproto.Reply, error) {
	a.mu.Lock()
	a.nextID++
	req.ID = a.nextID
	a.mu.Unlock()
	ch := make(chan nodeproto.Reply, 1)
	ac.mu.Lock()
	if ac.pending == nil {
		ac.mu.Unlock()
		return nodeproto.Reply{}, ErrNodeAgent
	}
	ac.pending[req.ID] = ch
	ac.mu.Unlock()
	ac.wmu.Lock()
	_ = ac.c.SetWriteDeadline(time.Now().Add(agentCallTimeout))
	err := ac.pc.Write(req)
	ac.wmu.Unlock()
	if err != nil {
		ac.c.Close()
		return nodeproto.Reply{}, fmt.Errorf("%w: %v", ErrNodeAgent, err)
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return nodeproto.Reply{}, ErrNodeAgent
		}
		if r.Error != "" {
			return r, fmt.Errorf("node agent: %s", r.Error)
		}
		return r, nil
	case <-time.After(agentCallTimeout):
		ac.c.Close() // a stuck agent is a lost one
		return nodeproto.Reply{}, fmt.Errorf("%w: no answer in %s", ErrNodeAgent, agentCallTimeout)
	}
}

// do sends req on the current connection.
func (a *agentEnforcer) do(req nodeproto.Request) (nodeproto.Reply, error) {
	a.mu.Lock()
	ac, closed := a.conn, a.closed
	a.mu.Unlock()
	if closed {
		return nodeproto.Reply{}, net.ErrClosed
	}
	if ac == nil {
		return nodeproto.Reply{}, ErrNodeAgent
	}
	return a.call(ac, req)
}

// Allow implements Enforcer.
func (a *agentEnforcer) Allow(addr netip.Addr, ports []uint16, until time.Time) error {
	_, err := a.do(nodeproto.Request{Op: nodeproto.OpAllow, Addr: addr.String(), Ports: ports, Until: until})
	return err
}

// Revoke implements Enforcer.
func (a *agentEnforcer) Revoke(addr netip.Addr, ports []uint16) error {
	_, err := a.do(nodeproto.Request{Op: nodeproto.OpRevoke, Addr: addr.String(), Ports: ports})
	return err
}

// SetCIDRs implements Enforcer. The rules are remembered for a redialled agent too.
func (a *agentEnforcer) SetCIDRs(rules []policy.CIDRRule) error {
	cidrs := protoCIDRs(rules)
	a.mu.Lock()
	a.hello.CIDRs = cidrs
	a.mu.Unlock()
	_, err := a.do(nodeproto.Request{Op: nodeproto.OpCIDRs, CIDRs: cidrs})
	return err
}

// SetReport implements Enforcer. The mode is remembered for a redialled agent too.
func (a *agentEnforcer) SetReport(report bool) error {
	a.mu.Lock()
	a.hello.Report = report
	a.mu.Unlock()
	_, err := a.do(nodeproto.Request{Op: nodeproto.OpReport, Report: report})
	return err
}

// OriginalDst implements Enforcer: the agent looks the connection up by its peer address.
func (a *agentEnforcer) OriginalDst(c net.Conn) (netip.AddrPort, error) {
	ta, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("original destination of %v: not a TCP connection", c.RemoteAddr())
	}
	r, err := a.do(nodeproto.Request{Op: nodeproto.OpOrigDst, Addr: ta.AddrPort().String()})
	if err != nil {
		return netip.AddrPort{}, err
	}
	return netip.ParseAddrPort(r.OrigDst)
}

// Counters implements Enforcer.
func (a *agentEnforcer) Counters() (KernelCounters, error) {
	r, err := a.do(nodeproto.Request{Op: nodeproto.OpCounters})
	if err != nil {
		return KernelCounters{}, err
	}
	if r.Counters == nil {
		return KernelCounters{}, errors.New("node agent: no counters in the answer")
	}
	return KernelCounters(*r.Counters), nil
}

// Close implements Enforcer: it ends the connection; the agent keeps the pod enforced.
func (a *agentEnforcer) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	close(a.done)
	if a.conn != nil {
		a.conn.c.Close()
	}
	return nil
}

// denyAuditEventOf turns the agent's deny event into the contract's audit event.
func denyAuditEventOf(d *nodeproto.DenyEvent) audit.Event {
	ev := ebpf.DenyEvent{Time: d.Time, Hook: ebpf.Hook(d.Hook), Reason: ebpf.DenyReason(d.Reason), PID: d.PID,
		UID: d.UID, Comm: d.Comm, Proto: d.Proto, Report: d.Report, Suppressed: d.Suppressed}
	if ap, err := netip.ParseAddrPort(d.Dest); err == nil {
		ev.Dest = ap
	}
	return denyAuditEvent(ev)
}
