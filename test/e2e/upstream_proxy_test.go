//go:build linux

package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/airlock-dev/airlock/test/privtest"
	"github.com/airlock-dev/airlock/test/testnet"
)

// squidAddr is where the tests' corporate proxy (a real Squid) listens, in the upstream
// namespace: airlock reaches it the way it would reach the test hosts, which stay directly
// routable from the sidecar, so a direct connection would succeed and show in their logs.
var squidAddr = netip.MustParseAddrPort("198.18.3.128:3128")

// squidWait bounds waiting for Squid's access log: it writes a line when a transaction ends
// (a tunnel when it closes; airlock's idle pooled connections close after --idle-timeout).
const squidWait = 20 * time.Second

// upstreamPolicy allows the world's hosts; private.test is allowed by name and resolves to an
// internal address.
const upstreamPolicy = `apiVersion: airlock/v1
kind: EgressPolicy
metadata:
  name: e2e-upstream
spec:
  mode: enforce
  egress:
    - name: allowed
      hosts: ["allowed.test", "api.allowed.test", "rebind.test", "fresh1.test", "fresh2.test"]
      ports: [80, 443]
    - name: intercepted
      hosts: ["intercept.test"]
      ports: [443]
      http:
        - methods: [GET]
          paths: ["/ok/**"]
    - name: internal-names
      hosts: ["private.test", "loopback.test"]
      ports: [80, 8080]
`

func randomSecret(prefix string) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// squidWorld is a world with Squid as its corporate proxy.
type squidWorld struct {
	w     *testnet.World
	squid *testnet.Squid
}

func newSquidWorld(t *testing.T, users map[string]string) *squidWorld {
	t.Helper()
	privtest.Require(t, "curl")
	parallelWorld(t)
	w := testnet.NewWorld(t)
	w.AddUpstreamAddr(t, squidAddr.Addr())
	s := w.StartSquid(t, w.Upstream, testnet.SquidConfig{Addr: squidAddr, Users: users})
	return &squidWorld{w: w, squid: s}
}

// squidSaw reports whether Squid's log holds an entry whose URL contains s.
func (sw *squidWorld) squidSaw(s string) bool {
	for _, e := range sw.squid.Log() {
		if strings.Contains(e.URL, s) {
			return true
		}
	}
	return false
}

// directFrom lists the requests an upstream got straight from the sidecar's address: a
// connection airlock made without the proxy.
func directFrom(u *testnet.Upstream) []testnet.UpstreamRequest {
	var out []testnet.UpstreamRequest
	for _, r := range u.Requests() {
		if h, _, _ := strings.Cut(r.Remote, ":"); h == testnet.SidecarAddr4.String() || strings.Contains(r.Remote, testnet.SidecarAddr6.String()) {
			out = append(out, r)
		}
	}
	return out
}

