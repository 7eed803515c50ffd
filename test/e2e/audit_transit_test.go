//go:build linux

package e2e

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/test/privtest"
	"github.com/airlock-dev/airlock/test/testnet"
)

// transitPolicy lets the sandbox reach the echo upstream; no secrets.
const transitPolicy = `apiVersion: airlock/v1
kind: EgressPolicy
metadata:
  name: e2e-transit
spec:
  egress:
    - name: echo
      hosts: ["echo.test"]
      ports: [443]
      http:
        - paths: ["/**"]
`

// cutLink is a TCP path to Vault inside the sidecar namespace that the test cuts and
// restores: to the sidecar, Vault unreachable (a partition), then back with the same keys.
type cutLink struct {
	ns     *testnet.Netns
	addr   string // the listening address, kept across cuts
	target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
}

func newCutLink(t *testing.T, ns *testnet.Netns, target string) *cutLink {
	t.Helper()
	l := &cutLink{ns: ns, addr: "127.0.0.1:0", target: target, conns: map[net.Conn]struct{}{}}
	l.up(t)
	t.Cleanup(l.down)
	return l
}

// up listens (again, on the same port) and relays connections to the target.
func (l *cutLink) up(t *testing.T) {
	t.Helper()
	ln, err := l.ns.Listen("tcp", l.addr)
	if err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	l.ln, l.addr = ln, ln.Addr().String()
	l.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go l.relay(c)
		}
	}()
}

func (l *cutLink) relay(c net.Conn) {
	up, err := l.ns.DialContext(context.Background(), "tcp", l.target)
	if err != nil {
		_ = c.Close()
		return
	}
	l.mu.Lock()
	l.conns[c], l.conns[up] = struct{}{}, struct{}{}
	l.mu.Unlock()
	go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
	_, _ = io.Copy(c, up)
	_ = c.Close()
}

// down closes the listener and every relayed connection: Vault is unreachable.
func (l *cutLink) down() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln != nil {
		_ = l.ln.Close()
		l.ln = nil
	}
	for c := range l.conns {
		_ = c.Close()
	}
	l.conns = map[net.Conn]struct{}{}
}

// checkpointLines returns the checkpoint file's lines.
func checkpointLines(t *testing.T, a *testnet.Airlock) []audit.Checkpoint {
	t.Helper()
	b, err := os.ReadFile(a.AuditFile + ".checkpoints")
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []audit.Checkpoint
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		c, err := audit.ParseCheckpoint([]byte(line))
		if err != nil {
			t.Fatalf("checkpoint line %q: %v", line, err)
		}
		out = append(out, c)
	}
	return out
}

