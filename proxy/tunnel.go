package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/egress"
	"github.com/airlock-dev/airlock/policy"
)

// relayBuffer is the copy buffer of each direction of a plain tunnel.
const relayBuffer = 32 << 10

// tunnel is one CONNECT tunnel or transparent connection, from its decision to its end. It
// writes the tunnel's one audit event when it ends, or when it is refused.
type tunnel struct {
	p      *Proxy
	kind   string         // metric kind: connect or transparent
	pol    *policy.Policy // the policy in force when the tunnel started
	at     time.Time      // Config.Now at the start, the audit event's time
	start  time.Time      // monotonic start, for the duration
	client string         // the client's address
	dest   string         // host:port as the client asked for it
	host   string         // normalised host the decision was made on
	port   int
	d      policy.Decision // the connection-level decision
	target egress.Target   // checked upstream addresses
	ups    *upstreams      // intercepted tunnels: transports to target
	reqID  string          // the tunnel's request id (record.go)
	up     atomic.Int64
	down   atomic.Int64

	// unknown refuses every request of a connection whose identity cannot be told (policyFor).
	unknown *policy.Decision

	// mu guards the fields below.
	mu       sync.Mutex
	status   int
	addr     string
	refusal  *policy.Decision
	errText  string
	recorded bool // the tunnel's event was written when it was refused (record.go)

	once sync.Once
}

// newTunnel starts the bookkeeping of a tunnel from client, with a new request id.
func (p *Proxy) newTunnel(kind string, client net.Addr) *tunnel {
	return p.newTunnelID(kind, client, requestID(nil))
}

// newTunnelID starts the bookkeeping of a tunnel from client with request id reqID.
func (p *Proxy) newTunnelID(kind string, client net.Addr, reqID string) *tunnel {
	t := &tunnel{p: p, kind: kind, at: p.cfg.Now(), start: time.Now(), reqID: reqID}
	if client != nil {
		t.client = client.String()
	}
	t.pol, t.unknown = p.policyFor(t.client)
	return t
}

// refuse records the decision that refused the tunnel.
func (t *tunnel) refuse(d policy.Decision) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.refusal == nil {
		t.refusal = &d
	}
}

func (t *tunnel) setStatus(status int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.status = status
}

func (t *tunnel) setError(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.errText = err.Error()
}

// outcome is the audit decision and the policy decision behind it.
func (t *tunnel) outcome() (string, policy.Decision) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.refusal != nil:
		return audit.DecisionDeny, *t.refusal
	case t.d.WouldDeny:
		return audit.DecisionReport, t.d
	}
	return audit.DecisionAllow, t.d
}

// finish writes the tunnel's audit event and metrics, once.
func (t *tunnel) finish() {
	t.once.Do(func() {
		decision, d := t.outcome()
		ev := t.event(decision, d)
		t.mu.Lock()
		recorded := t.recorded
		t.mu.Unlock()
		if !recorded { // refused with an answer: its event was written then (respond)
			t.p.cfg.Audit.Log(ev)
		}
		t.p.metrics.observe(t.kind, decision, d.Rule, ev.Identity, ev.Duration)
	})
}

// relay copies bytes both ways between client and upstream until both directions have
// ended, an error ends both, or neither direction moved for IdleTimeout. screen, when set,
// reads the client's first bytes (from a reader of classifyBuffer bytes) before anything
// goes upstream and returns them to be sent first, or an error that ends the tunnel.
// Upstream bytes flow from the start, so protocols where the server speaks first work.
// Where both ends are TCP sockets, a direction moves its bytes with splice(2) (see
// splicePipe); otherwise through a user-space buffer.
func (p *Proxy) relay(t *tunnel, client, upstream net.Conn, screen func(*bufio.Reader) ([]byte, error)) {
	idle := &idleClock{idle: p.cfg.IdleTimeout}
	idle.progress()
	total := p.metrics.bytesOf(t.pol.IdentityName())
	// The client-to-upstream direction runs in a goroutine of its own; the other in this
	// one, whose stack has already grown (one goroutine start and wake-up fewer per tunnel).
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		src, first := client, []byte(nil)
		if screen != nil {
			// The client's first bytes are due within IdleTimeout of the tunnel's last
			// traffic, as any later ones: the other direction's progress moves the deadline.
			idle.screening.Store(&client)
			_ = client.SetReadDeadline(time.Now().Add(idle.idle))
			br := bufio.NewReaderSize(client, classifyBuffer)
			var err error
			first, err = screen(br)
			idle.screening.Store(nil)
			if err != nil {
				_ = client.Close()
				_ = upstream.Close()
				return
			}
			// The reader's leftover goes first too; then the client is read directly (and
			// can be spliced).
			if n := br.Buffered(); n > 0 {
				rest, _ := br.Peek(n)
				first = append(first, rest...)
			}
		}
		pipe(upstream, src, first, idle, &t.up, total.up)
	}()
	pipe(client, upstream, nil, idle, &t.down, total.down)
	wg.Wait()
}