// TestUpstreamSquid runs airlock behind a real Squid that requires Basic credentials:
// passthrough, intercepted, plain HTTP and HTTP/2 reach allowed hosts through Squid, which
// is asked for the checked address and the destination's port; denied and internal
// destinations never reach Squid; a no-proxy host goes direct; the proxy's credentials are
// in Squid's log and nowhere the sandbox can read; with Squid refusing (407) or stopped,
// requests fail closed with upstream_proxy_failed and no host sees a direct connection.
func TestUpstreamSquid(t *testing.T) {
	password := randomSecret("squid-pw-")
	sw := newSquidWorld(t, map[string]string{"corp-agent": password})
	w := sw.w
	authFile := w.WriteFile(t, "proxy-auth", []byte("corp-agent:"+password+"\n"))
	a := w.StartAirlock(t, testnet.AirlockConfig{Binary: airlockBinary(t), Policy: upstreamPolicy, Sandbox: sandboxName,
		Args: []string{"--upstream-proxy", sw.squid.URL, "--upstream-proxy-auth-file", authFile,
			"--upstream-no-proxy", "api.allowed.test", "--idle-timeout", "2s"}})
	caFile := writePEM(t, w, "airlock-ca.pem", a.CAPEM(t))
	var seen []string // every body and header block the sandbox received

	check := func(name string, r curlResult, code int, wantIn string) {
		t.Helper()
		seen = append(seen, r.Body, r.Stderr)
		for k, v := range r.Header {
			seen = append(seen, k+": "+strings.Join(v, ","))
		}
		if r.Code != code || !strings.Contains(r.Body, wantIn) {
			t.Fatalf("%s: %v; want %d with %q", name, r, code, wantIn)
		}
	}
	// Denied and internal first: the allowed requests' log lines that follow prove Squid had
	// written everything before them.
	r := curlProxy(t, w, a, "--cacert", w.CA.File, "https://denied.test/x")
	seen = append(seen, r.Body, r.Stderr)
	if r.ConnectCode != 403 {
		t.Fatalf("denied: %v, want CONNECT answered 403", r)
	}
	r = curlProxy(t, w, a, "http://private.test:8080/x")
	check("internal answer", r, 403, `"reason":"internal_address"`)
	// The corporate proxy itself is not a destination the sandbox can name.
	r = curlProxy(t, w, a, "http://"+squidAddr.String()+"/")
	check("the upstream proxy as a destination", r, 403, `"reason":"no_rule"`)
	r = curlProxy(t, w, a, "--proxytunnel", "http://"+squidAddr.String()+"/")
	seen = append(seen, r.Body, r.Stderr)
	if r.ConnectCode != 403 {
		t.Fatalf("CONNECT to the upstream proxy: %v, want 403", r)
	}
	// A rebinding name (public first, then loopback, TTL 0): airlock resolves once per
	// connection and asks Squid for the address it checked, so neither answer lets Squid
	// resolve the name itself.
	for i := range 3 {
		r = curlProxy(t, w, a, "http://rebind.test/rebind-"+strconv.Itoa(i))
		seen = append(seen, r.Body)
		if r.Code == 200 && !strings.Contains(r.Body, "upstream=198.18.0.10") || r.Code != 200 && !strings.Contains(r.Body, "internal_address") {
			t.Fatalf("rebinding name: %v", r)
		}
	}

	r = curlProxy(t, w, a, "--cacert", w.CA.File, "https://allowed.test/passthrough")
	check("passthrough", r, 200, "upstream=198.18.0.10 port=443")
	r = curlProxy(t, w, a, "--cacert", w.CA.File, "--http2", "https://allowed.test/h2")
	check("passthrough h2", r, 200, "path=/h2")
	r = curlProxy(t, w, a, "http://allowed.test/plain")
	check("plain http", r, 200, "upstream=198.18.0.10 port=80")
	r = curlProxy(t, w, a, "--cacert", caFile, "https://intercept.test/ok/1")
	check("intercepted", r, 200, "upstream=198.18.0.30 port=443")
	r = curlProxy(t, w, a, "--cacert", caFile, "--http2", "https://intercept.test/ok/2")
	check("intercepted, client asks h2", r, 200, "path=/ok/2")
	r = curlProxy(t, w, a, "--cacert", w.CA.File, "https://api.allowed.test/direct")
	check("no-proxy host", r, 200, "upstream=198.19.0.10 port=443")

	for _, want := range []string{"198.18.0.10:443", "198.18.0.10:80", "198.18.0.30:443"} {
		e := sw.squid.WaitLog(t, squidWait, "CONNECT "+want, func(e testnet.SquidEntry) bool {
			return e.Method == "CONNECT" && e.URL == want && e.Status == 200
		})
		if e.User != "corp-agent" {
			t.Errorf("squid logged user %q for %s, want corp-agent", e.User, want)
		}
	}
	for _, never := range []string{"denied.test", "198.18.0.20", "private.test", "10.0.0.1", "allowed.test:", "intercept.test", "198.19.0.10",
		"rebind.test", "127.0.0.1", squidAddr.String()} {
		if sw.squidSaw(never) {
			t.Errorf("squid was asked for %s:\n%v", never, sw.squid.Log())
		}
	}
	if got := len(w.API.Requests()); got != 1 || len(directFrom(w.API)) != 1 {
		t.Errorf("no-proxy host: %d requests, %d from the sidecar; want 1 direct", got, len(directFrom(w.API)))
	}
	for _, u := range []*testnet.Upstream{w.Allowed, w.Intercept, w.Denied} {
		if d := directFrom(u); len(d) != 0 {
			t.Errorf("%s got direct connections from airlock: %+v", u.Addr, d)
		}
	}
	for _, u := range []*testnet.Upstream{w.Allowed, w.Intercept} {
		for _, req := range u.Requests() {
			if req.Header.Get("Proxy-Authorization") != "" {
				t.Errorf("%s received Proxy-Authorization", u.Addr)
			}
		}
	}

	// Squid stops taking the credentials (a rotation airlock has not seen): 407, re-read,
	// 407 again: 502 upstream_proxy_failed, and nothing goes direct. Each curl opens a new
	// tunnel (Squid checks credentials per tunnel, and trusts them for a second).
	sw.squid.SetPassword(t, "corp-agent", randomSecret("rotated-"))
	n := 0
	waitFor(t, squidWait, "squid to refuse the old password", func() bool {
		n++
		r = curlProxy(t, w, a, "--cacert", w.CA.File, "https://allowed.test/after-rotation-"+strconv.Itoa(n))
		seen = append(seen, r.Body, r.Stderr)
		return r.ConnectCode == 502
	})
	before := len(w.Allowed.Requests())
	// Names never asked for before, so no pooled tunnel of airlock's carries the request.
	w.DNS.Set("fresh1.test", testnet.DefaultTTL, w.Allowed.Addr)
	w.DNS.Set("fresh2.test", testnet.DefaultTTL, w.Allowed.Addr)
	r = curlProxy(t, w, a, "http://fresh1.test/after-rotation")
	check("407", r, 502, `"reason":"upstream_proxy_failed"`)

	// Squid gone: the same, never a direct connection.
	sw.squid.Stop()
	r = curlProxy(t, w, a, "http://fresh2.test/squid-down")
	check("squid stopped", r, 502, `"reason":"upstream_proxy_failed"`)
	if got := len(w.Allowed.Requests()); got != before {
		t.Errorf("allowed.test got %d requests while Squid refused or was down", got-before)
	}
	if d := directFrom(w.Allowed); len(d) != 0 {
		t.Errorf("allowed.test got direct connections: %+v", d)
	}
	all := strings.Join(append(seen, a.Stderr.String()), "\n")
	for _, leak := range []string{password, "Proxy-Authenticate", "airlock-test-squid", "squid/"} {
		if strings.Contains(all, leak) {
			t.Errorf("%q reached the sandbox or the sidecar's log", leak)
		}
	}
}

