//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/approval"
	"github.com/airlock-dev/airlock/test/privtest"
	"github.com/airlock-dev/airlock/test/testnet"
)

// askPolicy is enforcePolicy with spec.approval: denied.test (no rule names it) is asked
// about; hold is long, so a held request waits for the CLI's answer.
func askPolicy(hold string) string {
	return enforcePolicy + fmt.Sprintf(`  approval:
    hold: %s
    askTTL: 10m
    maxGrant: 1h
    sandboxGrants: true
    never: ["never.denied.test"]
`, hold)
}

// askID waits for the ask event about dest after mark and returns the ask's ID.
func askID(t *testing.T, a *testnet.Airlock, mark int, dest string) string {
	t.Helper()
	ev := a.WaitEventFrom(t, mark, "ask event for "+dest, func(e testnet.AuditEvent) bool {
		return e.Kind == "approval" && e.Decision == "ask" && e.Destination == dest
	})
	id, _ := ev.Fields["request_id"].(string)
	if id == "" {
		t.Fatalf("ask event without an id: %s", ev)
	}
	return id
}

// approvalsCLI runs `airlock approvals ARGS... --state-dir DIR` on the host, as the operator.
func approvalsCLI(t *testing.T, stateDir string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, airlockBinary(t), append(append([]string{"approvals"}, args...), "--state-dir", stateDir)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("airlock approvals %v: %v: %s%s", args, err, out.String(), errb.String())
	}
	return out.String()
}

// curlAsync runs curlProxy in a goroutine.
func curlAsync(t *testing.T, w *testnet.World, a *testnet.Airlock, args ...string) chan curlResult {
	ch := make(chan curlResult, 1)
	go func() { ch <- curlProxy(t, w, a, args...) }()
	return ch
}

