package proxy

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"
)

// serveOnce accepts one connection on a new loopback listener and runs f on it.
func serveOnce(t *testing.T, f func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		f(c)
	}()
	return l.Addr().String()
}

// rawTunnel opens a CONNECT tunnel to git.test:22, routed to addr, with idle as the
// proxy's IdleTimeout.
func rawTunnel(t *testing.T, addr string, idle time.Duration) (*harness, net.Conn) {
	t.Helper()
	egress := "    - name: raw\n      hosts: [\"git.test\"]\n      ports: [22]\n"
	h := newHarness(t, mustPolicy(t, policyDoc("raw", "enforce", egress)), func(c *Config) { c.IdleTimeout = idle })
	h.res.names["git.test"] = []netip.Addr{addrOther}
	h.mu.Lock()
	h.routes[netip.AddrPortFrom(addrOther, 22)] = addr
	h.mu.Unlock()
	c, resp := h.connect("git.test:22")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT got %d, want 200", resp.StatusCode)
	}
	return h, c
}

// TestSplicedTunnelCountsEveryByte: a transfer larger than one splice chunk arrives whole,
// and the audit event counts every byte each way.
func TestSplicedTunnelCountsEveryByte(t *testing.T) {
	const size = 2*spliceChunk + 12345
	addr := serveOnce(t, func(c net.Conn) {
		io.WriteString(c, "SSH-2.0-test\r\n")
		n, _ := io.Copy(io.Discard, io.LimitReader(c, 5))
		if n != 5 {
			return
		}
		io.CopyN(c, zeroReader{}, size)
	})
	h, c := rawTunnel(t, addr, 5*time.Second)
	br := bufio.NewReader(c)
	if line, err := br.ReadString('\n'); err != nil || line != "SSH-2.0-test\r\n" {
		t.Fatalf("banner %q %v", line, err)
	}
	io.WriteString(c, "hi!\r\n")
	n, err := io.Copy(io.Discard, br)
	if err != nil || n != size {
		t.Fatalf("read %d bytes (%v), want %d", n, err, size)
	}
	c.Close()
	checkEvent(t, h.log.wait(t, 1)[0], map[string]any{"kind": "connect", "decision": "allow",
		"bytes_up": float64(5), "bytes_down": float64(size + len("SSH-2.0-test\r\n"))})
}

// TestSlowTunnelOutlivesIdleTimeout: a tunnel whose server sends a burst (enough to switch
// to splice), then a byte every IdleTimeout/5 for several IdleTimeouts, stays open while the
// client says nothing: the idle timeout counts traffic in either direction, also when a
// splice run is still waiting for its chunk.
func TestSlowTunnelOutlivesIdleTimeout(t *testing.T) {
	// A byte every idle/5, for three idle timeouts: a scheduling stall of up to 4/5 of the
	// idle timeout (a loaded machine, -race) still leaves the tunnel busy.
	const idle = 500 * time.Millisecond
	const bytes = 15
	addr := serveOnce(t, func(c net.Conn) {
		if _, err := io.CopyN(c, zeroReader{}, spliceAfter); err != nil {
			return
		}
		tick := time.NewTicker(idle / 5)
		defer tick.Stop()
		for range bytes {
			<-tick.C
			if _, err := c.Write([]byte{'x'}); err != nil {
				return
			}
		}
	})
	h, c := rawTunnel(t, addr, idle)
	n, err := io.Copy(io.Discard, c)
	if n != spliceAfter+bytes {
		t.Fatalf("read %d bytes (%v) before the tunnel ended, want %d", n, err, spliceAfter+bytes)
	}
	c.Close()
	checkEvent(t, h.log.wait(t, 1)[0], map[string]any{"kind": "connect", "bytes_down": float64(spliceAfter + bytes)})
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestSplicedTunnelIdlesOut: after a burst that switched it to splice, a tunnel in which
// nothing moves either way is ended by the idle timeout.
func TestSplicedTunnelIdlesOut(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	addr := serveOnce(t, func(c net.Conn) {
		io.CopyN(c, zeroReader{}, 2*spliceAfter)
		<-hold
	})
	h, c := rawTunnel(t, addr, 150*time.Millisecond)
	if _, err := io.CopyN(io.Discard, c, 2*spliceAfter); err != nil {
		t.Fatalf("read the burst: %v", err)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read data from an idle tunnel")
	}
	checkEvent(t, h.log.wait(t, 1)[0], map[string]any{"kind": "connect", "bytes_down": float64(2 * spliceAfter)})
}

// TestTransparentTunnelSplicesUpload: a redirected TLS connection carrying a body larger
// than spliceAfter (so its upload splices after the classified ClientHello) arrives whole.
func TestTransparentTunnelSplicesUpload(t *testing.T) {
	h, od := newTransparentHarness(t, basicEgress)
	h.route(addrAPI, 443, h.upstream.tlsServer(t, echo(), "api.test"))
	od.set(netip.MustParseAddrPort("198.18.0.10:443"))
	c, err := net.Dial("tcp", h.taddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc := tls.Client(c, &tls.Config{ServerName: "api.test", RootCAs: h.upstream.pool})
	const size = 4 * spliceAfter
	fmt.Fprintf(tc, "POST /up HTTP/1.1\r\nHost: api.test\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", size)
	if _, err := io.CopyN(tc, zeroReader{}, size); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf(`POST api.test /up auth="" body=%d`, size); string(body) != want {
		t.Fatalf("got %q, want %q", body, want)
	}
	tc.Close()
	ev := h.log.wait(t, 1)[0]
	if up, _ := ev["bytes_up"].(float64); up < size {
		t.Errorf("bytes_up = %v, want at least the %d body bytes", ev["bytes_up"], size)
	}
}

// TestSilentClientAfterServerEOF: the server sends its bytes and ends its side; a client
// that never sends a byte (nor closes) is still let go of after the idle timeout, so no
// tunnel waits for its first bytes forever.
func TestSilentClientAfterServerEOF(t *testing.T) {
	addr := serveOnce(t, func(c net.Conn) { io.WriteString(c, "hello") })
	h, c := rawTunnel(t, addr, 150*time.Millisecond)
	if b, err := io.ReadAll(c); err != nil || string(b) != "hello" {
		t.Fatalf("read %q, %v; want hello and EOF", b, err)
	}
	// The client keeps its side open and says nothing: the tunnel must still end.
	checkEvent(t, h.log.wait(t, 1)[0], map[string]any{"kind": "connect", "bytes_down": float64(5), "bytes_up": float64(0)})
}
