package sidecar

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/internal/nodeproto"
	"github.com/airlock-dev/airlock/policy"
)

// fakeAgent plays the node agent on an abstract socket: it welcomes every hello, answers
// every request, and hands what it received to the test.
type fakeAgent struct {
	ln    net.Listener
	reqs  chan nodeproto.Request
	conns chan net.Conn
	// refuse, when set, is the error every hello gets.
	refuse string
}

func startFakeAgent(t *testing.T, refuse string) (*fakeAgent, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the sidecar accepts only an agent socket held by root: run as root")
	}
	id := make([]byte, 6)
	_, _ = rand.Read(id)
	name := "@airlock-sidecar-test-" + hex.EncodeToString(id)
	ln, err := net.Listen("unix", name)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeAgent{ln: ln, reqs: make(chan nodeproto.Request, 16), conns: make(chan net.Conn, 4), refuse: refuse}
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
		go func() {
			pc := nodeproto.NewConn(c)
			for {
				var r nodeproto.Request
				if err := pc.Read(&r); err != nil {
					return
				}
				f.reqs <- r
				out := nodeproto.Reply{ID: r.ID}
				switch {
				case r.Op == nodeproto.OpHello && f.refuse != "":
					out.Error = f.refuse
				case r.Op == nodeproto.OpHello:
					out.Welcome = &nodeproto.Welcome{Version: nodeproto.Version, Sandbox: "ns.pod"}
				case r.Op == nodeproto.OpCounters:
					out.Counters = &nodeproto.Counters{Denies: 3}
					_ = pc.Write(nodeproto.Reply{Deny: &nodeproto.DenyEvent{Hook: "connect4", Reason: "not_allowed", Dest: "198.18.0.20:80", Proto: 6}})
				}
				_ = pc.Write(out)
			}
		}()
	}
}

func (f *fakeAgent) next(t *testing.T) nodeproto.Request {
	t.Helper()
	select {
	case r := <-f.reqs:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the fake agent got no request")
	}
	return nodeproto.Request{}
}

func quietLogger() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

func TestNodeAgentClientRedialsWithItsCurrentTables(t *testing.T) {
	f, name := startFakeAgent(t, "")
	denies := make(chan audit.Event, 4)
	reg := prometheus.NewRegistry()
	spec := KernelSpec{
		Sandbox:    "ns.pod",
		Listeners:  []KernelListener{{Addr: netip.MustParseAddrPort("127.0.0.1:3128"), Kind: ListenerProxy}},
		OnDeny:     func(e audit.Event) { denies <- e },
		Logger:     quietLogger(),
		Registerer: reg,
	}
	enf, err := AttachNodeAgent(name, 5*time.Second)(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer enf.Close()
	if h := f.next(t); h.Op != nodeproto.OpHello || h.Hello.Version != nodeproto.Version || len(h.Hello.Listeners) != 1 || h.Hello.Listeners[0].Addr != "127.0.0.1:3128" {
		t.Fatalf("first request %+v, want a version %d hello with the proxy listener", h, nodeproto.Version)
	}
	rules := []policy.CIDRRule{{Prefix: netip.MustParsePrefix("198.18.1.0/24"), Ports: []uint16{5432}}}
	if err := enf.SetCIDRs(rules); err != nil {
		t.Fatal(err)
	}
	f.next(t)
	if err := enf.SetReport(true); err != nil {
		t.Fatal(err)
	}
	f.next(t)
	mfs, err := reg.Gather() // the kernel metrics come from the agent at scrape time
	if err != nil {
		t.Fatal(err)
	}
	denied := -1.0
	for _, mf := range mfs {
		if mf.GetName() == "airlock_kernel_denies_total" {
			denied = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if denied != 3 {
		t.Errorf("airlock_kernel_denies_total %v, want 3 (from the agent's counters)", denied)
	}
	f.next(t)
	select {
	case ev := <-denies:
		if ev.Destination != "198.18.0.20:80" || ev.Decision != audit.DecisionDeny {
			t.Errorf("deny event %+v", ev)
		}
	case <-time.After(5 * time.Second):
		t.Error("the agent's deny event did not reach the audit log")
	}

	(<-f.conns).Close() // the agent restarts
	h := f.next(t)      // the redial's hello
	if h.Op != nodeproto.OpHello || !h.Hello.Report || len(h.Hello.CIDRs) != 1 || h.Hello.CIDRs[0].Prefix != "198.18.1.0/24" {
		t.Errorf("hello after the redial %+v, want report mode and the CIDR set since the start", h.Hello)
	}
	// Until the client has read the welcome, calls fail (fail closed); then they succeed.
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := enf.Allow(netip.MustParseAddr("198.18.0.10"), []uint16{80}, time.Now().Add(time.Minute))
		if err == nil {
			break
		}
		if !errors.Is(err, ErrNodeAgent) || time.Now().After(deadline) {
			t.Fatalf("allow after the redial: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r := f.next(t); r.Op != nodeproto.OpAllow || r.Addr != "198.18.0.10" {
		t.Errorf("request %+v, want the allow", r)
	}
}

func TestNodeAgentClientFailsClosed(t *testing.T) {
	t.Run("refused hello", func(t *testing.T) {
		_, name := startFakeAgent(t, nodeproto.ErrVersion.Error())
		_, err := AttachNodeAgent(name, 0)(KernelSpec{Logger: quietLogger()})
		if !errors.Is(err, ErrKernelUnavailable) || !strings.Contains(err.Error(), "version mismatch") {
			t.Errorf("got %v, want kernel enforcement unavailable (version mismatch)", err)
		}
	})
	t.Run("no agent", func(t *testing.T) {
		_, err := AttachNodeAgent("@airlock-sidecar-test-nobody", 0)(KernelSpec{Logger: quietLogger()})
		if !errors.Is(err, ErrKernelUnavailable) {
			t.Errorf("got %v, want kernel enforcement unavailable", err)
		}
	})
}
