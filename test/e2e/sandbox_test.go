//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/ebpf"
	"github.com/airlock-dev/airlock/sandbox"
	"github.com/airlock-dev/airlock/test/testnet"
)

// The local sandbox manager end to end: `airlock sandbox create|exec|list|delete|reap` run in
// the world's sidecar namespace, which plays the host (the veth's host end and the sidecar
// live there; the machine's own namespace is never touched). The sandboxes take their /30
// links from sbSubnet and their cgroups from a test cgroup.

// Secrets the sidecar gets from create's environment; the sandbox must never see them.
const (
	sbToken     = "e2e-sandbox-upstream-token-7f3a9c"
	sbOpenAIKey = "sk-proj-E2ESANDBOX-openai-000000000000"
	sbSubnet    = "198.19.200.0/24"
	sbGitAddr   = "198.18.0.41"
	sbLLMAddr   = "198.18.0.40"
)

// sbPolicy allows allowed.test (tunnelled), api.allowed.test (with an injected credential, so
// intercepted) and git.test, and serves one model from the fake provider. Port 8443 is allowed
// for allowed.test and git.test because the kernel redirects only 80 and 443 to the
// transparent proxy and the sandbox has no route out: a client reaches :8443 only if it uses
// the explicit proxy the env file names.
const sbPolicy = `apiVersion: airlock/v1
kind: EgressPolicy
metadata:
  name: sandbox-e2e
spec:
  mode: enforce
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
    - name: git
      hosts: ["git.test"]
      ports: [443, 8443]
  secrets:
    upstream-token: {env: E2E_SANDBOX_TOKEN}
    openai-key: {env: E2E_OPENAI_KEY}
  llm:
    providers:
      openai: {baseURL: "http://openai.llm.test:8080", apiKey: {secret: openai-key}}
    models:
      - {name: gpt-e2e, provider: openai, upstreamModel: gpt-4o-mini, price: {inputPerMTok: 0.15, outputPerMTok: 0.6}}
    budget: {tokens: 1000000, usd: 5}
`

// sbCommandTimeout bounds one airlock command (create waits for the sidecar's readiness).
const sbCommandTimeout = 60 * time.Second

func TestSandbox(t *testing.T) {
	e := newLongSandboxEnv(t)
	name := e.name("main")
	info := e.create(t, name)
	host := info.HostAddr
	if !strings.HasPrefix(host, "198.19.200.") || info.SandboxAddr == "" || info.Netns != "airlock-"+name {
		t.Fatalf("list entry %+v: want the host end in %s and netns airlock-%s", info, sbSubnet, name)
	}
	if info.Cgroup != filepath.Join(e.cgParent, name) {
		t.Errorf("cgroup %q, want %q", info.Cgroup, filepath.Join(e.cgParent, name))
	}

	t.Run("Proxied", func(t *testing.T) { testSandboxProxied(t, e, name, info) })
	t.Run("Transparent", func(t *testing.T) { testSandboxTransparent(t, e, name) })
	t.Run("Exec", func(t *testing.T) { testSandboxExec(t, e, name) })
	t.Run("SidecarKill", func(t *testing.T) { testSandboxSidecarKill(t, e, name) })
	t.Run("Delete", func(t *testing.T) { testSandboxDelete(t, e) })
	t.Run("Ephemeral", func(t *testing.T) { testSandboxEphemeral(t, e) })
	t.Run("EphemeralStdinSignals", func(t *testing.T) { testSandboxEphemeralStdinSignals(t, e) })
	t.Run("Reap", func(t *testing.T) { testSandboxReap(t, e) })
	t.Run("Environment", func(t *testing.T) { testSandboxEnvironment(t, e) })
}

// TestSandboxLoop: 20 creates and deletes leave nothing growing (testSandboxLoop). Not
// parallel: it counts this process's file descriptors, which other tests running at the same
// time would change; the rest of TestSandbox runs beside other tests.
func TestSandboxLoop(t *testing.T) {
	testSandboxLoop(t, newSandboxEnvAlone(t))
}