// TestApprovalExplicitAndConnect: curl through the explicit proxy (http://) and through a
// CONNECT tunnel (https://) to a host no rule names is held, granted from the CLI, and
// served; --once serves one request or tunnel; a denial answers 403 approval_denied; what
// may never be asked about is refused at once with no ask.
func TestApprovalExplicitAndConnect(t *testing.T) {
	w, a := setup(t, askPolicy("60s"))
	cacert := []string{"--cacert", w.CA.File, "--max-time", "90"}

	// Explicit proxy, granted once: served; the next request is held again.
	mark := a.Mark()
	res := curlAsync(t, w, a, append(cacert, "http://denied.test/held")...)
	id := askID(t, a, mark, "denied.test:80")
	out := approvalsCLI(t, a.StateDir, "list", "--json")
	if !strings.Contains(out, id) || !strings.Contains(out, `"status": "pending"`) {
		t.Fatalf("approvals list --json does not show the pending ask %s: %s", id, out)
	}
	approvalsCLI(t, a.StateDir, "grant", id)
	if r := <-res; r.Code != 200 || !strings.Contains(r.Body, "path=/held") {
		t.Fatalf("held request after the grant: %s", r)
	}
	grant := a.WaitEvent(t, "grant event", func(e testnet.AuditEvent) bool {
		return e.Kind == "approval" && e.Decision == "grant" && e.Rule == "grant:"+id
	})
	if !strings.Contains(grant.Detail, "approver=uid:0") || !strings.Contains(grant.Detail, "scope=once") {
		t.Errorf("grant event does not name the approver and scope: %s", grant)
	}

	// CONNECT, granted for a duration: the tunnel is served, and so is the next one.
	mark = a.Mark()
	res = curlAsync(t, w, a, append(cacert, "https://denied.test/tunnel")...)
	id = askID(t, a, mark, "denied.test:443")
	approvalsCLI(t, a.StateDir, "grant", "--for", "10m", id)
	if r := <-res; r.Code != 200 || r.ConnectCode != 200 || !strings.Contains(r.Body, "path=/tunnel") {
		t.Fatalf("held CONNECT after the grant: %s", r)
	}
	if r := curlProxy(t, w, a, append(cacert, "https://denied.test/again")...); r.Code != 200 {
		t.Fatalf("second tunnel under a 10m grant: %s", r)
	}
	if out := approvalsCLI(t, a.StateDir, "list"); !strings.Contains(out, id) || !strings.Contains(out, "duration") {
		t.Fatalf("approvals list does not show the grant %s: %s", id, out)
	}
	explain := airlockCmd(t, "policy", "explain", a.PolicyFile, "--url", "https://denied.test/", "--state-dir", a.StateDir)
	if !strings.Contains(explain, "decision:  allow") || !strings.Contains(explain, "grant:     "+id) {
		t.Fatalf("policy explain --state-dir does not show the grant: %s", explain)
	}
	approvalsCLI(t, a.StateDir, "revoke", id)

	// Denied: 403 approval_denied with the approval field; the retry is denied at once.
	mark = a.Mark()
	res = curlAsync(t, w, a, append(cacert, "http://denied.test:443/x")...)
	id = askID(t, a, mark, "denied.test:443")
	// Without kernel enforcement a sandbox process shares the sidecar's network: it still
	// cannot answer. The admin listener has no approval endpoint, and another user cannot
	// reach the operator socket.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adminOut, _ := w.Sidecar.Command(ctx, "curl", "--silent", "--noproxy", "*", "--write-out", "%{http_code}", "-X", "POST",
		"http://"+a.AdminAddr+"/v1/approvals/"+id+"/grant").CombinedOutput()
	if !strings.HasSuffix(string(adminOut), "404") {
		t.Errorf("POST grant to the admin listener: %s, want 404", adminOut)
	}
	nobody := w.Sidecar.Command(ctx, "curl", "--silent", "--unix-socket", a.StateDir+"/approvals.sock", "-X", "POST",
		"http://airlock/v1/approvals/"+id+"/grant")
	nobody.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := nobody.CombinedOutput(); err == nil {
		t.Errorf("another user answered through the operator socket: %s", out)
	}
	if out := approvalsCLI(t, a.StateDir, "list", "--json"); !strings.Contains(out, `"id": "`+id+`"`) || !strings.Contains(out, `"status": "pending"`) {
		t.Fatalf("after the attempts, the ask is not pending: %s", out)
	}
	approvalsCLI(t, a.StateDir, "deny", id)
	r := <-res
	if r.Code != 403 || !strings.Contains(r.Body, `"reason":"approval_denied"`) || !strings.Contains(r.Body, `"approval":{"id":"`+id+`","status":"denied"}`) {
		t.Fatalf("denied ask: %s", r)
	}

	// Never asked about: a name under never, an IP literal, a port refusal on a named host,
	// a name resolving to an internal address. Each is refused at once, with no ask.
	w.DNS.Set("internal.denied.test", testnet.DefaultTTL, netip.MustParseAddr("10.0.0.1"))
	w.DNS.Set("meta.denied.test", testnet.DefaultTTL, netip.MustParseAddr("169.254.169.254"))
	for _, url := range []string{"http://never.denied.test/", "http://198.18.0.20/", "http://allowed.test:8080/",
		"http://internal.denied.test/", "http://meta.denied.test/", "http://intranet/", "http://pypi.org.ns.svc.cluster.local/"} {
		if r := curlProxy(t, w, a, append(cacert, url)...); r.Code != 403 || strings.Contains(r.Body, `"approval":{`) ||
			strings.Contains(r.Body, "approval_") {
			t.Errorf("%s: %s, want a plain 403", url, r)
		}
	}
	for _, e := range a.Events() {
		if e.Kind == "approval" && e.Decision == "ask" && !strings.HasPrefix(e.Destination, "denied.test") {
			t.Errorf("an ask about what is never asked about: %s", e)
		}
	}
	for _, req := range w.Denied.Requests() {
		if req.Path == "/x" {
			t.Errorf("the denied request reached upstream: %+v", req)
		}
	}

	if n, ok := a.MetricSum(t, "airlock_approval_asks_total"); !ok || n < 3 {
		t.Errorf("airlock_approval_asks_total = %v (%v), want at least 3", n, ok)
	}
	if n, ok := a.MetricSum(t, "airlock_approval_denials_total"); !ok || n != 1 {
		t.Errorf("airlock_approval_denials_total = %v (%v), want 1", n, ok)
	}
	// The trail with its ask, grant, denial, expiry and revocation events verifies, and
	// policy learn turns the grants into rules policy check accepts.
	a.Stop(t)
	airlockCmd(t, "audit", "verify", a.AuditFile)
	learned := filepath.Join(w.Dir, "learned.yaml")
	airlockCmd(t, "policy", "learn", a.AuditFile, "-o", learned)
	airlockCmd(t, "policy", "check", learned)
	if got, _ := os.ReadFile(learned); !strings.Contains(string(got), `hosts: ["denied.test"]`) || !strings.Contains(string(got), "granted by the operator") {
		t.Fatalf("the learned policy has no rule from the grants:\n%s", got)
	}
}

