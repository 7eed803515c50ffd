package node

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
)

// readWire reads one of the golden messages (TestWireGolden).
func readWire(t *testing.T, file string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "wire", file))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wireStep is one request a client must send, byte for byte, and the replies the agent
// answers it with.
type wireStep struct {
	request string   // golden file
	replies [][]byte // raw lines
}

// replayAgent plays the node agent from golden bytes: it compares each line it reads with
// the next step's request and writes that step's replies. The channel gets the first
// difference, or nil once every step is played.
func replayAgent(t *testing.T, steps []wireStep) (string, <-chan error) {
	t.Helper()
	requireRoot(t)
	name := testSocketName(t)
	ln, err := net.Listen("unix", name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	wants := make([][]byte, len(steps))
	for i, s := range steps {
		wants[i] = readWire(t, s.request)
	}
	done := make(chan error, 1)
	go func() { done <- replay(ln, steps, wants) }()
	return name, done
}

func replay(ln net.Listener, steps []wireStep, wants [][]byte) error {
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	r := bufio.NewReader(c)
	for i, s := range steps {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return fmt.Errorf("read the request of %s: %w", s.request, err)
		}
		if !bytes.Equal(line, wants[i]) {
			return fmt.Errorf("the client sent\n%s\nwant (%s)\n%s", line, s.request, wants[i])
		}
		for _, reply := range s.replies {
			if _, err := c.Write(reply); err != nil {
				return err
			}
		}
	}
	return nil
}

// goldenConversation is the golden conversation, as the replaying agent plays it.
func goldenConversation(t *testing.T) []wireStep {
	ok := func(id int) []byte { return []byte(fmt.Sprintf("{\"id\":%d}\n", id)) }
	return []wireStep{
		{"request-hello.json", [][]byte{readWire(t, "reply-welcome.json")}},
		{"request-allow.json", [][]byte{readWire(t, "reply-ok.json")}},
		{"request-revoke.json", [][]byte{ok(3)}},
		{"request-cidrs.json", [][]byte{ok(4)}},
		{"request-report.json", [][]byte{ok(5)}},
		{"request-counters.json", [][]byte{readWire(t, "reply-deny.json"), readWire(t, "reply-counters.json")}},
		{"request-origdst.json", [][]byte{readWire(t, "reply-origdst.json")}},
	}
}

// TestClientWire plays the golden conversation against the client: the bytes it sends for
// each operation are the golden requests, and it understands the golden replies (a new
// sidecar talks to an old agent, an old sidecar to a new agent).
func TestClientWire(t *testing.T) {
	name, done := replayAgent(t, goldenConversation(t))
	denies := make(chan DenyEvent, 1)
	c, err := Dial(ClientConfig{SocketName: name, Hello: *goldenHello(), OnDeny: func(d DenyEvent) { denies <- d }}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	steps := []func() error{
		func() error { return c.Allow(netip.MustParseAddr("198.18.0.10"), []uint16{80, 443}, goldenUntil) },
		func() error { return c.Revoke(netip.MustParseAddr("2001:db8::10"), []uint16{443}) },
		func() error {
			return c.SetCIDRs([]CIDR{{Prefix: "198.18.2.0/24", Ports: []uint16{22, 443}}, {Prefix: "198.18.3.0/24"}})
		},
		func() error { return c.SetReport(true) },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("step %d: %v", i+2, err)
		}
	}
	counters, err := c.Counters()
	if want := (Counters{Bytes: 1 << 40, Packets: 70000, Connections: 12, Denies: 3, EventsLost: 1}); err != nil || counters != want {
		t.Errorf("counters %+v, %v, want %+v", counters, err, want)
	}
	select { // the deny event came before the counters' reply, on the same stream
	case d := <-denies:
		if want := *goldenDeny(); d != want {
			t.Errorf("deny event %+v, want %+v", d, want)
		}
	default:
		t.Error("the golden deny event did not reach OnDeny before the counters")
	}
	dst, err := c.OriginalDst(netip.MustParseAddrPort("127.0.0.1:40000"))
	if err != nil || dst != netip.MustParseAddrPort("198.18.0.20:443") {
		t.Errorf("original destination %v, %v, want 198.18.0.20:443", dst, err)
	}
	if err := <-done; err != nil {
		t.Error(err)
	}
}
