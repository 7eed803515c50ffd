package node

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/ebpf"
)

// helloTimeout bounds the wait for an accepted sidecar's hello.
const helloTimeout = 10 * time.Second

// session is one accepted connection of the pod's sidecar.
type session struct {
	st *podState
	c  net.Conn
	pc *Conn

	// wmu serialises writes (replies and deny events).
	wmu sync.Mutex

	closeOnce sync.Once
}

func newSession(st *podState, c net.Conn) *session {
	return &session{st: st, c: c, pc: NewConn(c)}
}

func (s *session) close() { s.closeOnce.Do(func() { s.c.Close() }) }

// send writes one message; a failed write ends the session.
func (s *session) send(r Reply) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_ = s.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if err := s.pc.Write(r); err != nil {
		s.close()
	}
}

// serve reads the hello, attaches, and then answers requests until the connection ends.
func (s *session) serve() {
	defer s.close()
	log := s.st.logger()
	_ = s.c.SetReadDeadline(time.Now().Add(helloTimeout))
	var req Request
	if err := s.pc.Read(&req); err != nil {
		log.WithError(err).Warn("sidecar session: no hello")
		return
	}
	_ = s.c.SetReadDeadline(time.Time{})
	if req.Op != OpHello || req.Hello == nil {
		s.send(Reply{ID: req.ID, Error: "the first request must be a hello"})
		return
	}
	if req.Hello.Version != ProtocolVersion {
		s.send(Reply{ID: req.ID, Error: fmt.Sprintf("%v: the agent speaks version %d, the sidecar %d", ErrVersion, ProtocolVersion, req.Hello.Version)})
		return
	}
	w, err := s.st.attach(req.Hello)
	if err != nil {
		log.WithError(err).Error("attach kernel enforcement to the pod")
		s.send(Reply{ID: req.ID, Error: "attach kernel enforcement: " + err.Error()})
		return
	}
	log.WithField("adopted", w.Adopted).Info("kernel enforcement attached for the pod's sidecar")
	s.send(Reply{ID: req.ID, Welcome: w})
	for {
		var req Request
		if err := s.pc.Read(&req); err != nil {
			return
		}
		if req.Op == OpPeer {
			// A peer lookup may wait for the pod's next update (peerWait): it must not hold
			// up the requests behind it. Replies may come in any order.
			go func() { s.send(s.handle(req)) }()
			continue
		}
		s.send(s.handle(req))
	}
}

// handle answers one request after the hello.
func (s *session) handle(req Request) Reply {
	enf := s.st.enforcer()
	if enf == nil {
		return Reply{ID: req.ID, Error: "no enforcement attached"}
	}
	var err error
	out := Reply{ID: req.ID}
	switch req.Op {
	case OpAllow, OpRevoke:
		var addr netip.Addr
		if addr, err = netip.ParseAddr(req.Addr); err != nil {
			break
		}
		if req.Op == OpAllow {
			err = enf.Allow(addr, req.Ports, req.Until)
		} else {
			err = enf.Revoke(addr, req.Ports)
		}
	case OpCIDRs:
		var rules []ebpf.CIDRRule
		if rules, err = ebpfCIDRs(req.CIDRs); err == nil {
			err = enf.SetCIDRs(rules)
		}
	case OpReport:
		err = enf.SetReport(req.Report)
	case OpIdentities:
		err = enf.SetIdentities(req.Identities)
	case OpIdentityTCP:
		err = s.st.setIdentityTCP(req.IdentityTCP)
	case OpPeer:
		var peer netip.AddrPort
		if peer, err = netip.ParseAddrPort(req.Addr); err == nil {
			out.Container, err = s.st.peerContainer(enf, peer, req.Query)
		}
	case OpUsage:
		out.Usage, err = s.st.usage()
	case OpOrigDst:
		var peer, dst netip.AddrPort
		if peer, err = netip.ParseAddrPort(req.Addr); err == nil {
			if dst, err = enf.OriginalDstOf(peer); err == nil {
				out.OrigDst = dst.String()
			}
		}
	case OpCounters:
		var c ebpf.Counters
		if c, err = enf.Counters(); err == nil {
			out.Counters = &Counters{Bytes: c.Bytes, Packets: c.Packets, Connections: c.Connections, Denies: c.Denies, EventsLost: c.EventsLost}
		}
	default:
		err = fmt.Errorf("unknown operation %q", req.Op)
	}
	if err != nil {
		out.Error = err.Error()
	}
	return out
}

// ebpfConfig translates a hello into the enforcer's configuration (without the pod's
// cgroups and names, which the agent decides).
func ebpfConfig(h *Hello) (ebpf.Config, error) {
	cfg := ebpf.Config{Report: h.Report, RequireAll: h.RequirePacketGuard}
	kinds := map[string]ebpf.ListenerKind{"proxy": ebpf.ListenerProxy, "transparent": ebpf.ListenerTransparent,
		"dns": ebpf.ListenerDNS, "llm": ebpf.ListenerLLM}
	for _, l := range h.Listeners {
		ap, err := netip.ParseAddrPort(l.Addr)
		if err != nil {
			return cfg, fmt.Errorf("listener %q: %w", l.Addr, err)
		}
		kind, ok := kinds[l.Kind]
		if !ok {
			return cfg, fmt.Errorf("listener %s: unknown kind %q", l.Addr, l.Kind)
		}
		proto := ebpf.TCP
		if l.UDP {
			proto = ebpf.UDP
		}
		cfg.Listeners = append(cfg.Listeners, ebpf.Listener{Addr: ap, Proto: proto, Kind: kind})
	}
	if t := h.Transparent; t != nil {
		ap, err := netip.ParseAddrPort(t.Addr4)
		if err != nil {
			return cfg, fmt.Errorf("transparent listener %q: %w", t.Addr4, err)
		}
		cfg.Transparent = &ebpf.Transparent{Addr4: ap, Ports: t.Ports}
	}
	rules, err := ebpfCIDRs(h.CIDRs)
	cfg.CIDRs = rules
	return cfg, err
}

// ebpfIdentityTCP translates each identity's rules; the result is never nil.
func ebpfIdentityTCP(in map[string][]CIDR) (map[string][]ebpf.CIDRRule, error) {
	out := make(map[string][]ebpf.CIDRRule, len(in))
	for name, rules := range in {
		r, err := ebpfCIDRs(rules)
		if err != nil {
			return nil, fmt.Errorf("identity %q: %w", name, err)
		}
		out[name] = r
	}
	return out, nil
}

func ebpfCIDRs(in []CIDR) ([]ebpf.CIDRRule, error) {
	out := make([]ebpf.CIDRRule, 0, len(in))
	for _, c := range in {
		p, err := netip.ParsePrefix(c.Prefix)
		if err != nil {
			return nil, fmt.Errorf("cidr %q: %w", c.Prefix, err)
		}
		out = append(out, ebpf.CIDRRule{Prefix: p, Ports: c.Ports, Raw: c.Raw})
	}
	return out, nil
}

// denyEvent translates a kernel deny event for the protocol.
func denyEvent(ev ebpf.DenyEvent) *DenyEvent {
	out := &DenyEvent{Time: ev.Time, Hook: string(ev.Hook), Reason: string(ev.Reason), PID: ev.PID,
		UID: ev.UID, Comm: ev.Comm, Proto: ev.Proto, Report: ev.Report, Suppressed: ev.Suppressed}
	if ev.Dest.IsValid() {
		out.Dest = ev.Dest.String()
	}
	return out
}
