package ebpf

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/cilium/ebpf/ringbuf"
)

// Hook names the kernel hook that denied something.
type Hook string

// The hooks (the program names of bpf/airlock.c).
const (
	HookConnect4   Hook = "connect4"
	HookConnect6   Hook = "connect6"
	HookSendmsg4   Hook = "sendmsg4"
	HookSendmsg6   Hook = "sendmsg6"
	HookSockCreate Hook = "sock_create"
	HookEgress     Hook = "egress"
)

var hookNames = map[uint8]Hook{1: HookConnect4, 2: HookConnect6, 3: HookSendmsg4, 4: HookSendmsg6, 5: HookSockCreate, 6: HookEgress}

// DenyReason says why the kernel denied.
type DenyReason string

// The deny reasons (enum deny_reason of bpf/airlock.h).
const (
	DenyNotAllowed     DenyReason = "not_allowed"          // the destination is in no map
	DenyExpired        DenyReason = "allow_expired"        // the destination's allow entry expired
	DenyProtocol       DenyReason = "protocol_not_allowed" // raw, packet, ICMP, SCTP ... socket
	DenyUDP            DenyReason = "udp_not_allowed"      // UDP to anything but the DNS filter
	DenyNoTransparent6 DenyReason = "no_ipv6_transparent"  // IPv6 to a redirected port, no IPv6 listener
	DenyIdentity       DenyReason = "identity_direct"      // an identity's task connecting around the sidecar
)

var reasonNames = map[uint8]DenyReason{1: DenyNotAllowed, 2: DenyExpired, 3: DenyProtocol, 4: DenyUDP, 5: DenyNoTransparent6, 6: DenyIdentity}

// DenyEvent is one denial the kernel reported.
type DenyEvent struct {
	// Time is when the sidecar read the event.
	Time time.Time
	// Hook is where it was denied; Reason why.
	Hook   Hook
	Reason DenyReason
	// PID, UID and Comm identify the process (zero for the egress backstop, which runs
	// outside process context).
	PID  uint32
	UID  uint32
	Comm string
	// Cgroup is the id of the process's cgroup (v2) (zero for the egress backstop), and
	// Identity the identity SetIdentityCgroups mapped it to ("" for none: the sandbox's own
	// tasks, or a cgroup nobody mapped).
	Cgroup   uint64
	Identity string
	// Dest is the destination (unmapped); zero for sock_create.
	Dest netip.AddrPort
	// Proto is the IP protocol number; Family and Type the socket's.
	Proto, Family, Type uint8
	// Report is set in report mode: the hook allowed what enforce would have denied.
	Report bool
	// Suppressed counts events dropped by the rate limit since the last delivered one.
	Suppressed uint64
}

// decodeEvent parses one ring buffer record.
func decodeEvent(raw []byte, now time.Time) (DenyEvent, error) {
	var ev airlockEvent
	if err := binary.Read(bytes.NewReader(raw), binary.NativeEndian, &ev); err != nil {
		return DenyEvent{}, fmt.Errorf("decode deny event: %w", err)
	}
	d := DenyEvent{
		Time: now, Hook: hookNames[ev.Hook], Reason: reasonNames[ev.Reason],
		PID: ev.Pid, UID: ev.Uid, Cgroup: ev.Cgid, Comm: string(bytes.TrimRight(ev.Comm[:], "\x00")),
		Proto: ev.Proto, Family: ev.Family, Type: ev.Type, Report: ev.Report != 0,
	}
	if ev.Hook != 5 {
		d.Dest = netip.AddrPortFrom(netip.AddrFrom16(ev.Addr).Unmap(), ev.Port)
	}
	return d, nil
}

// limiter is a token bucket: rate tokens a second, burst rate.
type limiter struct {
	rate   float64
	tokens float64
	last   time.Time
}

func (l *limiter) allow(now time.Time) bool {
	if !l.last.IsZero() {
		l.tokens = min(l.rate, l.tokens+now.Sub(l.last).Seconds()*l.rate)
	}
	l.last = now
	if l.tokens >= 1 {
		l.tokens--
		return true
	}
	return false
}

// startEvents starts the deny event reader and the allow map GC.
func (e *Enforcer) startEvents() error {
	rd, err := ringbuf.NewReader(e.objs.Events)
	if err != nil {
		return fmt.Errorf("open deny event ring buffer: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = func() {
		cancel()
		rd.Close() // unblocks Read
	}
	e.wg.Add(2)
	go e.readEvents(rd)
	go e.gcLoop(ctx)
	return nil
}

// readEvents delivers deny events to OnDeny, rate-limited, until the reader is closed.
func (e *Enforcer) readEvents(rd *ringbuf.Reader) {
	defer e.wg.Done()
	lim := &limiter{rate: float64(e.cfg.DenyEventsPerSecond), tokens: float64(e.cfg.DenyEventsPerSecond)}
	var suppressed uint64
	var rec ringbuf.Record
	for {
		if err := rd.ReadInto(&rec); err != nil {
			if errors.Is(err, ringbuf.ErrClosed) || errors.Is(err, os.ErrClosed) {
				return
			}
			e.log.WithError(err).Warn("read kernel deny events")
			continue
		}
		now := e.cfg.Now()
		if e.cfg.OnDeny == nil {
			continue
		}
		if !lim.allow(now) {
			suppressed++
			e.suppressed.Add(1)
			continue
		}
		ev, err := decodeEvent(rec.RawSample, now)
		if err != nil {
			e.log.WithError(err).Warn("kernel deny event")
			continue
		}
		ev.Suppressed, suppressed = suppressed, 0
		ev.Identity = e.identityOf(ev.Cgroup)
		e.cfg.OnDeny(ev)
	}
}