// With the env file: curl, git and python3 reach the allowed hosts through the proxy, the
// rest is denied at every layer, the credential arrives upstream only, and the model API
// answers through OPENAI_BASE_URL.
func testSandboxProxied(t *testing.T, e *sbEnv, name string, info sandboxInfo) {
	// The env file says what the contract says.
	envFile, err := os.ReadFile(info.EnvFile)
	if err != nil {
		t.Fatalf("env file: %v", err)
	}
	proxyURL := "http://" + hostPort(info.HostAddr, "3128")
	for _, want := range []string{"HTTPS_PROXY=" + proxyURL, "HTTP_PROXY=" + proxyURL, "https_proxy=" + proxyURL,
		"SSL_CERT_FILE=" + sandbox.InsideCABundle, "REQUESTS_CA_BUNDLE=" + sandbox.InsideCABundle, "GIT_SSL_CAINFO=" + sandbox.InsideCABundle,
		"NODE_EXTRA_CA_CERTS=" + sandbox.InsideCABundle, "OPENAI_BASE_URL=http://" + hostPort(info.HostAddr, "4000") + "/v1",
		"ANTHROPIC_BASE_URL=http://" + hostPort(info.HostAddr, "4000"), "AIRLOCK_SANDBOX=" + name} {
		if !bytes.Contains(envFile, []byte(want+"\n")) {
			t.Errorf("env file lacks %q:\n%s", want, envFile)
		}
	}

	// Each client must use the explicit proxy, not merely be caught by the kernel's redirect of
	// 443: the requests go to port 8443 (see sbPolicy), and the audit log holds the tunnel.
	viaProxy := tunnelTo("connect", "allowed.test:8443")
	t.Run("curl", func(t *testing.T) {
		before := e.auditCount(t, name, viaProxy)
		r := e.sh(t, name, curlScript("https://allowed.test:8443/sandbox-curl"))
		body, code, _ := parseCurl(t, r)
		if r.Code != 0 || code != 200 || !strings.Contains(body, "upstream=198.18.0.10 port=8443 host=allowed.test:8443") {
			t.Fatalf("allowed https: %s", r)
		}
		e.waitAudit(t, name, before, "explicit CONNECT to allowed.test:8443 (curl)", viaProxy)
		// A denied host: 403 with the contract's header and JSON reason.
		hf := filepath.Join(e.out, "denied-headers-"+name)
		r = e.sh(t, name, curlScript("--dump-header "+e.inside("denied-headers-"+name)+" http://denied.test/x"))
		body, code, _ = parseCurl(t, r)
		raw, _ := os.ReadFile(hf)
		checkDenial(t, code, lastHeaderBlock(string(raw)), body, testnet.NameDenied, 80, "", "no_rule")
		r = e.sh(t, name, curlScript("https://denied.test/x"))
		if _, _, connect := parseCurl(t, r); r.Code == 0 || connect != 403 {
			t.Errorf("https to a denied host: want CONNECT 403: %s", r)
		}
		for _, req := range e.w.Denied.Requests() {
			t.Errorf("the denied host got a request: %+v", req)
		}
	})

	t.Run("git", func(t *testing.T) {
		dst, dstIn := filepath.Join(e.out, "clone-"+name), e.inside("clone-"+name)
		gitProxy := tunnelTo("connect", "git.test:8443")
		before := e.auditCount(t, name, gitProxy)
		r := e.exec(t, nil, name, nil, nil, "git", "clone", "--quiet", e.git.URLAt(8443), dstIn)
		if r.Code != 0 {
			t.Fatalf("git clone: %s", r)
		}
		got, err := os.ReadFile(filepath.Join(dst, testnet.GitFile))
		if err != nil || string(got) != testnet.GitFileContent {
			t.Fatalf("cloned file: %q %v", got, err)
		}
		r = e.exec(t, nil, name, nil, nil, "git", "-C", dstIn, "rev-parse", "HEAD")
		if strings.TrimSpace(r.Stdout) != e.git.Commit {
			t.Errorf("cloned HEAD %q, want %q", r.Stdout, e.git.Commit)
		}
		if len(e.git.Requests()) == 0 {
			t.Error("the git server saw no request")
		}
		e.waitAudit(t, name, before, "explicit CONNECT to git.test:8443 (git)", gitProxy)
	})

	t.Run("python", func(t *testing.T) {
		before := e.auditCount(t, name, viaProxy)
		r := e.exec(t, nil, name, nil, nil, e.python, "-c",
			`import urllib.request; print(urllib.request.urlopen("https://allowed.test:8443/py", timeout=20).read().decode())`)
		if r.Code != 0 || !strings.Contains(r.Stdout, "upstream=198.18.0.10 port=8443 host=allowed.test:8443 method=GET path=/py") {
			t.Fatalf("python urllib: %s", r)
		}
		e.waitAudit(t, name, before, "explicit CONNECT to allowed.test:8443 (python)", viaProxy)
		r = e.exec(t, nil, name, nil, nil, e.python, "-c", `import urllib.request, urllib.error
try:
    urllib.request.urlopen("http://denied.test/py", timeout=20)
    print("reached")
except urllib.error.HTTPError as err:
    print(err.code, err.headers.get("X-Airlock-Decision"))`)
		if strings.TrimSpace(r.Stdout) != "403 deny" {
			t.Errorf("python urllib to a denied host: %s", r)
		}
	})

	t.Run("kernel and DNS", func(t *testing.T) {
		p := e.probe(t, name)
		dnsAddr := hostPort(info.HostAddr, "53")
		steps := []struct{ cmd, want string }{
			// Ports 80 and 443 are redirected to the transparent listener (connect succeeds,
			// the proxy decides); every other port is refused by the kernel.
			{"connect 4 tcp 198.18.0.20:8443", "EPERM"}, // the denied host, directly
			{"connect 4 tcp 198.18.0.10:8080", "EPERM"}, // the allowed host, on a port the policy does not name
			{"sendto 4 198.18.0.53:53", "EPERM"},        // the outside resolver, directly
			{"resolve denied.test " + dnsAddr, "ERR RCODE REFUSED"},
			{"resolve allowed.test " + dnsAddr, "OK 198.18.0.10"},
		}
		for _, s := range steps {
			if got := p.Do(t, s.cmd); got != s.want {
				t.Errorf("%s: got %q, want %q", s.cmd, got, s.want)
			}
		}
		// The resolver the sandbox's resolv.conf names is the filter.
		r := e.exec(t, nil, name, nil, nil, "dig", "+time=5", "+tries=1", "denied.test")
		if !strings.Contains(r.Stdout, "status: REFUSED") {
			t.Errorf("dig denied.test inside the sandbox: %s", r)
		}
		if n := e.w.DNS.Queries(testnet.NameDenied); n != 0 {
			t.Errorf("the outside resolver got %d queries for %s", n, testnet.NameDenied)
		}
	})

	t.Run("credential", func(t *testing.T) {
		before := len(e.w.API.Requests())
		r := e.sh(t, name, curlScript("https://api.allowed.test/cred"))
		body, code, _ := parseCurl(t, r)
		if r.Code != 0 || code != 200 || !strings.Contains(body, "host=api.allowed.test") {
			t.Fatalf("intercepted host with injection: %s", r)
		}
		reqs := e.w.API.Requests()[before:]
		if len(reqs) != 1 || reqs[0].Header.Get("Authorization") != "Bearer "+sbToken {
			t.Fatalf("upstream did not get the injected credential: %d requests", len(reqs))
		}
		// The sandbox sees neither the value in its environment, nor in its public files, nor
		// in the sidecar's process environment.
		r = e.sh(t, name, "env; cat \"$SSL_CERT_FILE\" /etc/resolv.conf")
		if r.Code != 0 || strings.Contains(r.Stdout+r.Stderr, sbToken) || strings.Contains(r.Stdout, sbOpenAIKey) {
			t.Errorf("a secret is visible in the sandbox's environment or files (exit %d)", r.Code)
		}
		// The sidecar's own environment holds the secrets (read from outside), but a process in
		// the sandbox, root without capabilities in the same pid namespace, cannot read it.
		cur, _ := e.info(t, name)
		for _, pid := range []int{cur.SidecarPid, cur.SupervisorPid} {
			if pid <= 0 {
				t.Fatalf("list: no pid in %+v", cur)
			}
			outside, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
			if err != nil || !bytes.Contains(outside, []byte(sbToken)) {
				t.Fatalf("pid %d's environment does not hold the secret (%v): the check below would prove nothing", pid, err)
			}
			r = e.sh(t, name, fmt.Sprintf("cat /proc/%d/environ", pid))
			if r.Code == 0 || strings.Contains(r.Stdout, sbToken) || strings.Contains(r.Stdout, sbOpenAIKey) {
				t.Errorf("the sandbox can read /proc/%d/environ (the sidecar's secrets): exit %d", pid, r.Code)
			}
		}
	})

	t.Run("llm", func(t *testing.T) {
		calls := e.llm.Calls()
		r := e.sh(t, name, curlScript(`-X POST "$OPENAI_BASE_URL/chat/completions" -H 'Content-Type: application/json' `+
			`-H 'Authorization: Bearer sk-sandbox-has-no-key' -d '{"model":"gpt-e2e","messages":[{"role":"user","content":"hi"}]}'`))
		body, code, _ := parseCurl(t, r)
		if code != 200 || !strings.Contains(body, "Hello from the fake provider") {
			t.Fatalf("chat completion through OPENAI_BASE_URL: %s", r)
		}
		r = e.exec(t, nil, name, nil, nil, e.python, "-c", `import json, os, urllib.request
req = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps({"model": "gpt-e2e", "messages": [{"role": "user", "content": "hi"}]}).encode(),
    headers={"Content-Type": "application/json"})
print(json.load(urllib.request.urlopen(req, timeout=20))["choices"][0]["message"]["content"])`)
		if strings.TrimSpace(r.Stdout) != "Hello from the fake provider" {
			t.Errorf("python chat completion through OPENAI_BASE_URL: %s", r)
		}
		if e.llm.Calls() != calls+2 {
			t.Errorf("provider calls: got %d, want %d", e.llm.Calls(), calls+2)
		}
		for _, h := range e.llm.Headers() {
			if got := h.Get("Authorization"); got != "Bearer "+sbOpenAIKey {
				t.Errorf("provider got Authorization %q, want the sidecar's key", got)
			}
		}
	})
}

