//go:build linux

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/test/testnet"
)

// TestSandboxIdentityDNS: the DNS filter answers each identity by its own rules, told by the
// kernel which cgroup sent the query. reviewer may not resolve api.allowed.test (only
// allowed.test); author may (sbIdentityPolicy). Real resolver clients (glibc's getent, dig)
// run as each; a UDP socket handed from author to reviewer (SCM_RIGHTS) does not make
// reviewer's queries author's.
func TestSandboxIdentityDNS(t *testing.T) {
	runHostileOn(t, []string{"runc"}, func(t *testing.T, h *hostile) {
		pol := h.w.WriteFile(t, "identity-dns-policy-"+h.rt+".yaml", []byte(sbIdentityPolicy))
		name, _ := h.create(t, "iddns", "--policy", pol)
		t.Run("Resolvers", func(t *testing.T) { testIdentityResolvers(t, h, name) })
		t.Run("List", func(t *testing.T) { testIdentityList(t, h, name) })
		t.Run("HandOver", func(t *testing.T) { testIdentityDNSHandOver(t, h, name) })
	})
}

func testIdentityResolvers(t *testing.T, h *hostile, name string) {
	const getent = "getent hosts " + testnet.NameAPI + "; echo rc=$?"
	r := h.asSh(t, name, "reviewer", getent)
	if r.Code != 0 || strings.Contains(r.Stdout, "198.19.0.10") || !strings.Contains(r.Stdout, "rc=2") {
		t.Errorf("reviewer: getent hosts %s: %s, want it unresolved (rc=2)", testnet.NameAPI, r)
	}
	r = h.asSh(t, name, "author", getent)
	if r.Code != 0 || !strings.Contains(r.Stdout, "198.19.0.10") || !strings.Contains(r.Stdout, "rc=0") {
		t.Errorf("author: getent hosts %s: %s, want 198.19.0.10", testnet.NameAPI, r)
	}
	// reviewer still resolves its own name.
	r = h.asSh(t, name, "reviewer", "getent hosts "+testnet.NameAllowed)
	if r.Code != 0 || !strings.Contains(r.Stdout, "198.18.0.10") {
		t.Errorf("reviewer: getent hosts %s: %s, want 198.18.0.10", testnet.NameAllowed, r)
	}
	// dig shows the refusal's Extended DNS Error, which names the identity and the reason;
	// over TCP the query is its connection's, with the same answers.
	for _, transport := range []string{"+notcp", "+tcp"} {
		r = h.asSh(t, name, "reviewer", "dig +tries=1 +time=5 "+transport+" "+testnet.NameAPI+" A")
		for _, want := range []string{"status: REFUSED", "EDE: 15 (Blocked)", "(identity reviewer): no_rule"} {
			if !strings.Contains(r.Stdout, want) {
				t.Errorf("reviewer: dig %s %s: no %q in %s", transport, testnet.NameAPI, want, r)
			}
		}
		r = h.asSh(t, name, "author", "dig +tries=1 +time=5 +short "+transport+" "+testnet.NameAPI+" A")
		if strings.TrimSpace(r.Stdout) != "198.19.0.10" {
			t.Errorf("author: dig %s %s: %s, want 198.19.0.10", transport, testnet.NameAPI, r)
		}
	}
	// Forged environment chooses nothing.
	r = h.asSh(t, name, "reviewer", "AIRLOCK_IDENTITY=author "+getent)
	if strings.Contains(r.Stdout, "198.19.0.10") {
		t.Errorf("reviewer with AIRLOCK_IDENTITY=author resolved %s: %s", testnet.NameAPI, r)
	}
	seen := dnsEvents(t, h, name)
	for _, want := range []string{"reviewer deny no_rule", "author allow"} {
		if !seen[want] {
			t.Errorf("no DNS audit event %q for %s (have %v)", want, testnet.NameAPI, seen)
		}
	}
}

// testIdentityList: `sandbox list` counts each identity's proxy bytes and denials apart.
func testIdentityList(t *testing.T, h *hostile, name string) {
	if _, code, _ := parseCurl(t, h.asSh(t, name, "reviewer", curlScript("https://allowed.test:8443/read/x"))); code != 200 {
		t.Fatalf("reviewer GET /read/x: status %d, want 200", code)
	}
	info, ok := h.info(t, name)
	if !ok {
		t.Fatal("the sandbox is not listed")
	}
	got := map[string][2]int64{}
	for _, id := range info.Identities {
		got[id.Name] = [2]int64{id.ProxyBytes, id.Denies}
	}
	// reviewer: its read's bytes, and the DNS refusals of Resolvers; author: nothing refused.
	if r := got["reviewer"]; r[0] == 0 || r[1] == 0 {
		t.Errorf("reviewer: proxy bytes %d, denies %d; want both counted (list %+v)", r[0], r[1], info.Identities)
	}
	if a := got["author"]; a[1] != 0 {
		t.Errorf("author: denies %d, want 0 (list %+v)", a[1], info.Identities)
	}
}