// airlockCmd runs the airlock binary on the host and fails t unless it exits 0.
func airlockCmd(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, airlockBinary(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("airlock %v: %v: %s", args, err, out)
	}
	return string(out)
}

// TestApprovalPendingExpiryRestartReload: a request nobody answers in time gets 403
// approval_pending with the approval field, Retry-After and a remedy; the later grant (2s)
// serves the retry and stops serving when it expires (observed by polling); a grant
// survives a sidecar restart; a reload that lists the host under never ends it.
func TestApprovalPendingExpiryRestartReload(t *testing.T) {
	w, a := setup(t, askPolicy("1s"))
	cacert := []string{"--cacert", w.CA.File, "--max-time", "30"}
	r := curlProxy(t, w, a, append(cacert, "http://denied.test/p")...)
	var body struct {
		Reason   string            `json:"reason"`
		Remedy   string            `json:"remedy"`
		Approval map[string]string `json:"approval"`
	}
	if err := json.Unmarshal([]byte(r.Body), &body); err != nil || r.Code != 403 || body.Reason != "approval_pending" ||
		body.Approval["status"] != "pending" || body.Approval["id"] == "" || body.Remedy == "" || r.Header.Get("Retry-After") != "1" {
		t.Fatalf("unanswered ask: %s (Retry-After %q)", r, r.Header.Get("Retry-After"))
	}
	id := body.Approval["id"]
	approvalsCLI(t, a.StateDir, "grant", "--for", "2s", id)
	if r := curlProxy(t, w, a, append(cacert, "http://denied.test/retry")...); r.Code != 200 {
		t.Fatalf("retry after the grant: %s", r)
	}
	a.WaitEvent(t, "expiry of the 2s grant", func(e testnet.AuditEvent) bool {
		return e.Kind == "approval" && e.Decision == "expire" && e.Rule == "grant:"+id
	})
	if r := curlProxy(t, w, a, append(cacert, "http://denied.test/late")...); r.Code != 403 {
		t.Fatalf("after the grant expired: %s", r)
	}

	// A grant for the sandbox's life survives a restart.
	mark := a.Mark()
	res := curlAsync(t, w, a, append(cacert, "https://denied.test/life")...)
	id = askID(t, a, mark, "denied.test:443")
	approvalsCLI(t, a.StateDir, "grant", "--sandbox", id)
	if r := <-res; r.Code != 200 && !strings.Contains(r.Body, "approval_pending") {
		t.Fatalf("after a sandbox grant: %s", r)
	}
	a.Stop(t)
	a = w.StartAirlock(t, testnet.AirlockConfig{Binary: airlockBinary(t), Policy: askPolicy("1s"), Sandbox: sandboxName,
		Args: []string{"--state-dir", a.StateDir}})
	if r := curlProxy(t, w, a, append(cacert, "https://denied.test/restarted")...); r.Code != 200 {
		t.Fatalf("after a restart, the sandbox grant does not serve: %s", r)
	}
	// A reload that lists the host under never ends the grant.
	mark = a.Mark()
	a.WritePolicy(t, strings.Replace(askPolicy("1s"), `never: ["never.denied.test"]`, `never: ["never.denied.test", "denied.test"]`, 1))
	a.WaitEventFrom(t, mark, "revocation by the reload", func(e testnet.AuditEvent) bool {
		return e.Kind == "approval" && e.Decision == "revoke" && strings.Contains(e.Detail, "never")
	})
	if r := curlProxy(t, w, a, append(cacert, "https://denied.test/after-reload")...); r.ConnectCode != 403 && r.Code != 403 {
		t.Fatalf("after the reload: %s", r)
	}
}