// runAirlockIn runs the airlock CLI inside the sidecar namespace (where Vault is) with env.
func runAirlockIn(t *testing.T, w *testnet.World, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := w.Sidecar.Command(context.Background(), airlockBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestAuditSigningVaultTransit: checkpoints are signed by Vault's Transit engine (the
// private key never in the sidecar) and verify with the public keys read from Vault; a
// rotation keeps older checkpoints verifiable; while Vault is unreachable requests and
// events go on, /readyz and the metrics say signing lags, the chain says why, and no
// checkpoint is written (neither unsigned nor signed locally); once Vault is back the waiting
// checkpoints are signed and the whole trail verifies. A checkpoint signed with another key,
// or a verifier holding only the pre-rotation key, fails.
func TestAuditSigningVaultTransit(t *testing.T) {
	privtest.Require(t)
	parallelWorld(t)
	cw := newCredWorld(t, 3600, 7200)
	v := cw.v
	if why := v.TransitMissing(t); why != "" {
		t.Fatal(why) // the test server mounts Transit: its absence is a broken build, not a skip
	}
	v.Must(t, "POST", "transit/keys/e2e-audit", map[string]any{"type": "ed25519"})
	v.Policy(t, "airlock", `
path "transit/sign/e2e-audit" { capabilities = ["update"] }
path "transit/keys/e2e-audit" { capabilities = ["read"] }
`)
	vu, err := url.Parse(v.Address)
	if err != nil {
		t.Fatal(err)
	}
	link := newCutLink(t, cw.w.Sidecar, vu.Host)
	a := cw.start(t, transitPolicy, "--vault-addr", "https://"+link.addr,
		"--audit-sign", "vault-transit:transit/e2e-audit", "--audit-checkpoint-every", "1s", "--audit-max-bytes", "4096")
	client := a.Client(t, a.CAPool(t))
	env := []string{"VAULT_ADDR=" + v.Address, "VAULT_TOKEN=" + v.RootToken, "VAULT_CACERT=" + v.CACertFile}
	request := func(tag string, n int) {
		for i := range n {
			if status, _, _ := credGet(t, client, fmt.Sprintf("https://echo.test/%s/%d", tag, i), nil); status != http.StatusOK {
				t.Fatalf("%s request %d: status %d", tag, i, status)
			}
		}
	}

	request("v1", 5)
	waitFor(t, 30*time.Second, "a checkpoint signed by transit", func() bool { return len(checkpointLines(t, a)) > 0 })
	pubV1, err := runAirlockIn(t, cw.w, env, "audit", "pubkey", "--vault-transit-key", "transit/e2e-audit")
	if err != nil {
		t.Fatalf("audit pubkey --vault-transit-key: %v\n%s", err, pubV1)
	}
	keysV1, err := audit.ParsePublicKeys([]byte(pubV1))
	if err != nil || len(keysV1) != 1 {
		t.Fatalf("exported transit public keys: %d, %v", len(keysV1), err)
	}
	kidV1 := audit.KeyID(keysV1[0])
	if cps := checkpointLines(t, a); audit.KeyID(cps[0].Key) != kidV1 {
		t.Fatalf("first checkpoint kid %s, want transit version 1's %s", audit.KeyID(cps[0].Key), kidV1)
	}

	// Rotation: new checkpoints carry version 2's key id, without a restart.
	v.Must(t, "POST", "transit/keys/e2e-audit/rotate", nil)
	waitFor(t, 30*time.Second, "a checkpoint signed by version 2", func() bool {
		request("v2", 1)
		cps := checkpointLines(t, a)
		return audit.KeyID(cps[len(cps)-1].Key) != kidV1
	})

	// Vault unreachable: requests go on, nothing is written to the checkpoint file.
	link.down()
	request("down", 3)
	waitFor(t, 30*time.Second, "/readyz saying signing lags", func() bool {
		status, body := a.AdminGet(t, "/readyz")
		return status == http.StatusOK && strings.Contains(body, "audit signing lags")
	})
	before := len(checkpointLines(t, a))
	request("down2", 20) // rotations and periodic checkpoints fall due meanwhile
	a.WaitEvent(t, "the signing failure in the chain", func(e testnet.AuditEvent) bool {
		return e.Kind == "audit" && e.Reason == "audit_signing_unavailable" && strings.Contains(e.Detail, "failed")
	})
	if n, _ := a.MetricSum(t, "airlock_audit_signing_lagging"); n != 1 {
		t.Errorf("airlock_audit_signing_lagging = %v while Vault is unreachable, want 1", n)
	}
	if status, body := a.AdminGet(t, "/readyz"); status != http.StatusOK || !strings.Contains(body, "audit signing lags") {
		t.Fatalf("/readyz while Vault is unreachable: %d %q, want ready, saying signing lags", status, body)
	}
	if after := len(checkpointLines(t, a)); after != before {
		t.Fatalf("%d checkpoints written while Vault was unreachable", after-before)
	}

	// Vault back: the waiting checkpoints are signed.
	link.up(t)
	waitFor(t, 60*time.Second, "signing to resume", func() bool {
		_, body := a.AdminGet(t, "/readyz")
		return strings.Contains(body, "audit signing: vault-transit:transit/e2e-audit")
	})
	a.WaitEvent(t, "the recovery in the chain", func(e testnet.AuditEvent) bool {
		return e.Kind == "audit" && e.Reason == "audit_signing_unavailable" && strings.Contains(e.Detail, "resumed")
	})
	request("back", 3)
	a.Stop(t)
	if len(checkpointLines(t, a)) <= before {
		t.Fatal("no checkpoint signed after Vault came back")
	}

	files, _ := filepath.Glob(a.AuditFile + "*")
	var logs []string
	for _, f := range files {
		if !strings.HasSuffix(f, ".checkpoints") {
			logs = append(logs, f)
		}
	}
	verify := func(extra ...string) (string, error) {
		return runAirlockIn(t, cw.w, env, append(append([]string{"audit", "verify"}, extra...), logs...)...)
	}
	if out, err := verify("--vault-transit-key", "transit/e2e-audit"); err != nil || !strings.Contains(out, "intact") {
		t.Fatalf("verify with the keys read from Vault: %v\n%s", err, out)
	}
	// The pre-rotation key alone does not prove the checkpoints signed after the rotation.
	if out, err := verify("--key", cw.w.WriteFile(t, "v1.pem", []byte(pubV1))); err == nil || !strings.Contains(out, "TAMPERED") {
		t.Fatalf("verify with version 1's key alone: %v\n%s, want a signature failure", err, out)
	}
	forgeCheckpoint(t, a)
	if out, err := verify("--vault-transit-key", "transit/e2e-audit"); err == nil || !strings.Contains(out, "signature") {
		t.Fatalf("verify after a locally signed checkpoint was added: %v\n%s, want a signature failure", err, out)
	}
}

// forgeCheckpoint appends a checkpoint of the chain's last line signed with a local key, as
// someone with the files but not Vault's key would.
func forgeCheckpoint(t *testing.T, a *testnet.Airlock) {
	t.Helper()
	cps := checkpointLines(t, a)
	last := cps[len(cps)-1]
	key, err := audit.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	c := audit.Checkpoint{Time: last.Time.Add(time.Second), Sandbox: last.Sandbox, Why: "periodic", File: last.File,
		Seq: last.Seq, Hash: last.Hash, Version: 2}
	c.Key = key.Public().(ed25519.PublicKey)
	c.Sig = ed25519.Sign(key, c.Message())
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(a.AuditFile+".checkpoints", os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(append(b, '\n')); err != nil {
		t.Fatal(err)
	}
}

// TestAuditSigningVaultRefusedFailsClosed: a sidecar whose Vault login may not sign with the
// transit key (Vault answers 403, or 404 without the engine) serves every request, says on
// /readyz, in the metrics and in the chain that signing fails and why, and writes no
// checkpoint: none unsigned, none signed with a local key. At shutdown it says which
// checkpoints were left unsigned, and verify finds the trail unanchored, not intact.
func TestAuditSigningVaultRefusedFailsClosed(t *testing.T) {
	privtest.Require(t)
	parallelWorld(t)
	cw := newCredWorld(t, 3600, 7200)
	cw.v.Policy(t, "airlock", `path "secret/data/e2e/*" { capabilities = ["read"] }`)
	a := cw.start(t, transitPolicy, "--audit-sign", "vault-transit:transit/e2e-audit", "--audit-checkpoint-every", "1s")
	client := a.Client(t, a.CAPool(t))
	for i := range 5 {
		if status, _, _ := credGet(t, client, fmt.Sprintf("https://echo.test/refused/%d", i), nil); status != http.StatusOK {
			t.Fatalf("request %d while signing is refused: status %d", i, status)
		}
	}
	waitFor(t, 30*time.Second, "/readyz saying signing lags", func() bool {
		status, body := a.AdminGet(t, "/readyz")
		return status == http.StatusOK && strings.Contains(body, "audit signing lags")
	})
	e := a.WaitEvent(t, "the signing failure in the chain", func(e testnet.AuditEvent) bool {
		return e.Kind == "audit" && e.Reason == "audit_signing_unavailable"
	})
	if !strings.Contains(e.Detail, "transit/sign/e2e-audit") || strings.Contains(e.Detail, cw.v.RootToken) {
		t.Errorf("the failure event's detail %q: want the Vault path that refused, and no token", e.Detail)
	}
	if n, _ := a.MetricSum(t, "airlock_audit_signing_lagging"); n != 1 {
		t.Errorf("airlock_audit_signing_lagging = %v, want 1", n)
	}
	from := a.Mark()
	a.Stop(t)
	a.WaitLog(t, from, "the unsigned checkpoints named at shutdown", func(l string) bool { return strings.Contains(l, "left unsigned") })
	if cps := checkpointLines(t, a); len(cps) != 0 {
		t.Fatalf("%d checkpoints written though Vault refused to sign: %+v", len(cps), cps)
	}
	key, err := audit.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := audit.EncodePublicKey(key.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	out, err := runAirlockIn(t, cw.w, nil, "audit", "verify", "--key", cw.w.WriteFile(t, "any.pem", pub), a.AuditFile)
	if err == nil || !strings.Contains(out, "UNANCHORED") {
		t.Fatalf("verify of a trail without signed checkpoints: %v\n%s, want unanchored", err, out)
	}
}
