package sidecar

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// wireDir holds the protocol's golden messages (see nodeproto's TestWireGolden).
var wireDir = filepath.Join("..", "nodeproto", "testdata", "wire")

func readWire(t *testing.T, file string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(wireDir, file))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wireStep is one request the client must send, byte for byte, and the replies the agent
// answers it with.
type wireStep struct {
	request string   // golden file
	replies [][]byte // raw lines
}

// replayAgent plays the node agent from golden bytes: it compares each line it reads with
// the next step's request and writes that step's replies. It reports the first difference.
func replayAgent(t *testing.T, steps []wireStep) (string, <-chan error) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the sidecar accepts only an agent socket held by root: run as root")
	}
	name := fmt.Sprintf("@airlock-wire-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	ln, err := net.Listen("unix", name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		r := bufio.NewReader(c)
		for _, s := range steps {
			line, err := r.ReadBytes('\n')
			if err != nil {
				done <- fmt.Errorf("read the request of %s: %w", s.request, err)
				return
			}
			if want := readWire(t, s.request); !bytes.Equal(line, want) {
				done <- fmt.Errorf("the client sent\n%s\nwant (%s)\n%s", line, s.request, want)
				return
			}
			for _, reply := range s.replies {
				if _, err := c.Write(reply); err != nil {
					done <- err
					return
				}
			}
		}
		done <- nil
	}()
	return name, done
}

// remoteConn is a connection whose peer is peer (all OriginalDst reads of it).
type remoteConn struct {
	net.Conn
	peer net.Addr
}

func (c remoteConn) RemoteAddr() net.Addr { return c.peer }

// TestNodeAgentClientWire plays the golden conversation against the client: the bytes the
// sidecar sends for each operation are the golden requests, and it understands the golden
// replies (a new sidecar talks to an old agent, an old sidecar to a new agent).
func TestNodeAgentClientWire(t *testing.T) {
	ok := func(id int) []byte { return []byte(fmt.Sprintf("{\"id\":%d}\n", id)) }
	name, done := replayAgent(t, []wireStep{
		{"request-hello.json", [][]byte{readWire(t, "reply-welcome.json")}},
		{"request-allow.json", [][]byte{readWire(t, "reply-ok.json")}},
		{"request-revoke.json", [][]byte{ok(3)}},
		{"request-cidrs.json", [][]byte{ok(4)}},
		{"request-report.json", [][]byte{ok(5)}},
		{"request-counters.json", [][]byte{readWire(t, "reply-deny.json"), readWire(t, "reply-counters.json")}},
		{"request-origdst.json", [][]byte{readWire(t, "reply-origdst.json")}},
	})
	denies := make(chan audit.Event, 1)
	spec := KernelSpec{
		Listeners: []KernelListener{
			{Addr: netip.MustParseAddrPort("127.0.0.1:3128"), Kind: ListenerProxy},
			{Addr: netip.MustParseAddrPort("127.0.0.1:3129"), Kind: ListenerTransparent},
			{Addr: netip.MustParseAddrPort("127.0.0.1:53"), UDP: true, Kind: ListenerDNS},
			{Addr: netip.MustParseAddrPort("[::1]:8080"), Kind: ListenerLLM},
		},
		CIDRs: []policy.CIDRRule{
			{Prefix: netip.MustParsePrefix("198.18.1.0/24"), Ports: []uint16{5432}},
			{Prefix: netip.MustParsePrefix("2001:db8::/48"), Raw: true},
		},
		RequirePacketGuard: true,
		Transparent:        &KernelTransparent{Addr4: netip.MustParseAddrPort("127.0.0.1:3129"), Ports: []uint16{80, 443}},
		OnDeny:             func(e audit.Event) { denies <- e },
		Logger:             quietLogger(),
	}
	enf, err := AttachNodeAgent(name, 5*time.Second)(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer enf.Close()
	until := time.Date(2026, 11, 23, 12, 0, 0, 123456789, time.UTC)
	steps := []func() error{
		func() error { return enf.Allow(netip.MustParseAddr("198.18.0.10"), []uint16{80, 443}, until) },
		func() error { return enf.Revoke(netip.MustParseAddr("2001:db8::10"), []uint16{443}) },
		func() error {
			return enf.SetCIDRs([]policy.CIDRRule{{Prefix: netip.MustParsePrefix("198.18.2.0/24"), Ports: []uint16{22, 443}},
				{Prefix: netip.MustParsePrefix("198.18.3.0/24")}})
		},
		func() error { return enf.SetReport(true) },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("step %d: %v", i+2, err)
		}
	}
	counters, err := enf.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if want := (KernelCounters{Bytes: 1 << 40, Packets: 70000, Connections: 12, Denies: 3, EventsLost: 1}); counters != want {
		t.Errorf("counters %+v, want %+v", counters, want)
	}
	select { // the deny event came before the counters' reply, on the same stream
	case ev := <-denies:
		if ev.Destination != "198.18.0.20:80" || ev.Decision != audit.DecisionReport || ev.Reason != "kernel_not_allowed" {
			t.Errorf("deny event %+v, want a report-mode kernel denial of 198.18.0.20:80", ev)
		}
	default:
		t.Error("the golden deny event did not reach the audit log before the counters")
	}
	peer := remoteConn{peer: &net.TCPAddr{IP: net.IP{127, 0, 0, 1}, Port: 40000}}
	dst, err := enf.OriginalDst(peer)
	if err != nil || dst != netip.MustParseAddrPort("198.18.0.20:443") {
		t.Errorf("original destination %v, %v, want 198.18.0.20:443", dst, err)
	}
	if err := <-done; err != nil {
		t.Error(err)
	}
}