// dnsEvents returns the DNS audit events of sandbox name for api.allowed.test, each as
// "IDENTITY DECISION REASON" (reason only for a denial).
func dnsEvents(t *testing.T, h *hostile, name string) map[string]bool {
	t.Helper()
	seen := map[string]bool{}
	for _, ev := range h.auditEvents(t, name) {
		if ev.Kind != audit.KindDNS || ev.Destination != testnet.NameAPI {
			continue
		}
		k := ev.Identity + " " + ev.Decision
		if ev.Decision == audit.DecisionDeny {
			k += " " + ev.Reason
		}
		seen[strings.TrimSpace(k)] = true
	}
	return seen
}

// dnsHandOverPy is run by two identities at once: "give KIND PATH" makes a UDP socket and
// passes it with SCM_RIGHTS to the first process that connects to the unix socket PATH:
// fresh (unused), used (author asked allowed.test on it, sent with the filter's address),
// connected (connected to the filter). "use KIND PATH" receives it and asks api.allowed.test
// on it: with the filter's address (sendto), or on a connected one with send (connected) or
// with sendto (connected-sendto), and prints the answer's rcode and the reason its Extended
// DNS Error names.
const dnsHandOverPy = `
import random, socket, struct, sys
role, kind, path = sys.argv[1:4]
ns = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")][0]
fam = socket.AF_INET6 if ":" in ns else socket.AF_INET
server = (ns, 53)
def query(name):
    q = struct.pack(">HHHHHH", random.randrange(1, 65536), 0x0100, 1, 0, 0, 1)
    q += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
    return q + b"\0" + struct.pack(">HHIH", 41, 1232, 0, 0)
def rcode(s):
    r = s.recv(1500)
    why = [w for w in ("identity_unknown", "no_rule") if w.encode() in r]
    return " ".join([{0: "NOERROR", 3: "NXDOMAIN", 5: "REFUSED"}.get(r[3] & 0xf, "OTHER")] + why)
if role == "give":
    s = socket.socket(fam, socket.SOCK_DGRAM)
    s.settimeout(5)
    if kind == "used":
        s.sendto(query("allowed.test"), server)
        if rcode(s) != "NOERROR":
            sys.exit("author's own query on the socket failed")
    elif kind.startswith("connected"):
        s.connect(server)
    l = socket.socket(socket.AF_UNIX)
    l.bind(path); l.listen(1)
    import os; os.chmod(path, 0o777)
    print("ready", flush=True)
    c, _ = l.accept()
    socket.send_fds(c, [b"x"], [s.fileno()])
    c.recv(1)
else:
    c = socket.socket(socket.AF_UNIX); c.connect(path)
    _, fds, _, _ = socket.recv_fds(c, 1, 1)
    s = socket.socket(fileno=fds[0])
    s.settimeout(5)
    q = query("api.allowed.test")
    if kind == "connected":
        s.send(q)
    else:
        s.sendto(q, server)
    print(rcode(s))
`

// testIdentityDNSHandOver: a UDP query's identity is its sender's when it is sent with the
// filter's address, and the connecting task's on a connected socket (like a TCP connection's).
// A socket tasks of two identities sent on is no one's: its queries are refused
// (identity_unknown). So reviewer asking on a socket author made gets reviewer's answer
// (fresh), or identity_unknown (used; connected, sent with the address); only on a socket
// author connected and handed over is reviewer's query author's (it takes author's
// cooperation: reviewer cannot take a descriptor of author's, see TestSandboxIdentities'
// Boundary).
func testIdentityDNSHandOver(t *testing.T, h *hostile, name string) {
	py := h.inside("dns-handover-" + h.rt + ".py")
	if err := os.WriteFile(filepath.Join(h.out, filepath.Base(py)), []byte(dnsHandOverPy), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ kind, want string }{
		{"fresh", "REFUSED no_rule"},
		{"used", "REFUSED identity_unknown"},
		{"connected-sendto", "REFUSED identity_unknown"},
		{"connected", "NOERROR"},
	} {
		path := "/tmp/dns-handover-" + tc.kind
		h.startScript(t, name, "author", "python3 "+py+" give "+tc.kind+" "+path)
		r := h.asSh(t, name, "reviewer", "python3 "+py+" use "+tc.kind+" "+path)
		if got := strings.TrimSpace(r.Stdout); r.Code != 0 || got != tc.want {
			t.Errorf("%s UDP socket from author used by reviewer: %q, want %s: %s", tc.kind, got, tc.want, r)
		}
	}
	seen := dnsEvents(t, h, name)
	for _, want := range []string{"reviewer deny no_rule", "deny identity_unknown", "author allow"} {
		if !seen[want] {
			t.Errorf("no DNS audit event %q for %s (have %v)", want, testnet.NameAPI, seen)
		}
	}
}
