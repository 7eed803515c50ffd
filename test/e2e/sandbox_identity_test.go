//go:build linux

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

// The identities of issue 34: one sandbox, two agents, each run with `sandbox exec --as`.
// reviewer may only read (GET) allowed.test's /read/ paths and holds no secret; author has
// the sandbox's rules and the token api.allowed.test's rule injects.
const sbIdentityPolicy = `apiVersion: airlock/v1
kind: EgressPolicy
metadata:
  name: sandbox-identities
spec:
  egress:
    - name: allowed
      hosts: ["allowed.test"]
      ports: [80, 443, 8443]
    - name: api
      hosts: ["api.allowed.test"]
      ports: [443]
      inject:
        - header: Authorization
          value: 'Bearer {{ secret "upstream-token" }}'
  secrets:
    upstream-token: {env: E2E_SANDBOX_TOKEN}
  identities:
    reviewer:
      egress:
        - name: read-only
          hosts: ["allowed.test"]
          ports: [443, 8443]
          http:
            - methods: [GET, HEAD]
              paths: ["/read/**"]
    author:
      secrets: [upstream-token]
`

// TestSandboxIdentities runs reviewer and author in one sandbox, on runc and crun: each gets
// its own rules, credentials and audit trail, and neither can act as the other.
func TestSandboxIdentities(t *testing.T) {
	runHostile(t, func(t *testing.T, h *hostile) {
		pol := h.w.WriteFile(t, "identity-policy-"+h.rt+".yaml", []byte(sbIdentityPolicy))
		name, _ := h.create(t, "id", "--policy", pol)
		t.Run("Rules", func(t *testing.T) { testIdentityRules(t, h, name) })
		t.Run("Credentials", func(t *testing.T) { testIdentityCredentials(t, h, name) })
		t.Run("Boundary", func(t *testing.T) { testIdentityBoundary(t, h, name) })
		t.Run("HandOver", func(t *testing.T) { testIdentityHandOver(t, h, name) })
		t.Run("Unknown", func(t *testing.T) {
			r := h.exec(t, []string{"--as", "nobody"}, name, nil, nil, "true")
			if r.Code == 0 || !strings.Contains(r.Stderr, `has no identity "nobody"`) {
				t.Errorf("exec --as an identity the policy lacks: %s", r)
			}
		})
	})
}

// asSh runs script in sandbox name as identity (with the env file's proxy settings).
func (h *hostile) asSh(t *testing.T, name, identity, script string) cliResult {
	t.Helper()
	var flags []string
	if identity != "" {
		flags = []string{"--as", identity}
	}
	return h.exec(t, flags, name, nil, nil, "sh", "-c", script)
}

// identityDenial is the part of the proxy's JSON refusal the tests read.
type identityDenial struct {
	Error    string `json:"error"`
	Reason   string `json:"reason"`
	Rule     string `json:"rule"`
	Identity string `json:"identity"`
}

func testIdentityRules(t *testing.T, h *hostile, name string) {
	tests := []struct {
		identity, method, path string
		want                   int
		reason                 string
	}{
		{"reviewer", "GET", "/read/x", 200, ""},
		{"reviewer", "POST", "/read/x", 403, "method_not_allowed"},
		{"reviewer", "GET", "/write/x", 403, "path_not_allowed"},
		{"author", "POST", "/write/x", 200, ""},
		{"", "POST", "/write/x", 200, ""}, // without --as: the sandbox's own policy
	}
	for _, tc := range tests {
		r := h.asSh(t, name, tc.identity, curlScript("-X "+tc.method+" https://allowed.test:8443"+tc.path))
		body, code, _ := parseCurl(t, r)
		if code != tc.want {
			t.Errorf("%s %s %s: status %d, want %d: %s", tc.identity, tc.method, tc.path, code, tc.want, r)
			continue
		}
		if tc.want == 403 {
			var d identityDenial
			if err := json.Unmarshal([]byte(body), &d); err != nil || d.Reason != tc.reason || d.Identity != tc.identity {
				t.Errorf("%s %s %s: refusal %q, want reason %s naming identity %s", tc.identity, tc.method, tc.path, body, tc.reason, tc.identity)
			}
		}
	}
	// Nothing reviewer sends or sets makes it author: not a header, not the environment.
	forged := "AIRLOCK_IDENTITY=author AIRLOCK_SANDBOX_IDENTITY=author " + curlScript(
		"-X POST -H 'X-Airlock-Identity: author' -H 'X-Airlock-As: author' https://allowed.test:8443/write/x")
	if _, code, _ := parseCurl(t, h.asSh(t, name, "reviewer", forged)); code != 403 {
		t.Errorf("reviewer with forged identity headers and environment: status %d, want 403", code)
	}
	// The audit trail says who asked: reviewer's requests are intercepted (its rule has L7
	// entries), author's tunnel is passed through (the sandbox's rule has none).
	seen := map[string]bool{}
	for _, ev := range h.auditEvents(t, name) {
		switch {
		case ev.Kind == audit.KindHTTP && strings.HasPrefix(ev.Path, "/write/"):
			seen["http "+ev.Identity+" "+ev.Decision] = true
		case ev.Kind == audit.KindConnect && ev.Destination == "allowed.test:8443":
			seen["connect "+ev.Identity+" "+ev.Decision] = true
		}
	}
	for _, want := range []string{"http reviewer deny", "connect reviewer allow", "connect author allow"} {
		if !seen[want] {
			t.Errorf("no audit event %q for allowed.test:8443 (have %v)", want, seen)
		}
	}
}

