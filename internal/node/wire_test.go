package node

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// update rewrites testdata/wire. Never run it to make a failing TestWireGolden pass: the
// golden files are the bytes the sidecars already injected into running pods send and
// expect. A change of the bytes is a new ProtocolVersion, not a new golden file.
var update = flag.Bool("update", false, "rewrite the golden files in testdata/wire (only with a new protocol version)")

// goldenUntil and goldenDenyTime are the times in the golden messages.
var (
	goldenUntil    = time.Date(2026, 11, 23, 12, 0, 0, 123456789, time.UTC)
	goldenDenyTime = time.Date(2026, 11, 23, 12, 0, 1, 500, time.UTC)
)

// goldenHello is the hello of the golden conversation: every field set, every listener kind.
func goldenHello() *Hello {
	return &Hello{
		Version: 1,
		Listeners: []Listener{
			{Addr: "127.0.0.1:3128", Kind: "proxy"},
			{Addr: "127.0.0.1:3129", Kind: "transparent"},
			{Addr: "127.0.0.1:53", UDP: true, Kind: "dns"},
			{Addr: "[::1]:8080", Kind: "llm"},
		},
		CIDRs: []CIDR{
			{Prefix: "198.18.1.0/24", Ports: []uint16{5432}},
			{Prefix: "2001:db8::/48", Raw: true},
		},
		RequirePacketGuard: true,
		Transparent:        &Transparent{Addr4: "127.0.0.1:3129", Ports: []uint16{80, 443}},
	}
}

// goldenIdentityTCP is the identities' raw TCP of the golden messages: one identity with a
// rule, one without any.
func goldenIdentityTCP() *IdentityTCP {
	return &IdentityTCP{
		Containers: map[string]string{"author": "author", "review": "reviewer"},
		Rules: map[string][]CIDR{
			"author":   {{Prefix: "198.18.7.0/24", Ports: []uint16{22}, Raw: true}},
			"reviewer": {},
		},
	}
}

// goldenDeny is the deny event of the golden conversation.
func goldenDeny() *DenyEvent {
	return &DenyEvent{Time: goldenDenyTime, Hook: "connect4", Reason: "not_allowed", PID: 4242, UID: 1000,
		Comm: "curl", Dest: "198.18.0.20:80", Proto: 6, Report: true, Suppressed: 2}
}

