package node

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeAgent plays the node agent on an abstract socket: it welcomes every hello, answers
// every request, and hands what it received to the test.
type fakeAgent struct {
	ln    net.Listener
	reqs  chan Request
	conns chan net.Conn
	// refuse, when set, is the error every hello gets.
	refuse string
}

// requireRoot skips a test of the client against a socket of this process: the client
// accepts only an agent socket held by root.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("AIRLOCK_PRIVILEGED_TESTS") == "1" {
			t.Fatal("AIRLOCK_PRIVILEGED_TESTS=1 but not root: the client accepts only an agent socket held by root")
		}
		t.Skip("the client accepts only an agent socket held by root: run as root")
	}
}

// testSocketName is a fresh abstract socket name.
func testSocketName(t *testing.T) string {
	id := make([]byte, 6)
	_, _ = rand.Read(id)
	return "@airlock-node-client-test-" + hex.EncodeToString(id)
}

func startFakeAgent(t *testing.T, refuse string) (*fakeAgent, string) {
	t.Helper()
	requireRoot(t)
	name := testSocketName(t)
	ln, err := net.Listen("unix", name)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeAgent{ln: ln, reqs: make(chan Request, 16), conns: make(chan net.Conn, 4), refuse: refuse}
	t.Cleanup(func() { ln.Close() })
	go f.serve()
	return f, name
}

func (f *fakeAgent) serve() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.conns <- c
		go f.session(c)
	}
}

func (f *fakeAgent) session(c net.Conn) {
	pc := NewConn(c)
	for {
		var r Request
		if err := pc.Read(&r); err != nil {
			return
		}
		f.reqs <- r
		out := Reply{ID: r.ID}
		switch {
		case r.Op == OpHello && f.refuse != "":
			out.Error = f.refuse
		case r.Op == OpHello:
			out.Welcome = &Welcome{Version: ProtocolVersion, Sandbox: "ns.pod"}
		case r.Op == OpCounters:
			out.Counters = &Counters{Denies: 3}
			_ = pc.Write(Reply{Deny: &DenyEvent{Hook: "connect4", Reason: "not_allowed", Dest: "198.18.0.20:80", Proto: 6}})
		}
		_ = pc.Write(out)
	}
}

func (f *fakeAgent) next(t *testing.T) Request {
	t.Helper()
	select {
	case r := <-f.reqs:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the fake agent got no request")
	}
	return Request{}
}

func TestClientRedialsWithItsCurrentTables(t *testing.T) {
	f, name := startFakeAgent(t, "")
	denies := make(chan DenyEvent, 4)
	hello := Hello{Version: 99, Listeners: []Listener{{Addr: "127.0.0.1:3128", Kind: "proxy"}}}
	c, err := Dial(ClientConfig{SocketName: name, Hello: hello, OnDeny: func(d DenyEvent) { denies <- d }}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if h := f.next(t); h.Op != OpHello || h.Hello.Version != ProtocolVersion || len(h.Hello.Listeners) != 1 || h.Hello.Listeners[0].Addr != "127.0.0.1:3128" {
		t.Fatalf("first request %+v, want a version %d hello with the proxy listener", h, ProtocolVersion)
	}
	if err := c.SetCIDRs([]CIDR{{Prefix: "198.18.1.0/24", Ports: []uint16{5432}}}); err != nil {
		t.Fatal(err)
	}
	f.next(t)
	if err := c.SetReport(true); err != nil {
		t.Fatal(err)
	}
	f.next(t)
	counters, err := c.Counters()
	if err != nil || counters.Denies != 3 {
		t.Errorf("counters %+v, %v, want 3 denies (from the agent)", counters, err)
	}
	f.next(t)
	select { // the deny event came before the counters' reply, on the same stream
	case d := <-denies:
		if d.Dest != "198.18.0.20:80" || d.Hook != "connect4" {
			t.Errorf("deny event %+v", d)
		}
	default:
		t.Error("the agent's deny event did not reach OnDeny before the counters")
	}

	(<-f.conns).Close() // the agent restarts
	h := f.next(t)      // the redial's hello
	if h.Op != OpHello || !h.Hello.Report || len(h.Hello.CIDRs) != 1 || h.Hello.CIDRs[0].Prefix != "198.18.1.0/24" {
		t.Errorf("hello after the redial %+v, want report mode and the CIDR set since the start", h.Hello)
	}
	// Until the client has read the welcome, calls fail (fail closed); then they succeed.
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := c.Allow(netip.MustParseAddr("198.18.0.10"), []uint16{80}, time.Now().Add(time.Minute))
		if err == nil {
			break
		}
		if !errors.Is(err, ErrUnreachable) || time.Now().After(deadline) {
			t.Fatalf("allow after the redial: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r := f.next(t); r.Op != OpAllow || r.Addr != "198.18.0.10" {
		t.Errorf("request %+v, want the allow", r)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second close: %v, want nil (idempotent)", err)
	}
	if err := c.Revoke(netip.MustParseAddr("198.18.0.10"), nil); !errors.Is(err, net.ErrClosed) {
		t.Errorf("revoke after close: %v, want net.ErrClosed", err)
	}
}

func TestClientFailsClosed(t *testing.T) {
	t.Run("refused hello", func(t *testing.T) {
		_, name := startFakeAgent(t, ErrVersion.Error())
		_, err := Dial(ClientConfig{SocketName: name}, 0)
		if err == nil || !strings.Contains(err.Error(), "version mismatch") {
			t.Errorf("got %v, want the agent's refusal (version mismatch)", err)
		}
	})
	t.Run("no agent", func(t *testing.T) {
		_, err := Dial(ClientConfig{SocketName: testSocketName(t)}, 0)
		if err == nil || !strings.Contains(err.Error(), "dial") {
			t.Errorf("got %v, want the dial's error", err)
		}
	})
	t.Run("socket not held by root", func(t *testing.T) {
		requireRoot(t)
		// A process of the pod (another user) that bound the name before the agent: the
		// client refuses it before a byte is sent (the hello would tell it the tables).
		name := testSocketName(t)
		ln, err := listenAs(65534, name)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		_, err = Dial(ClientConfig{SocketName: name}, 0)
		if err == nil || !strings.Contains(err.Error(), "uid 65534, not root") {
			t.Errorf("got %v, want a refusal of the socket held by uid 65534", err)
		}
	})
}

// listenAs listens on the abstract socket name with the effective uid uid, as a process of
// the pod would: SO_PEERCRED reports the credentials of the listen call. Only the calling
// thread changes its uid (a raw setresuid, not Go's all-threads one), and the goroutine
// ends locked to it, so the runtime discards the thread.
func listenAs(uid int, name string) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread goes with the goroutine
		keep := ^uintptr(0)    // -1: leave unchanged
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keep, uintptr(uid), keep); e != 0 {
			ch <- result{err: fmt.Errorf("setresuid: %w", e)}
			return
		}
		ln, err := net.Listen("unix", name)
		ch <- result{ln, err}
	}()
	r := <-ch
	return r.ln, r.err
}