// net joins a host address and a port.
func hostPort(host, port string) string { return host + ":" + port }

// Without the env file: no proxy or CA variables (--no-env also drops the caller's), so the
// clients are told to trust the world's CA by argument. DNS goes to the filter (resolv.conf)
// and the kernel sends TCP 443 to the transparent listener.
func testSandboxTransparent(t *testing.T, e *sbEnv, name string) {
	env := []string{"HTTPS_PROXY=http://198.18.0.99:1", "SSL_CERT_FILE=/nonexistent"}
	r := e.exec(t, []string{"--no-env"}, name, env, nil, "sh", "-c", "env | grep -i -E '_proxy|BASE_URL|SSL_CERT_FILE|CA_BUNDLE|CAINFO' || true")
	if strings.TrimSpace(r.Stdout) != "" {
		t.Fatalf("--no-env leaves proxy or CA variables: %q", r.Stdout)
	}
	env = nil
	before := len(e.w.Allowed.Requests())
	r = e.exec(t, []string{"--no-env"}, name, env, nil, "sh", "-c", curlScript("--cacert "+e.inside("ca.pem")+" https://allowed.test/transparent"))
	body, code, _ := parseCurl(t, r)
	if r.Code != 0 || code != 200 || !strings.Contains(body, "upstream=198.18.0.10 port=443 host=allowed.test method=GET path=/transparent") {
		t.Fatalf("transparent curl: %s", r)
	}
	r = e.exec(t, []string{"--no-env"}, name, env, nil, e.python, "-c",
		`import ssl, urllib.request
ctx = ssl.create_default_context(cafile="`+e.inside("ca.pem")+`")
print(urllib.request.urlopen("https://allowed.test/transparent-py", timeout=20, context=ctx).read().decode())`)
	if r.Code != 0 || !strings.Contains(r.Stdout, "path=/transparent-py") {
		t.Fatalf("transparent python: %s", r)
	}
	if n := len(e.w.Allowed.Requests()) - before; n != 2 {
		t.Errorf("allowed.test got %d requests, want 2", n)
	}
	// git with no proxy variable: the kernel sends its HTTPS to the transparent proxy.
	gitBefore := len(e.git.Requests())
	dst := filepath.Join(e.out, "clone-transparent-"+name)
	r = e.exec(t, []string{"--no-env"}, name, env, nil, "git", "-c", "http.sslCAInfo="+e.inside("ca.pem"), "clone", "--quiet", e.git.URLAt(443), e.inside("clone-transparent-"+name))
	if r.Code != 0 {
		t.Fatalf("transparent git clone: %s", r)
	}
	if got, err := os.ReadFile(filepath.Join(dst, testnet.GitFile)); err != nil || string(got) != testnet.GitFileContent {
		t.Errorf("transparent git clone: file %q, %v", got, err)
	}
	if len(e.git.Requests()) == gitBefore {
		t.Error("transparent git clone: the git server saw no request")
	}
	// A denied name does not resolve; its address, given by hand, gets nowhere.
	r = e.exec(t, []string{"--no-env"}, name, env, nil, "curl", "--silent", "--max-time", "20", "--cacert", e.inside("ca.pem"), "https://denied.test/")
	if r.Code != curlResolveFailed {
		t.Errorf("transparent curl to a denied name: want exit %d (name refused): %s", curlResolveFailed, r)
	}
	r = e.exec(t, []string{"--no-env"}, name, env, nil, "curl", "--silent", "--max-time", "20", "--cacert", e.inside("ca.pem"),
		"--resolve", "denied.test:443:198.18.0.20", "https://denied.test/")
	if r.Code == 0 {
		t.Errorf("transparent curl to a denied address succeeded: %s", r)
	}
	for _, req := range e.w.Denied.Requests() {
		t.Errorf("the denied host got a request: %+v", req)
	}
}