func testIdentityCredentials(t *testing.T, h *hostile, name string) {
	before := len(h.w.API.Requests())
	r := h.asSh(t, name, "author", curlScript("https://api.allowed.test/cred"))
	if _, code, _ := parseCurl(t, r); code != 200 {
		t.Fatalf("author to api.allowed.test: %s", r)
	}
	reqs := h.w.API.Requests()[before:]
	if len(reqs) != 1 || reqs[0].Header.Get("Authorization") != "Bearer "+sbToken {
		t.Fatalf("author's request did not carry the token upstream (%d requests)", len(reqs))
	}
	// reviewer's rules do not name api.allowed.test at all; and no request of it carries
	// the token, whatever it sends.
	before = len(h.w.API.Requests())
	r = h.asSh(t, name, "reviewer", curlScript("-H 'Authorization: Bearer airlock-placeholder:upstream-token' https://api.allowed.test/cred"))
	if _, code, connect := parseCurl(t, r); code != 403 && connect != 403 {
		t.Errorf("reviewer to api.allowed.test: %s, want 403", r)
	}
	for _, req := range h.w.API.Requests()[before:] {
		if strings.Contains(req.Header.Get("Authorization"), sbToken) {
			t.Errorf("a reviewer request reached upstream with author's token")
		}
	}
}

// testIdentityBoundary: a reviewer process cannot signal, trace, read, take descriptors from
// or write the memory of an author process, become its uid, or leave its own cgroup; and its
// children stay reviewer.
func testIdentityBoundary(t *testing.T, h *hostile, name string) {
	pid, uid := h.startAs(t, name, "author")
	// The control: the probe's attempts work where nothing keeps them out (author on its own).
	if r := h.exec(t, []string{"--as", "author"}, name, nil, nil, h.probe, "cross", pid, uid); !strings.Contains(r.Stdout, "cross.signal0=ok") {
		t.Fatalf("author signalling its own process: %s", r)
	}
	r := h.exec(t, []string{"--as", "reviewer"}, name, nil, nil, h.probe, "cross", pid, uid)
	if r.Code != 0 {
		t.Fatalf("probe as reviewer: %s", r)
	}
	wantNoneSucceeded(t, "reviewer against author", r, "cross.signal0", "cross.sigcont", "cross.ptrace", "cross.environ",
		"cross.pidfd_getfd", "cross.process_vm_writev", "cross.setresuid", "cross.mount_cgroup2")
	r = h.asSh(t, name, "reviewer", `id -u; cat /proc/self/cgroup | grep '^0::'; sh -c 'cat /proc/self/cgroup' | grep '^0::'
echo $$ > /sys/fs/cgroup/cgroup.procs 2>/dev/null && echo moved=ok || echo moved=denied
ls /sys/fs/cgroup | wc -l`)
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if r.Code != 0 || len(lines) != 5 {
		t.Fatalf("reviewer's view of itself: %s", r)
	}
	if lines[0] == uid || lines[0] == "0" {
		t.Errorf("reviewer runs as uid %s; author is %s: want a uid of its own", lines[0], uid)
	}
	for _, l := range lines[1:3] {
		if l != "0::/airlock-id-reviewer" {
			t.Errorf("reviewer (or its child) in cgroup %q, want 0::/airlock-id-reviewer", l)
		}
	}
	if lines[3] != "moved=denied" || lines[4] != "0" {
		t.Errorf("reviewer moving itself: %q; /sys/fs/cgroup holds %s entries, want masked (0)", lines[3], lines[4])
	}
}