// pipe copies src to dst, first sending first. At src's EOF it half-closes dst so the other
// direction can finish; on any other error, or when the tunnel has idled out, it closes
// both, which ends the other direction too.
func pipe(dst, src net.Conn, first []byte, idle *idleClock, n *atomic.Int64, total prometheus.Counter) {
	if len(first) > 0 {
		_ = dst.SetWriteDeadline(time.Now().Add(idle.idle))
		if _, err := dst.Write(first); err != nil {
			_ = dst.Close()
			_ = src.Close()
			return
		}
		n.Add(int64(len(first)))
		total.Add(float64(len(first)))
	}
	// A short tunnel (a handshake and a request) is cheapest through the buffer; once a
	// tunnel has carried spliceAfter bytes this way, the rest goes through splice(2).
	dt, st := tcpOf(dst, false), tcpOf(src, true)
	limit := int64(-1)
	if dt != nil && st != nil {
		limit = spliceAfter
	}
	more, err := copyPipe(dst, src, idle, n, total, limit)
	if err == nil && more {
		err = splicePipe(dt, st, idle, n, total)
	}
	if err != nil {
		_ = dst.Close()
		_ = src.Close()
		return
	}
	closeWrite(dst)
}

// spliceChunk bounds one splice run, so the byte counters move at least every chunk.
const spliceChunk = 4 << 20

// spliceAfter is how many bytes a direction copies through its buffer before it splices:
// for a few small records two splice(2) calls cost more than a read and a write.
const spliceAfter = 64 << 10

// splicePipe moves src's bytes to dst in the kernel: TCPConn.ReadFrom splices from an
// io.LimitedReader over a *net.TCPConn. Each run is bounded in bytes (spliceChunk, for the
// counters) and in time (a read deadline of IdleTimeout/8), so a direction that waits
// notices when the whole tunnel has idled out, and a direction that moves bytes slowly
// still reports them. A write to dst stuck for IdleTimeout ends the tunnel, as in copyPipe
// (splice may have taken bytes from src that it could not deliver). It returns nil at src's
// EOF.
func splicePipe(dst, src *net.TCPConn, idle *idleClock, n *atomic.Int64, total prometheus.Counter) error {
	lr := &io.LimitedReader{R: src}
	tick := max(idle.idle/8, time.Millisecond)
	for {
		now := time.Now()
		writeBy := now.Add(idle.idle)
		_ = src.SetReadDeadline(now.Add(tick))
		_ = dst.SetWriteDeadline(writeBy)
		lr.N = spliceChunk
		k, err := dst.ReadFrom(lr)
		if k > 0 {
			idle.progress()
			n.Add(k)
			total.Add(float64(k))
		}
		switch {
		case err == nil && lr.N > 0:
			return nil // src's EOF ended the run before the chunk did
		case err == nil:
			continue
		case isTimeout(err) && time.Now().Before(writeBy) && !idle.expired():
			// The read tick: nothing was waiting in the pipe. (A write that timed out may
			// have left bytes in it, which are lost: that ends the tunnel, below.)
			continue
		}
		return err
	}
}

