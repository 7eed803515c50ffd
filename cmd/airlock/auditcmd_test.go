package main

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/internal/sidecar"
	"github.com/airlock-dev/airlock/llmproxy"
	"github.com/airlock-dev/airlock/sandbox"
)

// chainedLog writes n events with the signing key at keyFile and returns the log's path.
func chainedLog(t *testing.T, dir, keyFile string, n int) string {
	t.Helper()
	b, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	key, err := audit.ParsePrivateKey(b)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "audit.log")
	l, err := audit.New(audit.Options{Writer: io.Discard, File: path, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		l.Log(audit.Event{Kind: audit.KindHTTP, Decision: audit.DecisionAllow, Destination: fmt.Sprintf("h%d.test:443", i)})
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestAuditVerifyCLI(t *testing.T) {
	dir := t.TempDir()
	key, pub := filepath.Join(dir, "k.pem"), filepath.Join(dir, "k.pub")
	if code, _, errOut := airlock(t, "audit", "keygen", "-o", key, "--pub", pub); code != 0 {
		t.Fatalf("keygen: exit %d: %s", code, errOut)
	}
	if code, _, _ := airlock(t, "audit", "keygen", "-o", key); code == 0 {
		t.Fatal("keygen overwrote an existing key")
	}
	other := filepath.Join(dir, "other.pem")
	if code, _, _ := airlock(t, "audit", "keygen", "-o", other); code != 0 {
		t.Fatal("keygen other")
	}
	log := chainedLog(t, dir, key, 8)

	code, out, errOut := airlock(t, "audit", "verify", log, "--key", pub)
	if code != 0 || !strings.Contains(out, "intact: 8 events") || !strings.Contains(out, "by the given key") {
		t.Fatalf("untouched: exit %d, stdout %q, stderr %q; want intact", code, out, errOut)
	}
	if code, out, _ := airlock(t, "audit", "pubkey", "--key", key); code != 0 || !strings.Contains(out, "PUBLIC KEY") {
		t.Fatalf("pubkey: exit %d, %q", code, out)
	}
	code, _, errOut = airlock(t, "audit", "verify", log, "--key", other)
	if code != 1 || !strings.Contains(errOut, "signature") {
		t.Errorf("another key: exit %d, stderr %q; want a signature failure", code, errOut)
	}
	b, _ := os.ReadFile(log)
	lines := strings.Split(string(b), "\n")
	lines[2] = strings.Replace(lines[2], "h2.test", "h2.evil", 1)
	if err := os.WriteFile(log, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = airlock(t, "audit", "verify", log, "--key", pub)
	if code != 1 || !strings.Contains(errOut, log+":3: changed") {
		t.Errorf("edited line 3: exit %d, stderr %q; want it named", code, errOut)
	}
	if code, out, _ := airlock(t, "audit", "verify", "--help"); code != 0 || !strings.Contains(out, "Usage: airlock audit verify") {
		t.Errorf("--help: exit %d, %q", code, out)
	}
}

func TestAuditExportLocalSandbox(t *testing.T) {
	stateDir := t.TempDir()
	store, err := sandbox.OpenStore(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	sbDir := store.SandboxDir("sb1")
	sidecarState := filepath.Join(sbDir, "sidecar")
	for _, d := range []string{filepath.Join(sidecarState, sidecar.PolicyHistoryDir)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	policyFile := filepath.Join(sbDir, "policy.yaml")
	files := map[string]string{
		policyFile: "apiVersion: airlock/v1\n",
		filepath.Join(sidecarState, sidecar.PolicyHistoryDir, "20261123T100000.000000000Z-00.yaml"): "v1\n",
		filepath.Join(sidecarState, llmproxy.LedgerFile):                                            "{}\n",
	}
	for p, body := range files {
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	keyFile := filepath.Join(sidecarState, sidecar.AuditKeyFile)
	if code, _, errOut := airlock(t, "audit", "keygen", "-o", keyFile); code != 0 {
		t.Fatal(errOut)
	}
	log := chainedLog(t, sbDir, keyFile, 5)
	if err := store.Save(&sandbox.State{Name: "sb1", Dir: sbDir, Policy: policyFile}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "pack")
	code, stdout, errOut := airlock(t, "audit", "export", "sb1", "-o", out, "--state-dir", stateDir)
	if code != 0 {
		t.Fatalf("export: exit %d: %s %s", code, stdout, errOut)
	}
	var m audit.Manifest
	b, err := os.ReadFile(filepath.Join(out, "manifest.json"))
	if err != nil || json.Unmarshal(b, &m) != nil {
		t.Fatalf("manifest: %v", err)
	}
	roles := map[string]int{}
	for _, f := range m.Files {
		roles[f.Role]++
		got, err := os.ReadFile(filepath.Join(out, f.Path))
		if err != nil || fmt.Sprintf("%x", sha256.Sum256(got)) != f.SHA256 {
			t.Errorf("%s: hash in the manifest does not match the file (%v)", f.Path, err)
		}
		if strings.Contains(string(got), "PRIVATE KEY") {
			t.Errorf("%s: the pack holds the private signing key", f.Path)
		}
	}
	for _, role := range []string{"policy", "policy-history", "audit", "checkpoints", "ledger", "public-key"} {
		if roles[role] == 0 {
			t.Errorf("the pack has no %s file: %+v", role, m.Files)
		}
	}
	if !m.Verify.Intact || m.Verify.Events != 5 || m.Verify.SignedSeq != 5 {
		t.Errorf("manifest verify: %+v, want 5 events intact and signed", m.Verify)
	}
	// The pack verifies on its own with the exported public key.
	code, _, errOut = airlock(t, "audit", "verify", filepath.Join(out, "audit", "audit.log"), "--key", filepath.Join(out, "audit", "signing-key.pub.pem"))
	if code != 0 {
		t.Errorf("verify the pack: exit %d: %s", code, errOut)
	}
	_ = log
	if code, _, _ := airlock(t, "audit", "export", "sb1", "-o", out, "--state-dir", stateDir); code == 0 {
		t.Error("export into a non-empty directory succeeded")
	}
}

// A trail the key's checkpoints do not prove is "unanchored", with its own exit status (3),
// apart from tampering (1); without --key the same files read intact.
func TestAuditVerifyUnanchoredCLI(t *testing.T) {
	dir := t.TempDir()
	key, pub := filepath.Join(dir, "k.pem"), filepath.Join(dir, "k.pub")
	if code, _, errOut := airlock(t, "audit", "keygen", "-o", key, "--pub", pub); code != 0 {
		t.Fatalf("keygen: exit %d: %s", code, errOut)
	}
	log := chainedLog(t, dir, key, 4)
	if err := os.Remove(log + ".checkpoints"); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := airlock(t, "audit", "verify", log, "--key", pub)
	if code != 3 || !strings.Contains(out, "UNANCHORED") || !strings.Contains(errOut, "no checkpoint signed by the key") {
		t.Errorf("checkpoints deleted: exit %d, stdout %q, stderr %q; want 3 and unanchored", code, out, errOut)
	}
	if code, out, _ := airlock(t, "audit", "verify", log); code != 0 || !strings.Contains(out, "intact") {
		t.Errorf("without --key: exit %d, %q; want intact (the chain alone is consistent)", code, out)
	}
}