// TestApprovalKernelDNS: a DNS query for a name no rule names is held and, unanswered,
// REFUSED with the ask in its Extended DNS Error; granted from the CLI, the retry is
// answered and the address enters the kernel allow map (a direct connect succeeds); a
// reload that lists the host under never ends the grant and the direct connect gets EPERM
// again at once.
func TestApprovalKernelDNS(t *testing.T) {
	const dns = "127.0.0.1:5353"
	pol := askPolicy("1s")
	w, cg, _, a := kernelSetupPolicy(t, pol, nil, "--transparent-addr", "off", "--llm-addr", "off", "--dns-addr", dns)
	p := testnet.StartSandboxProbe(t, cg, w.Sidecar)
	connect := "connect 4 tcp 198.18.0.20:80"
	if got := p.Do(t, connect); got != "EPERM" {
		t.Fatalf("before any ask: %s: got %q, want EPERM", connect, got)
	}
	mark := a.Mark()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, _ := w.Sidecar.Command(ctx, "dig", "@127.0.0.1", "-p", "5353", "+tries=1", "+time=10", "denied.test", "A").CombinedOutput()
	id := askID(t, a, mark, "denied.test:80,443")
	if !strings.Contains(string(out), "status: REFUSED") || !strings.Contains(string(out), "approval_pending") || !strings.Contains(string(out), id) {
		t.Fatalf("unanswered DNS ask: want REFUSED with approval_pending and ask %s in the EDE text: %s", id, out)
	}
	// A and AAAA share the one ask.
	out, _ = w.Sidecar.Command(ctx, "dig", "@127.0.0.1", "-p", "5353", "+tries=1", "+time=10", "denied.test", "AAAA").CombinedOutput()
	if !strings.Contains(string(out), id) {
		t.Fatalf("the AAAA query made another ask: %s", out)
	}
	approvalsCLI(t, a.StateDir, "grant", "--for", "10m", id)
	if got := p.Do(t, "resolve denied.test "+dns); got != "OK 198.18.0.20" {
		t.Fatalf("resolve after the grant: got %q", got)
	}
	if got := p.Do(t, connect); got != "OK" {
		t.Fatalf("direct connect after the granted answer: got %q, want OK", got)
	}
	if got := p.Do(t, "connect 4 tcp 198.18.0.20:8080"); got != "EPERM" {
		t.Fatalf("a DNS grant opens 80 and 443 only: port 8080 got %q", got)
	}
	mark = a.Mark()
	a.WritePolicy(t, strings.Replace(pol, `never: ["never.denied.test"]`, `never: ["never.denied.test", "denied.test"]`, 1))
	a.WaitEventFrom(t, mark, "revocation by the reload", func(e testnet.AuditEvent) bool {
		return e.Kind == "approval" && e.Decision == "revoke" && e.Rule == "grant:"+id
	})
	a.WaitEventFrom(t, mark, "the reload's policy event", func(e testnet.AuditEvent) bool {
		return e.Kind == "policy" && e.Decision == "allow"
	})
	if got := p.Do(t, connect); got != "EPERM" {
		t.Fatalf("after the reload ended the grant: %s: got %q, want EPERM", connect, got)
	}
	if got := p.Do(t, "resolve denied.test "+dns); got != "ERR RCODE REFUSED" {
		t.Fatalf("resolve after the reload: got %q", got)
	}
}