// exec passes stdin through, returns the command's exit code, and fails cleanly on a missing
// sandbox.
func testSandboxExec(t *testing.T, e *sbEnv, name string) {
	if r := e.sh(t, name, "exit 7"); r.Code != 7 {
		t.Errorf("exit code: %s, want 7", r)
	}
	if r := e.sh(t, name, "kill -TERM $$"); r.Code != 128+int(syscall.SIGTERM) {
		t.Errorf("killed by SIGTERM: %s, want %d", r, 128+int(syscall.SIGTERM))
	}
	r := e.exec(t, nil, name, nil, strings.NewReader("line one\nline two\n"), "sh", "-c", "tr a-z A-Z")
	if r.Code != 0 || r.Stdout != "LINE ONE\nLINE TWO\n" {
		t.Errorf("stdin through exec: %s", r)
	}
	// The command runs in the sandbox's cgroup and namespace. Inside, its own cgroup
	// namespace shows "/": look at it from the host.
	cgroup, netns := hostViewOfExec(t, e, name)
	if !strings.Contains(cgroup, "0::"+strings.TrimPrefix(filepath.Join(e.cgParent, name), "/sys/fs/cgroup/unified")+"\n") &&
		!strings.Contains(cgroup, "0::"+strings.TrimPrefix(filepath.Join(e.cgParent, name), "/sys/fs/cgroup")+"\n") {
		t.Errorf("exec'd process is not in the sandbox cgroup %s: %s", filepath.Join(e.cgParent, name), cgroup)
	}
	nsIno := func(p string) string {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("net:[%d]", st.Ino)
	}
	if netns != nsIno("/run/netns/airlock-"+name) {
		t.Errorf("exec'd process is in %s, not in netns airlock-%s", netns, name)
	}
	r = e.exec(t, nil, e.name("missing"), nil, nil, "true")
	if r.Code != 1 || !strings.HasPrefix(r.Stderr, "airlock: ") {
		t.Errorf("exec in a missing sandbox: %s, want exit 1 with an airlock: line", r)
	}
}