// copyPipe copies src to dst through a pooled buffer until src's EOF (nil) or an error or
// the tunnel idling out; with limit ≥ 0 it stops once it has copied limit bytes and
// returns more, for the caller to go on another way.
func copyPipe(dst, src net.Conn, idle *idleClock, n *atomic.Int64, total prometheus.Counter, limit int64) (more bool, err error) {
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	buf := *bp
	var armed time.Time
	var copied int64
	for {
		// Deadlines are pushed at most once per idle/16, to keep timer work off the hot path.
		if now := time.Now(); now.Sub(armed) >= idle.idle/16 {
			_ = src.SetReadDeadline(now.Add(idle.idle))
			_ = dst.SetWriteDeadline(now.Add(idle.idle))
			armed = now
		}
		k, err := src.Read(buf)
		if k > 0 {
			idle.progress()
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return false, werr
			}
			n.Add(int64(k))
			total.Add(float64(k))
			copied += int64(k)
		}
		switch {
		case errors.Is(err, io.EOF):
			return false, nil
		case err == nil:
			if limit >= 0 && copied >= limit {
				return true, nil
			}
			continue
		case isTimeout(err) && !idle.expired():
			armed = time.Time{} // the other direction moved: wait again
			continue
		}
		return false, err
	}
}

// tcpOf returns the TCP socket under c, or nil. For reading (the source of a copy) only
// when reading c is reading that socket, with nothing buffered in front of it; writing c
// always writes the socket.
func tcpOf(c net.Conn, read bool) *net.TCPConn {
	switch v := c.(type) {
	case *net.TCPConn:
		return v
	case *headConn:
		if !read {
			tc, _ := v.Conn.(*net.TCPConn)
			return tc
		}
		return v.rawTCP()
	case *checkedConn:
		return tcpOf(v.Conn, read)
	}
	return nil
}

// closeWrite half-closes c when it can; a connection that cannot stays open until the other
// direction ends.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

// idleClock is when either direction of a tunnel last moved bytes: each direction waits with
// a deadline and, when it passes, ends the tunnel only if neither direction moved for idle.
type idleClock struct {
	idle time.Duration
	last atomic.Int64 // unix nanoseconds of the last progress
	// screening is the client while relay's screen reads its first bytes (with a plain
	// read deadline): progress pushes that deadline, at most once per idle/16 (pushed).
	screening atomic.Pointer[net.Conn]
	pushed    atomic.Int64
}

// progress records that bytes moved now.
func (c *idleClock) progress() {
	now := time.Now().UnixNano()
	c.last.Store(now)
	if sc := c.screening.Load(); sc != nil && now-c.pushed.Load() >= int64(c.idle/16) {
		c.pushed.Store(now)
		_ = (*sc).SetReadDeadline(time.Unix(0, now).Add(c.idle))
	}
}

// expired reports whether no bytes moved for idle.
func (c *idleClock) expired() bool {
	return time.Now().UnixNano()-c.last.Load() >= int64(c.idle)
}

// checkedConn is an upstream connection to an address the guard checked.
type checkedConn struct {
	net.Conn
	addr netip.AddrPort
}

// countingBody counts a body's bytes into n and total; with limit >= 0 it fails with
// errBodyTooLarge past limit bytes. onClose, when set, runs after Close.
type countingBody struct {
	rc      io.ReadCloser
	limit   int64
	n       *atomic.Int64
	total   prometheus.Counter
	onClose func()
}

func (b *countingBody) Read(p []byte) (int, error) {
	if b.limit >= 0 {
		left := b.limit - b.n.Load()
		if int64(len(p)) > left+1 {
			p = p[:left+1]
		}
	}
	k, err := b.rc.Read(p)
	if b.limit >= 0 && b.n.Load()+int64(k) > b.limit {
		k = int(b.limit - b.n.Load())
		err = errBodyTooLarge
	}
	b.n.Add(int64(k))
	b.total.Add(float64(k))
	return k, err
}

// copyBuffers are the buffers of countingBody.WriteTo. goproxy copies every response body
// with io.Copy into a ResponseWriter that hides io.ReaderFrom, which would allocate a fresh
// 32 KiB buffer per response: most of the proxy's garbage (measured by make bench).
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, relayBuffer); return &b }}

// WriteTo copies the body to w through a pooled buffer, counting as Read does.
func (b *countingBody) WriteTo(w io.Writer) (int64, error) {
	buf := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(buf)
	// The wrappers hide WriteTo and ReadFrom so that CopyBuffer uses buf (and does not call
	// back into this method).
	return io.CopyBuffer(struct{ io.Writer }{w}, struct{ io.Reader }{b}, *buf)
}