// nodeOpenAI is the official Node SDK the model-call leg runs (testnet.NodeModules).
const nodeOpenAI = "openai@7.55.0"

// nodeChat calls the model API once with the official Node SDK and prints the answer.
const nodeChat = `const OpenAI = require("openai").default ?? require("openai");
new OpenAI({ baseURL: "http://127.0.0.1:4000/v1", apiKey: "airlock", maxRetries: 0 })
  .chat.completions.create({ model: "gpt-e2e", messages: [{ role: "user", content: "hello" }] })
  .then((c) => console.log(c.choices[0].message.content))
  .catch((e) => { console.error(String(e)); process.exit(1); });`

// nodeUndici is Node's fetch library, whose ProxyAgent sends requests through airlock.
const nodeUndici = "undici@6.29.1"

// nodeFetch fetches argv[3] through the proxy argv[1], trusting the CA file argv[2], and
// prints the body.
const nodeFetch = `const fs = require("fs");
const { fetch, ProxyAgent } = require("undici");
const [proxy, ca, url] = process.argv.slice(1);
const agent = new ProxyAgent({ uri: proxy, requestTls: { ca: fs.readFileSync(ca) } });
fetch(url, { dispatcher: agent }).then((r) => r.text()).then((b) => { process.stdout.write(b); return agent.close(); })
  .catch((e) => { console.error(String(e)); process.exit(1); });`