// hostViewOfExec runs a command in sandbox name and returns its /proc/PID/cgroup and network
// namespace as the host sees them.
func hostViewOfExec(t *testing.T, e *sbEnv, name string) (cgroup, netns string) {
	t.Helper()
	marker := "hostview-" + name
	ctx, cancel := context.WithTimeout(context.Background(), sbCommandTimeout)
	defer cancel()
	cmd := e.command(ctx, nil, "sandbox", "exec", "--state-dir", e.stateDir, name, "--", "sh", "-c", "echo started; read x", marker)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { in.Close(); _ = cmd.Wait() }()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "started\n" {
		t.Fatalf("exec: %q, %v", line, err)
	}
	pids, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range pids {
		args, err := os.ReadFile(p)
		if err != nil || !bytes.HasSuffix(args, []byte("\x00"+marker+"\x00")) || !bytes.HasPrefix(args, []byte("sh\x00")) {
			continue
		}
		dir := filepath.Dir(p)
		cg, _ := os.ReadFile(filepath.Join(dir, "cgroup"))
		ns, _ := os.Readlink(filepath.Join(dir, "ns", "net"))
		return string(cg), ns
	}
	t.Fatalf("no process with %s on the host", marker)
	return "", ""
}

// kill -9 the sidecar: the sandbox stays closed while it is down, and the supervisor starts
// a new one.
func testSandboxSidecarKill(t *testing.T, e *sbEnv, name string) {
	info, _ := e.info(t, name)
	if info.SidecarPid <= 0 || !processAlive(info.SidecarPid) {
		t.Fatalf("list reports sidecar pid %d, not a live process", info.SidecarPid)
	}
	tw := testnet.NewTripwire(t, e.w.Sidecar, hostPort(info.HostAddr, "9999"))
	p := e.probe(t, name)
	if got := p.Do(t, "uid"); !strings.HasPrefix(got, "OK") {
		t.Fatalf("probe: %q", got)
	}
	if err := syscall.Kill(info.SidecarPid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill sidecar: %v", err)
	}
	// SIGKILL is delivered asynchronously: wait until the process is gone (its sockets
	// closed), so the checks below run while no sidecar listens, unless the supervisor has
	// already started the next one.
	for deadline := time.Now().Add(10 * time.Second); processAlive(info.SidecarPid); {
		if time.Now().After(deadline) {
			t.Fatalf("sidecar %d still alive 10s after SIGKILL", info.SidecarPid)
		}
		time.Sleep(5 * time.Millisecond) // polling the kernel's reaping, bounded
	}
	// The kernel programs are pinned, not owned by the sidecar: still closed.
	for _, s := range []struct{ cmd, want string }{
		{"connect 4 tcp 198.18.0.10:8080", "EPERM"}, // allowed host, port not allowed
		{"connect 4 tcp 198.18.0.20:8443", "EPERM"},
		{"connect 4 tcp " + tw.Addr, "EPERM"}, // a host-side port that is no listener of the sidecar
		{"sendto 4 198.18.0.53:53", "EPERM"},
	} {
		if got := p.Do(t, s.cmd); got != s.want {
			t.Errorf("sidecar down: %s: got %q, want %q", s.cmd, got, s.want)
		}
	}
	// TCP 443 is still redirected to the transparent listener: refused while it is down
	// (or accepted by the restarted sidecar, which decides); never a path to the host.
	if got := p.Do(t, "connect 4 tcp 198.18.0.20:443"); got != "ECONNREFUSED" && got != "OK" {
		t.Errorf("sidecar down: connect 198.18.0.20:443: got %q, want ECONNREFUSED (or OK once restarted)", got)
	}
	if n, err := tw.Connections(); err != nil || n != 0 {
		t.Errorf("tripwire on the host side: %d connections (%v), want 0", n, err)
	}
	for _, req := range e.w.Denied.Requests() {
		t.Errorf("the denied host got a request: %+v", req)
	}

	next := e.waitSidecar(t, name, info.SidecarPid)
	if next.SupervisorPid != info.SupervisorPid {
		t.Errorf("supervisor pid changed from %d to %d", info.SupervisorPid, next.SupervisorPid)
	}
	r := e.sh(t, name, curlScript("https://allowed.test/after-restart"))
	if _, code, _ := parseCurl(t, r); r.Code != 0 || code != 200 {
		t.Fatalf("proxied request after the restart: %s", r)
	}
	if got := p.Do(t, "connect 4 tcp 198.18.0.20:8443"); got != "EPERM" {
		t.Errorf("after the restart: direct connect: %q", got)
	}
}