// startAs starts a shell as identity that waits on its stdin until t ends, and returns its
// pid inside the sandbox and its uid.
func (h *hostile) startAs(t *testing.T, name, identity string) (pid, uid string) {
	t.Helper()
	args := []string{"sandbox", "exec", "--state-dir", h.stateDir, "--as", identity, name, "--", "sh", "-c", "echo $$ $(id -u); read x"}
	line, err := h.startHeld(t, "the "+identity+" shell", nil, args...)
	f := strings.Fields(line)
	if err != nil || len(f) != 2 {
		t.Fatalf("%s shell: first line %q, %v", identity, line, err)
	}
	return f[0], f[1]
}

// startHeld starts `airlock args...` with its stdin held open until t ends (closing it ends
// the command, which must then exit within sbCommandTimeout) and returns the first line it
// prints. what names the command in failures; stderr (nil: none) gets its standard error.
func (h *hostile) startHeld(t *testing.T, what string, stderr io.Writer, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := h.command(ctx, nil, args...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(sbCommandTimeout): // a bound, not synchronisation
			t.Errorf("%s did not exit after its stdin closed", what)
		}
		cancel()
	})
	return bufio.NewReader(out).ReadString('\n')
}

// auditEvents reads sandbox name's audit log.
func (h *hostile) auditEvents(t *testing.T, name string) []audit.Event {
	t.Helper()
	f, err := os.Open(h.stateDir + "/sandboxes/" + name + "/audit.log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var evs []audit.Event
	if err := audit.Read(io.Reader(f), "audit.log", func(ev audit.Event, _ int) error { evs = append(evs, ev); return nil }); err != nil {
		t.Fatalf("read the audit log: %v", err)
	}
	return evs
}

// handOverPy is run by two identities at once: "give KIND PATH" makes a TCP socket (KIND
// connected: connected to the proxy; unconnected: not) and passes it with SCM_RIGHTS to the
// first process that connects to the unix socket PATH; "use KIND PATH" receives it, connects
// it to the proxy when it is unconnected, sends a POST to allowed.test's /write/ path through
// it and prints the response's status code.
const handOverPy = `
import os, socket, sys
from urllib.parse import urlsplit
role, kind, path = sys.argv[1:4]
u = urlsplit(os.environ["HTTP_PROXY"])
proxy = (u.hostname, u.port)
if role == "give":
    s = socket.socket()
    if kind == "connected":
        s.connect(proxy)
    l = socket.socket(socket.AF_UNIX)
    l.bind(path); os.chmod(path, 0o777); l.listen(1)
    print("ready", flush=True)
    c, _ = l.accept()
    socket.send_fds(c, [b"x"], [s.fileno()])
    c.recv(1)
else:
    c = socket.socket(socket.AF_UNIX); c.connect(path)
    _, fds, _, _ = socket.recv_fds(c, 1, 1)
    s = socket.socket(fileno=fds[0])
    if kind == "unconnected":
        s.connect(proxy)
    s.sendall(b"POST http://allowed.test/write/handover HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    print(s.recv(64).split(b" ")[1].decode())
`

// testIdentityHandOver: a socket's identity is taken when it connects, from the task that
// connects. An unconnected socket author hands reviewer is reviewer's once reviewer connects
// it; a connected one stays author's (handing it over takes author's cooperation: reviewer
// cannot take it, see Boundary).
func testIdentityHandOver(t *testing.T, h *hostile, name string) {
	py := h.inside("handover-" + h.rt + ".py")
	if err := os.WriteFile(filepath.Join(h.out, filepath.Base(py)), []byte(handOverPy), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		kind, want string
	}{{"unconnected", "403"}, {"connected", "200"}} {
		path := "/tmp/handover-" + tc.kind
		h.startScript(t, name, "author", "python3 "+py+" give "+tc.kind+" "+path)
		r := h.asSh(t, name, "reviewer", "python3 "+py+" use "+tc.kind+" "+path)
		if got := strings.TrimSpace(r.Stdout); r.Code != 0 || got != tc.want {
			t.Errorf("%s socket from author used by reviewer: status %q, want %s: %s", tc.kind, got, tc.want, r)
		}
	}
}

// startScript starts script as identity in the background (until t ends) and waits for its
// first line, "ready".
func (h *hostile) startScript(t *testing.T, name, identity, script string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	args := []string{"sandbox", "exec", "--state-dir", h.stateDir, "--as", identity, name, "--", "sh", "-c", "exec " + script}
	cmd := h.command(ctx, nil, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("%s: first line %q, %v; stderr %q", script, line, err, stderr.String())
	}
}
