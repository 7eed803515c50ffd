package sidecar

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// wireDir holds the protocol's golden messages (node's TestWireGolden).
var wireDir = filepath.Join("..", "node", "testdata", "wire")

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
	// want, when set, is the request's bytes instead of the golden file's.
	want []byte
}

// replayAgent plays the node agent from golden bytes: it compares each line it reads with
// the next step's request and writes that step's replies. The channel gets the first
// difference, or nil once every step is played.
func replayAgent(t *testing.T, steps []wireStep) (string, <-chan error) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("AIRLOCK_PRIVILEGED_TESTS") == "1" {
			t.Fatal("AIRLOCK_PRIVILEGED_TESTS=1 but not root: the sidecar accepts only an agent socket held by root")
		}
		t.Skip("the sidecar accepts only an agent socket held by root: run as root")
	}
	name := fmt.Sprintf("@airlock-sidecar-wire-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	ln, err := net.Listen("unix", name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	wants := make([][]byte, len(steps))
	for i, s := range steps {
		if wants[i] = s.want; wants[i] == nil {
			wants[i] = readWire(t, s.request)
		}
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
			return fmt.Errorf("the sidecar sent\n%s\nwant (%s)\n%s", line, s.request, wants[i])
		}
		for _, reply := range s.replies {
			if _, err := c.Write(reply); err != nil {
				return err
			}
		}
	}
	return nil
}

// remoteConn is a connection whose peer is peer (all OriginalDst reads of it).
type remoteConn struct {
	net.Conn
	peer net.Addr
}

func (c remoteConn) RemoteAddr() net.Addr { return c.peer }

// TestNodeAgentWire plays node's golden conversation against the sidecar's Enforcer of the
// node agent: the sidecar's kernel spec and its operations become the golden requests byte
// for byte, and the golden replies come back as the sidecar's types (kernel metrics, audit
// events).
func TestNodeAgentWire(t *testing.T) {
	ok := func(id int) []byte { return []byte(fmt.Sprintf("{\"id\":%d}\n", id)) }
	name, done := replayAgent(t, []wireStep{
		{request: "request-hello.json", replies: [][]byte{readWire(t, "reply-welcome.json")}},
		{request: "request-allow.json", replies: [][]byte{readWire(t, "reply-ok.json")}},
		{request: "request-revoke.json", replies: [][]byte{ok(3)}},
		{request: "request-cidrs.json", replies: [][]byte{ok(4)}},
		{request: "request-report.json", replies: [][]byte{ok(5)}},
		{request: "request-counters.json", replies: [][]byte{readWire(t, "reply-deny.json"), readWire(t, "reply-counters.json")}},
		{request: "request-origdst.json", replies: [][]byte{readWire(t, "reply-origdst.json")}},
	})
	denies := make(chan audit.Event, 1)
	reg := prometheus.NewRegistry()
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
		Registerer:         reg,
		Sandbox:            "ns.pod",
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
		// A policy without identities: nothing to send (an older agent knows no identity_tcp).
		func() error { return enf.(identityTCPSetter).SetIdentityTCP(nil) },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("step %d: %v", i+2, err)
		}
	}
	checkKernelMetrics(t, reg) // the kernel metrics come from the agent at scrape time
	select {                   // the deny event came before the counters' reply, on the same stream
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

// checkKernelMetrics scrapes reg once and compares the kernel metrics with the golden
// counters' reply.
func checkKernelMetrics(t *testing.T, reg *prometheus.Registry) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		got[mf.GetName()] = mf.GetMetric()[0].GetCounter().GetValue()
	}
	want := map[string]float64{
		"airlock_kernel_egress_bytes_total":     1 << 40,
		"airlock_kernel_egress_packets_total":   70000,
		"airlock_kernel_connections_total":      12,
		"airlock_kernel_denies_total":           3,
		"airlock_kernel_deny_events_lost_total": 1,
	}
	for name, v := range want {
		if got[name] != v {
			t.Errorf("%s %v, want %v (from the agent's counters)", name, got[name], v)
		}
	}
}

func quietLogger() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