// delete removes every resource of the sandbox, and is idempotent.
func testSandboxDelete(t *testing.T, e *sbEnv) {
	name := e.name("del")
	info := e.create(t, name)
	for _, p := range []string{"/run/netns/" + info.Netns, info.Cgroup, filepath.Join(ebpf.DefaultPinRoot, name),
		info.EnvFile, info.CABundle} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("after create: %v", err)
		}
	}
	if !contains(vethsIn(t, e.w.Sidecar), info.HostVeth) {
		t.Errorf("after create: no host veth %q in the host namespace", info.HostVeth)
	}
	r := e.run(t, nil, nil, "sandbox", "delete", "--state-dir", e.stateDir, name)
	if r.Code != 0 {
		t.Fatalf("sandbox delete: %s", r)
	}
	if left := e.leftovers(t, name, info); len(left) > 0 {
		t.Errorf("left after delete: %q", left)
	}
	if r := e.run(t, nil, nil, "sandbox", "delete", "--state-dir", e.stateDir, name); r.Code != 0 {
		t.Errorf("second delete: %s, want exit 0", r)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// exec --ephemeral creates a sandbox for one command and deletes it afterwards.
func testSandboxEphemeral(t *testing.T, e *sbEnv) {
	name := e.name("eph")
	vethsBefore := len(vethsIn(t, e.w.Sidecar))
	e.cleanupSandbox(t, name)
	args := append([]string{"sandbox", "exec", "--state-dir", e.stateDir, "--ephemeral"}, e.createArgs()...)
	args = append(args, name, "--", "sh", "-c", `echo "$AIRLOCK_SANDBOX"; `+curlScript("https://allowed.test/ephemeral")+`; exit 3`)
	r := e.run(t, nil, createEnv(), args...)
	if r.Code != 3 || !strings.HasPrefix(r.Stdout, name+"\n") || !strings.Contains(r.Stdout, "path=/ephemeral") {
		t.Errorf("ephemeral exec: %s, want exit 3, the name and the upstream's answer", r)
	}
	if left := e.leftovers(t, name, sandboxInfo{}); len(left) > 0 {
		t.Errorf("left after an ephemeral exec: %q", left)
	}
	if n := len(vethsIn(t, e.w.Sidecar)); n != vethsBefore {
		t.Errorf("host veths: %d before, %d after", vethsBefore, n)
	}
}

// startReadingLines starts cmd with its stdout read line by line (the scanner, over out) and
// its stderr collected.
func startReadingLines(t *testing.T, cmd *exec.Cmd) (sc *bufio.Scanner, out io.ReadCloser, stderr *bytes.Buffer) {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr = &bytes.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return bufio.NewScanner(out), out, stderr
}

// exec --ephemeral without a terminal (the runtime creates the container with the command while
// the sidecar starts): the command reads this process's stdin, and a SIGTERM sent to airlock
// reaches it (its trap's exit status is airlock's); nothing is left afterwards.
func testSandboxEphemeralStdinSignals(t *testing.T, e *sbEnv) {
	name := e.name("ephsig")
	e.cleanupSandbox(t, name)
	args := append([]string{"sandbox", "exec", "--state-dir", e.stateDir, "--ephemeral"}, e.createArgs()...)
	args = append(args, name, "--", "sh", "-c", `read line; echo "got $line"; trap 'echo terminated; exit 7' TERM; echo ready; while :; do sleep 0.05; done`)
	ctx, cancel := context.WithTimeout(context.Background(), sbCommandTimeout)
	defer cancel()
	cmd := e.command(ctx, createEnv(), args...)
	cmd.Stdin = strings.NewReader("hello from stdin\n")
	sc, _, stderr := startReadingLines(t, cmd)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if sc.Text() == "ready" {
			testEphemeralSupervisedInProcess(t, e, name)
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
		}
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Errorf("ephemeral exec after SIGTERM: %v, want exit 7 (the command's trap); stderr:\n%s", err, stderr)
	}
	if want := []string{"got hello from stdin", "ready", "terminated"}; !slices.Equal(lines, want) {
		t.Errorf("the command printed %q, want %q; stderr:\n%s", lines, want, stderr)
	}
	if left := e.leftovers(t, name, sandboxInfo{}); len(left) > 0 {
		t.Errorf("left after an ephemeral exec: %q", left)
	}
}