// sandboxAsks runs `airlock sandbox approvals NAME list --json`.
func sandboxAsks(t *testing.T, e *sbEnv, name string) []map[string]any {
	t.Helper()
	r := e.run(t, nil, nil, "sandbox", "approvals", "--state-dir", e.stateDir, name, "list", "--json")
	if r.Code != 0 {
		t.Fatalf("sandbox approvals list: %s", r)
	}
	var l struct {
		Asks []map[string]any `json:"asks"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &l); err != nil {
		t.Fatalf("sandbox approvals list --json: %v: %s", err, r.Stdout)
	}
	return l.Asks
}

// TestApprovalSandboxTransparent: in a local sandbox (an OCI container under kernel
// enforcement), a program that ignores HTTP_PROXY looks up a host no rule names: the query
// is held and refused while the ask is open (sandbox list shows it); nothing inside the
// sandbox can answer it; granted once from `airlock sandbox approvals`, the retry is
// answered and its connection, redirected to the transparent proxy, is served; the once
// grant then is used up.
func TestApprovalSandboxTransparent(t *testing.T) {
	e := newSandboxEnv(t)
	pf := e.w.WriteFile(t, "approval-policy.yaml", []byte(sbPolicy+`  approval:
    hold: 1s
`))
	name := e.name("appr")
	info := e.create(t, name, "--policy", pf)
	curl := curlScript("--cacert " + e.inside("ca.pem") + " https://denied.test/transparent")
	r := e.exec(t, []string{"--no-env"}, name, nil, nil, "sh", "-c", curl)
	if r.Code != curlResolveFailed {
		t.Fatalf("before the grant: want curl exit %d (the name refused while asked): %s", curlResolveFailed, r)
	}
	asks := sandboxAsks(t, e, name)
	if len(asks) != 1 || asks[0]["host"] != "denied.test" || asks[0]["status"] != "pending" {
		t.Fatalf("asks %v, want one pending ask about denied.test", asks)
	}
	id, _ := asks[0]["id"].(string)
	if i, _ := e.info(t, name); i.OpenAsks != 1 {
		t.Errorf("sandbox list shows %d open asks, want 1", i.OpenAsks)
	}

	// Inside the sandbox: the operator socket is not there, the admin listener is out of
	// reach and serves no answers anyway.
	sock := info.StateDir + "/sidecar/approvals.sock"
	r = e.sh(t, name, "test -e "+sock+" && echo SOCKET-VISIBLE; "+
		"curl --silent --max-time 5 --noproxy '*' -X POST http://"+info.AdminAddr+"/v1/approvals/"+id+"/grant; echo exit=$?")
	if strings.Contains(r.Stdout, "SOCKET-VISIBLE") || !strings.Contains(r.Stdout, "exit=7") {
		t.Fatalf("inside the sandbox: %s, want no socket and the admin listener refused (curl exit 7)", r)
	}
	if asks := sandboxAsks(t, e, name); len(asks) != 1 || asks[0]["status"] != "pending" {
		t.Fatalf("after the attempts from inside, asks %v, want the ask still pending", asks)
	}

	r = e.run(t, nil, nil, "sandbox", "approvals", "--state-dir", e.stateDir, name, "grant", id)
	if r.Code != 0 || !strings.Contains(r.Stdout, "granted "+id) {
		t.Fatalf("sandbox approvals grant: %s", r)
	}
	r = e.exec(t, []string{"--no-env"}, name, nil, nil, "sh", "-c", curl)
	body, code, _ := parseCurl(t, r)
	if r.Code != 0 || code != 200 || !strings.Contains(body, "upstream=198.18.0.20 port=443 host=denied.test method=GET path=/transparent") {
		log, _ := os.ReadFile(filepath.Join(info.StateDir, "sidecar.log"))
		t.Fatalf("transparent curl after the grant: %s\nsidecar log:\n%s", r, log)
	}
	r = e.exec(t, []string{"--no-env"}, name, nil, nil, "sh", "-c", curl)
	if r.Code != curlResolveFailed {
		t.Fatalf("after the once grant was used: want curl exit %d: %s", curlResolveFailed, r)
	}
}

// hookReceiver is the approval webhook receiver of the test topology: it checks each ask's
// signature and answers by the host asked about.
type hookReceiver struct {
	t       *testing.T
	key     []byte
	mu      sync.Mutex
	n       map[string]int         // requests per ask ID
	last    approval.WebhookAnswer // the last answer to grant.hook.test, for the replay
	release chan struct{}
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	ts, _ := strconv.ParseInt(r.Header.Get(approval.HeaderTimestamp), 10, 64)
	if r.Header.Get(approval.HeaderSignature) != approval.SignBody(h.key, ts, raw) {
		h.t.Errorf("webhook receiver: an ask with a bad signature: %s", raw)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var ask approval.WebhookAsk
	if err := json.Unmarshal(raw, &ask); err != nil {
		h.t.Errorf("webhook receiver: %v", err)
		return
	}
	h.mu.Lock()
	h.n[ask.ID]++
	n := h.n[ask.ID]
	h.mu.Unlock()
	ans := approval.WebhookAnswer{ID: ask.ID, Nonce: ask.Nonce, Decision: "grant", Approver: "alice (chat)", Timestamp: time.Now().Unix()}
	switch ask.Host {
	case "deny.hook.test":
		ans.Decision = "deny"
	case "pending.hook.test":
		if n < 4 { // an answer a few polls later, after the first request's hold ran out
			ans.Decision = "pending"
		}
	case "slow.hook.test":
		<-h.release
	case "replay.hook.test":
		h.mu.Lock()
		ans = h.last
		h.mu.Unlock()
	}
	ans.Signature = approval.SignAnswer(h.key, ans)
	if ask.Host == "unsigned.hook.test" {
		ans.Signature = ""
	}
	if ask.Host == "grant.hook.test" {
		h.mu.Lock()
		h.last = ans
		h.mu.Unlock()
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(ans)
}

// TestApprovalWebhook: a real HTTP receiver in the test topology, reached through the
// operator's dial path, grants, denies, answers pending and grants a few polls later (the
// agent's retry is served), and fails closed when it is slow, answers unsigned, replays an
// old answer, or is down.
func TestApprovalWebhook(t *testing.T) {
	const key = "e2e-webhook-hmac-key"
	hookAddr := netip.MustParseAddrPort("198.18.0.77:8080")
	pol := func(url string) string {
		return strings.Replace(enforcePolicy, "  egress:", "  secrets:\n    hook-key: {env: E2E_HOOK_KEY}\n  egress:", 1) + `  approval:
    hold: 2s
    approvers:
      webhook: {url: "` + url + `", secret: hook-key, timeout: 1s, pollInterval: 1s}
`
	}
	privtest.Require(t, "curl")
	parallelWorld(t)
	w := testnet.NewWorld(t)
	for _, n := range []string{"grant", "deny", "pending", "slow", "unsigned", "replay", "down"} {
		w.DNS.Set(n+".hook.test", testnet.DefaultTTL, w.Denied.Addr)
	}
	w.AddUpstreamAddr(t, hookAddr.Addr())
	recv := &hookReceiver{t: t, key: []byte(key), n: map[string]int{}, release: make(chan struct{})}
	ln, err := w.Upstream.Listen("tcp", hookAddr.String())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: recv, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { close(recv.release); srv.Close() })
	a := w.StartAirlock(t, testnet.AirlockConfig{Binary: airlockBinary(t), Policy: pol("http://" + hookAddr.String() + "/hook"),
		Sandbox: sandboxName, Env: []string{"E2E_HOOK_KEY=" + key}})
	get := func(host string) curlResult {
		return curlProxy(t, w, a, "--max-time", "30", "http://"+host+"/w")
	}
	denyEvent := func(host, want string) {
		t.Helper()
		ev := a.WaitEvent(t, "deny event for "+host, func(e testnet.AuditEvent) bool {
			return e.Kind == "approval" && e.Decision == "deny" && e.Destination == host+":80"
		})
		if !strings.Contains(ev.Detail, want) {
			t.Errorf("%s: deny event %s, want %q in its detail", host, ev, want)
		}
	}

	if r := get("grant.hook.test"); r.Code != 200 {
		t.Fatalf("webhook grant: %s", r)
	}
	ev := a.WaitEvent(t, "webhook grant event", func(e testnet.AuditEvent) bool {
		return e.Kind == "approval" && e.Decision == "grant" && e.Destination == "grant.hook.test:80"
	})
	if !strings.Contains(ev.Detail, "approver=webhook:alice (chat)") {
		t.Errorf("grant event does not name the webhook's signed approver: %s", ev)
	}
	if r := get("deny.hook.test"); r.Code != 403 || !strings.Contains(r.Body, "approval_denied") {
		t.Fatalf("webhook deny: %s", r)
	}
	denyEvent("deny.hook.test", "denied by webhook:alice (chat)")

	r := get("pending.hook.test")
	if r.Code != 403 || !strings.Contains(r.Body, "approval_pending") {
		t.Fatalf("webhook pending: %s", r)
	}
	a.WaitEvent(t, "the grant a few polls later", func(e testnet.AuditEvent) bool {
		return e.Kind == "approval" && e.Decision == "grant" && e.Destination == "pending.hook.test:80"
	})
	if r := get("pending.hook.test"); r.Code != 200 {
		t.Fatalf("the retry after the polled grant: %s", r)
	}

	for host, want := range map[string]string{"slow.hook.test": "did not answer within 1s", "unsigned.hook.test": "unsigned",
		"replay.hook.test": "a replay"} {
		if r := get(host); r.Code != 403 || !strings.Contains(r.Body, "approval_denied") {
			t.Errorf("%s: %s, want approval_denied (fail closed)", host, r)
		}
		denyEvent(host, want)
	}
	for _, req := range w.Denied.Requests() {
		if strings.HasPrefix(req.Host, "slow.") || strings.HasPrefix(req.Host, "unsigned.") || strings.HasPrefix(req.Host, "replay.") || strings.HasPrefix(req.Host, "deny.") {
			t.Errorf("a request the webhook did not grant reached upstream: %+v", req)
		}
	}

	// The receiver down: a reload points the webhook at a port nothing listens on.
	mark := a.Mark()
	a.WritePolicy(t, pol("http://198.18.0.77:8081/hook"))
	a.WaitEventFrom(t, mark, "the reload", func(e testnet.AuditEvent) bool { return e.Kind == "policy" && e.Decision == "allow" })
	if r := get("down.hook.test"); r.Code != 403 || !strings.Contains(r.Body, "approval_denied") {
		t.Fatalf("receiver down: %s", r)
	}
	denyEvent("down.hook.test", "unreachable")
}

// TestApprovalFloodBounded: 10,000 distinct unlisted names (each resolving publicly) asked
// through the DNS filter under ask mode: the sidecar keeps at most the bound of asks, the
// webhook receives one request per ask and no more (at most 30 a minute), and the misses not
// asked about are counted in summary events whose counts add up.
func TestApprovalFloodBounded(t *testing.T) {
	const n, key = 10000, "flood-key"
	privtest.Require(t, "curl")
	parallelWorld(t)
	w := testnet.NewWorld(t)
	for i := range n {
		w.DNS.Set(fmt.Sprintf("n%d.flood.test", i), testnet.DefaultTTL, w.Denied.Addr)
	}
	hookAddr := netip.MustParseAddrPort("198.18.0.78:8080")
	w.AddUpstreamAddr(t, hookAddr.Addr())
	var mu sync.Mutex
	hooks := 0
	ln, err := w.Upstream.Listen("tcp", hookAddr.String())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var ask approval.WebhookAsk
		_ = json.NewDecoder(r.Body).Decode(&ask)
		mu.Lock()
		hooks++
		mu.Unlock()
		ans := approval.WebhookAnswer{ID: ask.ID, Nonce: ask.Nonce, Decision: "pending", Approver: "flood", Timestamp: time.Now().Unix()}
		ans.Signature = approval.SignAnswer([]byte(key), ans)
		_ = json.NewEncoder(rw).Encode(ans)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	pol := strings.Replace(enforcePolicy, "  egress:", "  secrets:\n    hook-key: {env: E2E_HOOK_KEY}\n  egress:", 1) + `  approval:
    hold: 1s
    approvers:
      webhook: {url: "http://` + hookAddr.String() + `/", secret: hook-key, pollInterval: 1h}
`
	a := w.StartAirlock(t, testnet.AirlockConfig{Binary: airlockBinary(t), Policy: pol, Sandbox: sandboxName,
		Env: []string{"E2E_HOOK_KEY=" + key}, Args: []string{"--dns-addr", "127.0.0.1:5353"}})
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return w.Sidecar.DialContext(ctx, "udp", "127.0.0.1:5353")
	}}
	names := make(chan string)
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range names {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, _ = r.LookupNetIP(ctx, "ip4", name)
				cancel()
			}
		}()
	}
	for i := range n {
		names <- fmt.Sprintf("n%d.flood.test", i)
	}
	close(names)
	wg.Wait()

	var l struct {
		Asks []map[string]any `json:"asks"`
	}
	if err := json.Unmarshal([]byte(approvalsCLI(t, a.StateDir, "list", "--json")), &l); err != nil {
		t.Fatal(err)
	}
	asks := 0
	for _, e := range a.Events() {
		if e.Kind == "approval" && e.Decision == "ask" {
			asks++
		}
	}
	if asks == 0 || asks > approval.DefaultAsksPerMinute || len(l.Asks) != asks {
		t.Fatalf("%d asks made, %d kept; want 1..%d, all kept", asks, len(l.Asks), approval.DefaultAsksPerMinute)
	}
	// The summaries count every other name (and the resolver's retries of them); the last is
	// written within 10 s. Each line is matched once, in order.
	var sum float64
	summaries := 0
	a.WaitEvent(t, "summaries counting every miss not asked about", func(e testnet.AuditEvent) bool {
		if e.Kind == "approval" && e.Decision == "summary" {
			c, ok := e.Fields["count"].(float64)
			if !ok {
				c = 1 // the contract leaves count out for one
			}
			sum += c
			summaries++
		}
		return int(sum) >= n-asks
	})
	if summaries > 10 {
		t.Errorf("%d summary events for a few seconds of flood; want at most one per 10 s (and the first)", summaries)
	}
	mu.Lock()
	defer mu.Unlock()
	if hooks != asks {
		t.Fatalf("the webhook got %d requests for %d asks", hooks, asks)
	}
}
