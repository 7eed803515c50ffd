package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/audit"
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