// testEphemeralSupervisedInProcess: an ephemeral sandbox's sidecar and its supervisor are the
// exec --ephemeral process itself (no `airlock run` or `sandbox supervise` process is started
// for it), and that sidecar serves: list reports it healthy, its admin listener answering on the
// port it bound itself.
func testEphemeralSupervisedInProcess(t *testing.T, e *sbEnv, name string) {
	info, _ := e.info(t, name)
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", info.SupervisorPid))
	if err != nil || !bytes.Contains(cmdline, []byte("--ephemeral")) {
		t.Errorf("supervisor pid %d (%q, %v): want the exec --ephemeral process", info.SupervisorPid, cmdline, err)
	}
	if info.SidecarPid != info.SupervisorPid {
		t.Errorf("sidecar pid %d, supervisor pid %d: want both the exec --ephemeral process", info.SidecarPid, info.SupervisorPid)
	}
	entries, _ := os.ReadDir("/proc")
	for _, d := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue
		}
		supervise := bytes.Contains(b, []byte("supervise\x00")) && bytes.HasSuffix(b, []byte("\x00"+name+"\x00"))
		run := bytes.Contains(b, []byte("\x00run\x00")) && bytes.Contains(b, []byte("\x00--sandbox\x00"+name+"\x00"))
		if supervise || run {
			t.Errorf("a process of its own runs for the ephemeral sandbox's sidecar: pid %s %q", d.Name(), b)
		}
	}
	if info.Health != "ok" || info.AdminAddr == "" || strings.HasSuffix(info.AdminAddr, ":0") {
		t.Errorf("list: health %q, admin %q: want ok (the in-process sidecar answers /readyz on the port it bound)", info.Health, info.AdminAddr)
	}
}

// production refuses to create a sandbox without kernel enforcement; development falls back
// with a WARN line. The sidecar is told to run without it by an extra run flag after "--"
// (an empty --cgroup, overriding the manager's), as a sidecar that cannot attach would.
func testSandboxEnvironment(t *testing.T, e *sbEnv) {
	noKernel := []string{"--", "--cgroup="}
	prod := e.name("prod")
	e.cleanupSandbox(t, prod)
	args := append([]string{"sandbox", "create", prod}, e.createArgs("--environment", "production")...)
	r := e.run(t, nil, createEnv(), append(args, noKernel...)...)
	if r.Code != 1 || !strings.HasPrefix(r.Stderr, "airlock: ") || !strings.Contains(r.Stderr, "kernel enforcement") {
		t.Errorf("production without kernel enforcement: %s, want exit 1 and one airlock: line about kernel enforcement", r)
	}
	if left := e.leftovers(t, prod, sandboxInfo{}); len(left) > 0 {
		t.Errorf("left after a refused create: %q", left)
	}
	dev := e.name("dev")
	e.cleanupSandbox(t, dev)
	args = append([]string{"sandbox", "create", dev}, e.createArgs("--environment", "development")...)
	r = e.run(t, nil, createEnv(), append(args, noKernel...)...)
	if r.Code != 0 || !strings.Contains(r.Stdout+r.Stderr, "WARN") {
		t.Errorf("development without kernel enforcement: %s, want success with a WARN line", r)
	}
	// Without the kernel, the proxy still works for clients that use it.
	r = e.sh(t, dev, curlScript("https://allowed.test/dev"))
	if _, code, _ := parseCurl(t, r); code != 200 {
		t.Errorf("development sandbox without kernel enforcement: proxied request: %s", r)
	}
}