// TestUpstreamSquidModelCallsAndGit: the model API's provider calls (airlock's own, on the
// operator path) go through Squid, asked for the provider's checked address, from the Go and
// Node SDKs; git clones an allowed repository, and Node's fetch reaches an allowed host,
// through airlock and Squid.
func TestUpstreamSquidModelCallsAndGit(t *testing.T) {
	privtest.Require(t, "git")
	mods := testnet.NodeModules(t, nodeOpenAI)
	undici := testnet.NodeModules(t, nodeUndici)
	lw := newLLMWorld(t)
	lw.AddUpstreamAddr(t, squidAddr.Addr())
	squid := lw.StartSquid(t, lw.Upstream, testnet.SquidConfig{Addr: squidAddr, ConnectPorts: []int{443, 8080, 8081}})
	git := lw.StartGitServer(t, netip.MustParseAddr("198.18.0.60"), "git.test")
	policy := llmPolicy + "  egress:\n    - name: git\n      hosts: [\"git.test\", \"allowed.test\"]\n      ports: [443]\n"
	a := lw.StartAirlock(t, testnet.AirlockConfig{Binary: airlockBinary(t), Policy: policy, Sandbox: sandboxName,
		Env:  []string{"E2E_OPENAI_KEY=" + e2eOpenAIKey, "E2E_ANTHROPIC_KEY=" + e2eAnthropicKey},
		Args: []string{"--upstream-proxy", squid.URL, "--idle-timeout", "2s"}})

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	oc := openai.NewClient(option.WithBaseURL("http://"+llmAddr+"/v1/"), option.WithAPIKey(e2eCallerKey),
		option.WithHTTPClient(lw.Sidecar.HTTPClient(t, nil)), option.WithMaxRetries(0))
	chat, err := oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-e2e",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}})
	if err != nil || chat.Choices[0].Message.Content != "Hello from the fake provider" {
		t.Fatalf("go sdk through airlock and squid: %v %+v", err, chat)
	}
	node := lw.Sidecar.Command(ctx, "node", "-e", nodeChat)
	node.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + lw.Dir, "NODE_PATH=" + mods}
	if out, err := node.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "Hello from the fake provider" {
		t.Fatalf("node sdk through airlock and squid: %v: %s", err, out)
	}
	fetch := lw.Sidecar.Command(ctx, "node", "-e", nodeFetch, a.ProxyURL.String(), lw.CA.File, "https://allowed.test/node-fetch")
	fetch.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + lw.Dir, "NODE_PATH=" + undici}
	if out, err := fetch.CombinedOutput(); err != nil || !strings.Contains(string(out), "upstream=198.18.0.10 port=443") {
		t.Fatalf("node fetch through airlock and squid: %v: %s", err, out)
	}
	clone := lw.Sidecar.Command(ctx, "git", "-c", "http.proxy="+a.ProxyURL.String(), "-c", "http.sslCAInfo="+lw.CA.File,
		"clone", "--quiet", git.URL, filepath.Join(lw.Dir, "clone"))
	clone.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + lw.Dir, "GIT_CONFIG_NOSYSTEM=1"}
	if out, err := clone.CombinedOutput(); err != nil {
		t.Fatalf("git clone through airlock and squid: %v: %s", err, out)
	}
	if got, err := os.ReadFile(filepath.Join(lw.Dir, "clone", testnet.GitFile)); err != nil || string(got) != testnet.GitFileContent {
		t.Fatalf("git clone: %s: %q %v", testnet.GitFile, got, err)
	}
	for _, want := range []string{"198.18.0.40:8080", "198.18.0.60:443", "198.18.0.10:443"} {
		squid.WaitLog(t, squidWait, "CONNECT "+want, func(e testnet.SquidEntry) bool {
			return e.Method == "CONNECT" && e.URL == want && e.Status == 200
		})
	}
	for _, u := range [][]testnet.UpstreamRequest{git.Requests(), lw.Allowed.Requests()} {
		for _, r := range u {
			if strings.HasPrefix(r.Remote, testnet.SidecarAddr4.String()+":") {
				t.Errorf("git.test got a direct connection from airlock: %+v", r)
			}
		}
	}
}

