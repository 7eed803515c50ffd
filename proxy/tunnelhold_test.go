package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"
)

// openWay is one way a client opens a tunnel or sends a request that may be held: it
// connects, sends its opening bytes, and returns the connection.
type openWay struct {
	name string
	opt  harnessOpt // nil: none
	open func(t *testing.T, h *harness, od *origDst, host string, port uint16, addr netip.Addr) net.Conn
}

// helloFor is a TLS ClientHello record naming host.
func helloFor(host string) []byte {
	return tlsRecord(recordTypeHandshake, helloMessage(sniExt(host)))
}

func dialProxy(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// tunnelWays are the three ways a tunnel opens: a plain CONNECT (the fast path), a CONNECT
// through net/http and goproxy, and a redirected TLS connection (its ClientHello sent).
var tunnelWays = []openWay{
	{"CONNECT", nil, func(t *testing.T, h *harness, _ *origDst, host string, port uint16, _ netip.Addr) net.Conn {
		c := dialProxy(t, h.addr)
		io.WriteString(c, "CONNECT "+net.JoinHostPort(host, strconv.Itoa(int(port)))+" HTTP/1.1\r\n\r\n")
		return c
	}},
	{"CONNECT via net/http", nil, func(t *testing.T, h *harness, _ *origDst, host string, port uint16, _ netip.Addr) net.Conn {
		h.p.slowConnect.Store(true)
		c := dialProxy(t, h.addr)
		io.WriteString(c, "CONNECT "+net.JoinHostPort(host, strconv.Itoa(int(port)))+" HTTP/1.1\r\n\r\n")
		return c
	}},
	{"transparent TLS", nil, func(t *testing.T, h *harness, od *origDst, host string, port uint16, addr netip.Addr) net.Conn {
		od.set(netip.AddrPortFrom(addr, port))
		c := dialProxy(t, h.taddr)
		c.Write(helloFor(host))
		return c
	}},
}

// waitEnded waits for what ended a hold, failing the test after waitTimeout.
func waitEnded(t *testing.T, ended chan string, name string) string {
	t.Helper()
	select {
	case why := <-ended:
		return why
	case <-time.After(waitTimeout):
		t.Errorf("%s: the hold did not end within %v of its client closing", name, waitTimeout)
		return ""
	}
}

// TestHeldTunnelEndsWithItsClient: a tunnel held for an approval ends when its client goes,
// whichever way it came (before, a tunnel's decision was settled with a context nothing
// ended, so a held CONNECT outlived its client and could open on a late grant).
func TestHeldTunnelEndsWithItsClient(t *testing.T) {
	for _, way := range tunnelWays {
		t.Run(way.name, func(t *testing.T) {
			a := &holdingApprovals{held: make(chan context.Context, 4), ended: make(chan string, 4), release: make(chan struct{})}
			od := &origDst{}
			h := newHarness(t, mustPolicy(t, policyDoc("hold", "enforce", basicEgress)), func(c *Config) {
				c.Approvals, c.OriginalDst = a, od
			})
			t.Cleanup(func() { close(a.release) }) // runs before Shutdown: a hold the fix missed ends
			c := way.open(t, h, od, "unlisted.test", 443, addrOther)
			select {
			case <-a.held:
			case <-time.After(waitTimeout):
				t.Fatal("the tunnel was not held for an approval")
			}
			c.Close()
			if why := waitEnded(t, a.ended, way.name); why != "client gone" {
				t.Errorf("%s: the hold ended %q, want by its client going", way.name, why)
			}
		})
	}
}

// dialHold holds every dial of a harness until its context is cancelled or release is closed
// (a dial timing out waits for release).
type dialHold struct {
	entered chan netip.AddrPort
	ended   chan string
	release chan struct{}
	once    sync.Once
}

// free lets every held dial (and every later one) go on.
func (d *dialHold) free() { d.once.Do(func() { close(d.release) }) }

func holdDials(h *harness) *dialHold {
	d := &dialHold{entered: make(chan netip.AddrPort, 4), ended: make(chan string, 4), release: make(chan struct{})}
	h.mu.Lock()
	h.hold = func(ctx context.Context, ap netip.AddrPort) error {
		d.entered <- ap
		select {
		case <-ctx.Done():
			if !errors.Is(ctx.Err(), context.Canceled) {
				<-d.release // the dial's own timeout is not what the tests wait for
				d.ended <- "released"
				return ctx.Err()
			}
			d.ended <- "client gone"
			return ctx.Err()
		case <-d.release:
			d.ended <- "released"
			return nil
		}
	}
	h.mu.Unlock()
	h.t.Cleanup(d.free)
	return d
}

func (d *dialHold) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-d.entered:
	case <-time.After(waitTimeout):
		t.Fatal("no dial started")
	}
}