// reap removes a half-created sandbox (its create was killed) and an old one; a fresh healthy
// one survives --older-than 1h.
func testSandboxReap(t *testing.T, e *sbEnv) {
	fresh := e.name("fresh")
	freshInfo := e.create(t, fresh)

	// A create killed after its cgroup step (namespace, veth and cgroup exist, the sidecar
	// does not): wait for that progress line, then SIGKILL.
	half := e.name("half")
	e.cleanupSandbox(t, half)
	ctx, cancel := context.WithTimeout(context.Background(), sbCommandTimeout)
	defer cancel()
	cmd := e.command(ctx, createEnv(), append([]string{"sandbox", "create", half}, e.createArgs()...)...)
	sc, out, stderr := startReadingLines(t, cmd)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if strings.Contains(sc.Text(), "cgroup") {
			break
		}
	}
	_ = cmd.Process.Kill()
	_, _ = io.Copy(io.Discard, out)
	_ = cmd.Wait()
	if len(lines) == 0 || !strings.Contains(lines[len(lines)-1], "cgroup") {
		t.Fatalf("create printed %q before exiting (stderr %q); want a progress line for its cgroup step", lines, stderr.String())
	}
	halfInfo, ok := e.info(t, half)
	if !ok || halfInfo.Phase != "creating" {
		t.Errorf("after killing create at %q: list entry %+v (present %t), want phase creating", lines[len(lines)-1], halfInfo, ok)
	}
	for _, p := range []string{"/run/netns/airlock-" + half, filepath.Join(e.cgParent, half),
		filepath.Join(e.stateDir, "sandboxes", half+".json")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("after killing create at %q: %v (want it there for reap to remove)", lines[len(lines)-1], err)
		}
	}
	if !contains(vethsIn(t, e.w.Sidecar), halfInfo.HostVeth) {
		t.Errorf("after killing create: host veth %q not there", halfInfo.HostVeth)
	}

	r := e.run(t, nil, nil, "sandbox", "reap", "--state-dir", e.stateDir, "--older-than", "1h")
	if r.Code != 0 {
		t.Fatalf("reap --older-than 1h: %s", r)
	}
	if left := e.leftovers(t, half, halfInfo); len(left) > 0 {
		t.Errorf("half-created sandbox left after reap: %q", left)
	}
	if got, ok := e.info(t, fresh); !ok || got.Health != "ok" || !processAlive(got.SidecarPid) {
		t.Fatalf("a fresh healthy sandbox did not survive reap --older-than 1h: %+v", got)
	}
	r = e.run(t, nil, nil, "sandbox", "reap", "--state-dir", e.stateDir, "--older-than", "0s")
	if r.Code != 0 {
		t.Fatalf("reap --older-than 0s: %s", r)
	}
	if left := e.leftovers(t, fresh, freshInfo); len(left) > 0 {
		t.Errorf("expired sandbox left after reap --older-than 0s: %q", left)
	}
}

// 20 sandboxes created and deleted one after the other: nothing grows.
func testSandboxLoop(t *testing.T, e *sbEnv) {
	mine := fmt.Sprintf("e%d-", os.Getpid()) // names of this process's sandboxes
	count := func() map[string]int {
		return map[string]int{
			"fds":        countDir(t, "/proc/self/fd", func(os.DirEntry) bool { return true }),
			"netns":      countDir(t, "/run/netns", func(d os.DirEntry) bool { return strings.HasPrefix(d.Name(), "airlock-"+mine) }),
			"cgroups":    countDir(t, e.cgParent, func(d os.DirEntry) bool { return d.IsDir() }),
			"pins":       countDir(t, ebpf.DefaultPinRoot, func(d os.DirEntry) bool { return strings.HasPrefix(d.Name(), mine) }),
			"veths":      len(vethsIn(t, e.w.Sidecar)),
			"listeners":  listenersIn(t, e.w.Sidecar),
			"processes":  e.processesOf(),
			"statefiles": countDir(t, filepath.Join(e.stateDir, "sandboxes"), func(d os.DirEntry) bool { return d.Name() != ".lock" }),
		}
	}
	const n = 20
	var before map[string]int
	start := time.Now()
	var names []string
	for i := 0; i < n; i++ {
		name := e.name("loop")
		names = append(names, name)
		e.create(t, name)
		if r := e.run(t, nil, nil, "sandbox", "delete", "--state-dir", e.stateDir, name); r.Code != 0 {
			t.Fatalf("delete %s: %s", name, r)
		}
		if i == 0 {
			before = count() // after one round, so lazily opened descriptors are counted
		}
	}
	t.Logf("%d creates and deletes in %v", n, time.Since(start).Round(time.Millisecond))
	after := count()
	for k, v := range before {
		if after[k] > v {
			t.Errorf("%s grew over %d create/delete rounds: %d -> %d", k, n, v, after[k])
		}
	}
	for _, name := range names {
		if left := e.fsLeftovers(t, name); len(left) > 0 {
			t.Errorf("left after the loop: %q", left)
		}
	}
	for _, info := range e.list(t) {
		if contains(names, info.Name) {
			t.Errorf("left after the loop: list entry %s", info.Name)
		}
	}
}