func (b *countingBody) Close() error {
	err := b.rc.Close()
	if b.onClose != nil {
		b.onClose()
	}
	return err
}

// openTunnel runs the stages every tunnel passes before a byte reaches upstream: decide on
// the name and port (connection level), take a tunnel slot, resolve the name once and check
// every address. want is the transparent original address (or the zero Addr); ctx ends when
// the client leaves, which ends a wait for an approval or the resolver. It returns
// nil when the tunnel may open, holding a slot the caller releases, or the response that
// refuses it.
func (p *Proxy) openTunnel(ctx context.Context, t *tunnel, req policy.Request, want netip.Addr) *http.Response {
	t.pol, t.d = p.decide(ctx, t.pol, t.unknown, req, t.kind)
	t.host, t.port = t.d.Host, req.Port
	if t.host == "" {
		t.host = req.Host
	}
	if !t.d.Allowed() {
		t.refuse(t.d)
		return t.respond(denyResponse(nil, t.d, t.pol, t.host, t.port))
	}
	if !p.acquireTunnel() {
		t.refuse(tunnelLimit(t.d.Rule, t.host, t.port))
		return t.respond(failResponse(nil, policy.ReasonTunnelLimit, t.host, t.port))
	}
	tg, err := p.resolve(ctx, t.pol, t.host, t.port, want)
	if err != nil {
		p.releaseTunnel()
		return t.respond(p.tunnelFailure(t, nil, err))
	}
	t.target = tg
	if resp := t.recordDecision(); resp != nil { // write-before-respond (record.go)
		p.releaseTunnel()
		return resp
	}
	return nil
}

// settle passes a decision through the approval stage, if there is one.
func (p *Proxy) settle(ctx context.Context, pol *policy.Policy, req policy.Request, d policy.Decision, via string) (*policy.Policy, policy.Decision) {
	if p.cfg.Approvals == nil {
		return pol, d
	}
	return p.cfg.Approvals.Settle(ctx, pol, req, d, via)
}

// tunnelLimit is the refusal of a tunnel beyond MaxTunnels.
func tunnelLimit(rule, host string, port int) policy.Decision {
	return policy.Decision{Reason: policy.ReasonTunnelLimit, Rule: rule, Host: host, Port: port,
		Detail: "too many tunnels are open; retry later"}
}

// connectTunnel dials the tunnel's checked addresses; ctx ends when the client leaves.
func (p *Proxy) connectTunnel(ctx context.Context, t *tunnel) (net.Conn, error) {
	c, ap, err := p.connect(ctx, t.target)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	t.addr = ap.String()
	t.mu.Unlock()
	return c, nil
}

// tunnelFailure maps a resolve or dial error to the response refusing the tunnel.
func (p *Proxy) tunnelFailure(t *tunnel, r *http.Request, err error) *http.Response {
	if d, ok := asDenial(err, t.d.Rule); ok {
		t.refuse(d)
		return denyResponse(r, d, t.pol, t.host, t.port)
	}
	t.setError(err)
	switch {
	case errors.Is(err, egress.ErrUpstreamProxy): // before timeouts: the proxy is what failed
		return failResponse(r, policy.ReasonUpstreamProxy, t.host, t.port)
	case isTimeout(err):
		return failResponse(r, policy.ReasonTimeout, t.host, t.port)
	case errors.Is(err, egress.ErrResolve):
		return failResponse(r, policy.ReasonResolveFailed, t.host, t.port)
	}
	return failResponse(r, policy.ReasonConnectFailed, t.host, t.port)
}

// respond records the status of the response refusing the tunnel.

// acquireTunnel takes one of MaxTunnels slots, or reports there is none.
func (p *Proxy) acquireTunnel() bool {
	if p.open.Add(1) > int64(p.cfg.MaxTunnels) {
		p.open.Add(-1)
		return false
	}
	p.metrics.openTunnels.Inc()
	return true
}

// releaseTunnel gives a slot back.
func (p *Proxy) releaseTunnel() {
	p.open.Add(-1)
	p.metrics.openTunnels.Dec()
}