// TestDialEndsWithItsClient: a tunnel or a request (with nothing left to read of it) waiting
// for its upstream dial ends when its client goes, on every path: its audit event is written
// while the dial is still held, and the proxy's own dials are cancelled (net/http's Transport
// finishes a dial its request no longer waits for, to keep the connection: there the request
// ends, not the dial).
func TestDialEndsWithItsClient(t *testing.T) {
	ways := append([]openWay{}, tunnelWays...)
	for _, fast := range []bool{true, false} {
		name := map[bool]string{true: "GET, strict path", false: "GET, net/http"}[fast]
		opt := func(c *Config) { c.DisableHTTP1FastPath = !fast }
		ways = append(ways, openWay{name, opt, func(t *testing.T, h *harness, _ *origDst, _ string, _ uint16, _ netip.Addr) net.Conn {
			c := dialProxy(t, h.addr)
			io.WriteString(c, "GET http://plain.test/x HTTP/1.1\r\nHost: plain.test\r\n\r\n")
			return c
		}})
	}
	for _, way := range ways {
		t.Run(way.name, func(t *testing.T) {
			od := &origDst{}
			h := newHarness(t, mustPolicy(t, policyDoc("hold", "enforce", basicEgress)), func(c *Config) {
				c.OriginalDst = od
				if way.opt != nil {
					way.opt(c)
				}
			})
			d := holdDials(h)
			c := way.open(t, h, od, "api.test", 443, addrAPI)
			d.waitEntered(t)
			c.Close()
			if ev := h.log.wait(t, 1); len(ev) != 1 {
				t.Errorf("%s: events %v, want the one of the request or tunnel", way.name, ev)
			}
			if way.name == "GET, net/http" {
				return
			}
			if why := waitEnded(t, d.ended, way.name); why != "client gone" {
				t.Errorf("%s: the dial ended %q, want by its client going", way.name, why)
			}
		})
	}
}

// TestBytesSentWhileTunnelOpens: bytes a client sends before its tunnel is established (a
// ClientHello right behind the CONNECT) are read by the watch for its leaving and still
// reach the upstream first, in order.
func TestBytesSentWhileTunnelOpens(t *testing.T) {
	for i, way := range tunnelWays {
		t.Run(way.name, func(t *testing.T) {
			od := &origDst{}
			h := newHarness(t, mustPolicy(t, policyDoc("hold", "enforce", basicEgress)), func(c *Config) { c.OriginalDst = od })
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			h.mu.Lock()
			h.routes[netip.AddrPortFrom(addrAPI, 443)] = l.Addr().String()
			h.mu.Unlock()
			d := holdDials(h)

			hello := helloFor("api.test")
			c := way.open(t, h, od, "api.test", 443, addrAPI)
			d.waitEntered(t)
			var sent []byte
			if i < 2 { // a CONNECT: the ClientHello right behind it, before the 200
				sent = hello
			} else { // transparent: the ClientHello is out; the client sends more
				sent = []byte("more bytes of the client")
			}
			if _, err := c.Write(sent); err != nil {
				t.Fatal(err)
			}
			// The bytes are on their way before the dial may finish; the watch reads them
			// (or they wait in the socket): either way they must come out in order.
			d.free()
			up, err := l.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer up.Close()
			want := sent
			if i == 2 {
				want = append(append([]byte{}, hello...), sent...)
			}
			_ = up.SetReadDeadline(time.Now().Add(waitTimeout))
			got := make([]byte, len(want))
			if _, err := io.ReadFull(up, got); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("upstream got %q, %v; want %q", got, err, want)
			}
			if i < 2 {
				resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
				if err != nil || resp.StatusCode != http.StatusOK {
					t.Fatalf("CONNECT answered %v, %v; want 200", resp, err)
				}
			}
		})
	}
}