// TestNodeAgentWireIdentityTCP: a sidecar whose policy has identities tells the agent in its
// hello which container is which identity and each identity's raw TCP rules, again on a
// reload, and nil when a reload removes the identities: the golden bytes.
func TestNodeAgentWireIdentityTCP(t *testing.T) {
	withID := func(file string, golden, id int) []byte {
		return bytes.Replace(readWire(t, file), []byte(fmt.Sprintf(`{"id":%d,`, golden)), []byte(fmt.Sprintf(`{"id":%d,`, id)), 1)
	}
	welcome := []byte(`{"id":1,"welcome":{"version":1,"sandbox":"ns.pod","packet_guard":true}}` + "\n")
	name, done := replayAgent(t, []wireStep{
		{request: "request-hello-identity-tcp.json", replies: [][]byte{welcome}, want: withID("request-hello-identity-tcp.json", 13, 1)},
		{request: "request-identity-tcp.json", replies: [][]byte{[]byte("{\"id\":2}\n")}, want: withID("request-identity-tcp.json", 14, 2)},
		{request: "request-identity-tcp-off.json", replies: [][]byte{[]byte("{\"id\":3}\n")}, want: withID("request-identity-tcp-off.json", 15, 3)},
	})
	rules := map[string][]policy.CIDRRule{
		"author":   {{Prefix: netip.MustParsePrefix("198.18.7.0/24"), Ports: []uint16{22}, Raw: true}},
		"reviewer": {},
	}
	containers := map[string]string{"author": "author", "review": "reviewer"}
	spec := KernelSpec{Identities: true, IdentityTCP: rules, IdentityContainers: containers, Logger: quietLogger()}
	enf, err := AttachNodeAgent(name, 5*time.Second)(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer enf.Close()
	it, ok := enf.(identityTCPSetter)
	if !ok {
		t.Fatal("the node agent's Enforcer takes no identity raw TCP rules")
	}
	if err := it.SetIdentityTCP(rules); err != nil {
		t.Fatal(err)
	}
	if err := it.SetIdentityTCP(nil); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Error(err)
	}
}

func TestNodeAgentFailsClosed(t *testing.T) {
	t.Run("refused hello", func(t *testing.T) {
		refusal := []byte(`{"id":1,"error":"protocol version mismatch: the agent speaks version 2, the sidecar 1"}` + "\n")
		// The hello of an empty spec is the golden minimal hello (as the first request).
		hello := bytes.Replace(readWire(t, "request-hello-minimal.json"), []byte(`{"id":8,`), []byte(`{"id":1,`), 1)
		name, done := replayAgent(t, []wireStep{{request: "request-hello-minimal.json", replies: [][]byte{refusal}, want: hello}})
		_, err := AttachNodeAgent(name, 0)(KernelSpec{Logger: quietLogger()})
		if !errors.Is(err, ErrKernelUnavailable) || !strings.Contains(err.Error(), "version mismatch") {
			t.Errorf("got %v, want kernel enforcement unavailable (version mismatch)", err)
		}
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	t.Run("no agent", func(t *testing.T) {
		_, err := AttachNodeAgent("@airlock-sidecar-test-nobody", 0)(KernelSpec{Logger: quietLogger()})
		if !errors.Is(err, ErrKernelUnavailable) || !strings.Contains(err.Error(), "DaemonSet") {
			t.Errorf("got %v, want kernel enforcement unavailable, naming the DaemonSet", err)
		}
	})
}

// TestNodeAgentWireUsage: the meter reads the pod's identities' containers through the
// agent's usage operation (the golden bytes): each container of an identity becomes its
// identity's run, a container of none is left out; an agent older than the operation
// answers an error, after which the identities get no figures and the agent is not asked
// again.
func TestNodeAgentWireUsage(t *testing.T) {
	withID := func(file string, golden, id int) []byte {
		return bytes.Replace(readWire(t, file), []byte(fmt.Sprintf(`{"id":%d`, golden)), []byte(fmt.Sprintf(`{"id":%d`, id)), 1)
	}
	welcome := []byte(`{"id":1,"welcome":{"version":1,"sandbox":"ns.pod","packet_guard":true}}` + "\n")
	hello := withID("request-hello-minimal.json", 8, 1)
	name, done := replayAgent(t, []wireStep{
		{request: "request-hello-minimal.json", replies: [][]byte{welcome}, want: hello},
		{request: "request-usage.json", replies: [][]byte{withID("reply-usage.json", 16, 2)}, want: withID("request-usage.json", 16, 2)},
		{request: "request-usage.json", replies: [][]byte{[]byte(`{"id":3,"error":"unknown operation \"usage\""}` + "\n")}, want: withID("request-usage.json", 16, 3)},
	})
	enf, err := AttachNodeAgent(name, 5*time.Second)(KernelSpec{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer enf.Close()
	pu, ok := enf.(podUsage)
	if !ok {
		t.Fatal("the node agent's Enforcer reads no container usage")
	}
	ic := &identityContainers{u: pu, containers: map[string]string{"author": "writer"}, log: quietLogger()}
	got, err := ic.read()
	if err != nil || len(got) != 1 {
		t.Fatalf("read: %+v, %v; want author's run only (reviewer is mapped to no identity)", got, err)
	}
	if g := got[0]; g.Identity != "writer" || g.Run != "0123abcd" || g.CPUUserUsec != 1500000 || g.CPUSystemUsec != 250000 ||
		!g.HasMemory || g.MemoryBytes != 8<<20 || g.MemoryPeakBytes != 64<<20 {
		t.Errorf("author's run %+v, want identity writer with the golden figures", g)
	}
	for i := 0; i < 2; i++ { // the old agent's refusal, then not asked again
		if got, err := ic.read(); err != nil || got != nil {
			t.Errorf("read from an agent without the operation: %+v, %v; want nothing, no error", got, err)
		}
	}
	if err := <-done; err != nil {
		t.Error(err)
	}
}