// wireGolden are the protocol's messages, each with the file holding its bytes on the wire.
// The requests 1 to 7 and their replies are one conversation (the one the sidecar's client
// test plays); the rest are the other shapes a message takes.
var wireGolden = []struct {
	file string
	msg  any
}{
	{"request-hello.json", &Request{ID: 1, Op: OpHello, Hello: goldenHello()}},
	{"request-allow.json", &Request{ID: 2, Op: OpAllow, Addr: "198.18.0.10", Ports: []uint16{80, 443}, Until: goldenUntil}},
	{"request-revoke.json", &Request{ID: 3, Op: OpRevoke, Addr: "2001:db8::10", Ports: []uint16{443}}},
	{"request-cidrs.json", &Request{ID: 4, Op: OpCIDRs, CIDRs: []CIDR{{Prefix: "198.18.2.0/24", Ports: []uint16{22, 443}}, {Prefix: "198.18.3.0/24"}}}},
	{"request-report.json", &Request{ID: 5, Op: OpReport, Report: true}},
	{"request-counters.json", &Request{ID: 6, Op: OpCounters}},
	{"request-origdst.json", &Request{ID: 7, Op: OpOrigDst, Addr: "127.0.0.1:40000"}},
	{"request-hello-minimal.json", &Request{ID: 8, Op: OpHello, Hello: &Hello{Version: 1, CIDRs: []CIDR{}}}},
	// Identities in pods: fields and operations added to version 1, omitted when unused.
	{"request-hello-identities.json", &Request{ID: 10, Op: OpHello, Hello: &Hello{Version: 1, CIDRs: []CIDR{}, Identities: true}}},
	{"request-peer.json", &Request{ID: 11, Op: OpPeer, Addr: "127.0.0.1:40001"}},
	{"request-identities.json", &Request{ID: 12, Op: OpIdentities, Identities: true}},
	// Each identity's raw TCP in pods: added to version 1 after them, omitted when unused.
	{"request-hello-identity-tcp.json", &Request{ID: 13, Op: OpHello, Hello: &Hello{Version: 1, CIDRs: []CIDR{}, Identities: true,
		IdentityTCP: goldenIdentityTCP()}}},
	{"request-identity-tcp.json", &Request{ID: 14, Op: OpIdentityTCP, IdentityTCP: goldenIdentityTCP()}},
	{"request-identity-tcp-off.json", &Request{ID: 15, Op: OpIdentityTCP}},
	// Each identity's compute usage in pods: added to version 1 after them.
	{"request-usage.json", &Request{ID: 16, Op: OpUsage}},
	// Identities of DNS queries: added to version 1 after them, omitted when unused.
	{"request-peer-query.json", &Request{ID: 17, Op: OpPeer, Addr: "127.0.0.1:40002", Query: goldenQuery()}},

	{"reply-welcome.json", &Reply{ID: 1, Welcome: &Welcome{Version: 1, Sandbox: "ns.pod", PacketGuard: true}}},
	{"reply-ok.json", &Reply{ID: 2}},
	{"reply-counters.json", &Reply{ID: 6, Counters: &Counters{Bytes: 1 << 40, Packets: 70000, Connections: 12, Denies: 3, EventsLost: 1}}},
	{"reply-deny.json", &Reply{Deny: goldenDeny()}},
	{"reply-origdst.json", &Reply{ID: 7, OrigDst: "198.18.0.20:443"}},
	{"reply-welcome-adopted.json", &Reply{ID: 8, Welcome: &Welcome{Version: 1, Sandbox: "ns.pod", Adopted: true,
		PacketGuardError: "the BPF LSM is not enabled"}}},
	{"reply-error.json", &Reply{ID: 9, Error: "protocol version mismatch: the agent speaks version 1, the sidecar 2"}},
	{"reply-peer.json", &Reply{ID: 11, Container: "reviewer"}},
	{"reply-usage.json", &Reply{ID: 16, Usage: []ContainerUsage{
		{Container: "author", ID: "0123abcd", CPUUserUsec: 1500000, CPUSystemUsec: 250000, Memory: true, MemoryBytes: 8 << 20, MemoryPeakBytes: 64 << 20},
		{Container: "reviewer", ID: "4567ef01", CPUUserUsec: 42},
	}}},
	{"reply-usage-none.json", &Reply{ID: 17}},
	{"reply-deny-minimal.json", &Reply{Deny: &DenyEvent{Time: goldenDenyTime, Hook: "sock_create", Reason: "protocol_not_allowed", Proto: 0}}},
}

// TestWireGolden holds the bytes on the wire: each message encodes to its golden file's bytes
// exactly, and the golden bytes decode (strictly) to the message. A new agent must serve the
// sidecars an older webhook injected, and the other way round.
func TestWireGolden(t *testing.T) {
	for _, g := range wireGolden {
		t.Run(g.file, func(t *testing.T) {
			path := filepath.Join("testdata", "wire", g.file)
			var buf bytes.Buffer
			if err := NewConn(&buf).Write(g.msg); err != nil {
				t.Fatal(err)
			}
			if *update {
				if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), want) {
				t.Errorf("encoded\n%s\nwant (%s)\n%s", buf.Bytes(), path, want)
			}
			got := reflect.New(reflect.TypeOf(g.msg).Elem()).Interface()
			if err := NewConn(bytes.NewBuffer(want)).Read(got); err != nil {
				t.Fatalf("decode %s: %v", path, err)
			}
			if !reflect.DeepEqual(got, g.msg) {
				t.Errorf("%s decodes to\n%+v\nwant\n%+v", path, got, g.msg)
			}
		})
	}
}

// goldenQuery is the DNS message ID of request-peer-query.json.
func goldenQuery() *uint16 {
	id := uint16(0xbeef)
	return &id
}