// TestUpstreamSquidCredentialsFromVault: the proxy's Basic credentials come from a real
// Vault; Squid logs the user, the password reaches neither the sandbox nor a log; after the
// password rotates (in Vault and at Squid), the 407 makes airlock read Vault again and the
// request goes through.
func TestUpstreamSquidCredentialsFromVault(t *testing.T) {
	privtest.Require(t, "curl")
	parallelWorld(t)
	cw := newCredWorld(t, 3600, 7200)
	w, password := cw.w, randomSecret("vault-squid-pw-")
	cw.v.PutKV(t, "e2e/proxy", map[string]any{"username": "vault-agent", "password": password})
	w.AddUpstreamAddr(t, squidAddr.Addr())
	squid := w.StartSquid(t, w.Upstream, testnet.SquidConfig{Addr: squidAddr, Users: map[string]string{"vault-agent": password}})
	a := cw.start(t, upstreamPolicy, "--upstream-proxy", squid.URL, "--upstream-proxy-auth-vault", "secret/data/e2e/proxy",
		"--upstream-no-proxy", "127.0.0.0/8", "--idle-timeout", "2s")
	var seen []string
	get := func(path string) {
		t.Helper()
		r := curlProxy(t, w, a, "--cacert", w.CA.File, "https://allowed.test"+path)
		seen = append(seen, r.Body, r.Stderr)
		if r.Code != 200 {
			t.Fatalf("%s: %v, want 200", path, r)
		}
	}
	get("/vault-credentials")
	e := squid.WaitLog(t, squidWait, "CONNECT 198.18.0.10:443", func(e testnet.SquidEntry) bool {
		return e.Method == "CONNECT" && e.URL == "198.18.0.10:443" && e.Status == 200
	})
	if e.User != "vault-agent" {
		t.Errorf("squid logged user %q, want vault-agent", e.User)
	}

	rotated := randomSecret("vault-squid-rotated-")
	cw.v.PutKV(t, "e2e/proxy", map[string]any{"username": "vault-agent", "password": rotated})
	squid.SetPassword(t, "vault-agent", rotated)
	n := 0
	waitFor(t, squidWait, "squid to refuse the old password once", func() bool {
		n++
		get("/after-rotation-" + strconv.Itoa(n)) // every one succeeds: a 407 is retried with fresh credentials
		for _, e := range squid.Log() {
			if e.Status == 407 {
				return true
			}
		}
		return false
	})
	all := strings.Join(append(seen, a.Stderr.String()), "\n")
	for _, leak := range []string{password, rotated} {
		if strings.Contains(all, leak) {
			t.Errorf("a proxy password reached the sandbox or the sidecar's log")
		}
	}
	for _, req := range w.Allowed.Requests() {
		if req.Header.Get("Proxy-Authorization") != "" {
			t.Errorf("allowed.test received Proxy-Authorization")
		}
	}
	if d := directFrom(w.Allowed); len(d) != 0 {
		t.Errorf("allowed.test got direct connections from airlock: %+v", d)
	}
}

// corpCA makes the inspecting proxy's CA: certificate and key PEM.
func corpCA(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "corp inspecting proxy CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

// TestUpstreamSquidInspecting: behind an inspecting Squid (ssl-bump, re-signing origins with
// its own CA), intercepted and passthrough hosts work with --upstream-proxy-ca (airlock's own
// verification and the sandbox's CA bundle trust it), and fail closed without it.
func TestUpstreamSquidInspecting(t *testing.T) {
	privtest.Require(t, "curl")
	parallelWorld(t)
	w := testnet.NewWorld(t)
	w.AddUpstreamAddr(t, squidAddr.Addr())
	cert, key := corpCA(t)
	squid := w.StartSquid(t, w.Upstream, testnet.SquidConfig{Addr: squidAddr,
		Bump: &testnet.SquidBump{CertPEM: cert, KeyPEM: key, TrustPEM: w.CA.PEM}})
	corpFile := w.WriteFile(t, "corp-ca.pem", cert)
	for _, withCA := range []bool{true, false} {
		bundle := filepath.Join(w.Dir, "bundle-"+strconv.FormatBool(withCA)+".pem")
		args := []string{"--upstream-proxy", squid.URL, "--ca-bundle-out", bundle, "--idle-timeout", "2s"}
		if withCA {
			args = append(args, "--upstream-proxy-ca", corpFile)
		}
		a := w.StartAirlock(t, testnet.AirlockConfig{Binary: airlockBinary(t), Policy: upstreamPolicy, Sandbox: sandboxName, Args: args})
		inter := curlProxy(t, w, a, "--cacert", bundle, "https://intercept.test/ok/inspected")
		pass := curlProxy(t, w, a, "--cacert", bundle, "https://allowed.test/inspected")
		a.Stop(t)
		if withCA {
			if inter.Code != 200 || !strings.Contains(inter.Body, "upstream=198.18.0.30") {
				t.Errorf("intercepted through the inspecting proxy with its CA: %v", inter)
			}
			if pass.Code != 200 || !strings.Contains(pass.Body, "upstream=198.18.0.10") {
				t.Errorf("passthrough through the inspecting proxy with its CA in the bundle: %v", pass)
			}
			continue
		}
		if inter.Code != 502 {
			t.Errorf("intercepted without the inspecting proxy's CA: %v, want 502 (airlock refuses the re-signed origin)", inter)
		}
		if pass.ExitCode != curlExitSSLCACert || pass.Code == 200 {
			t.Errorf("passthrough without the inspecting proxy's CA: %v, want curl exit %d (certificate not verified)", pass, curlExitSSLCACert)
		}
	}
}
