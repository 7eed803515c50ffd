package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/ship"
)

// shippedChain writes a rotated, shipped and closed chain into a directory store and
// returns the store's root and the public key file.
func shippedChain(t *testing.T, closeIt bool) (root, pubFile string) {
	t.Helper()
	dir := t.TempDir()
	keyFile, pubFile := filepath.Join(dir, "k.pem"), filepath.Join(dir, "k.pub")
	if code, _, errOut := airlock(t, "audit", "keygen", "-o", keyFile, "--pub", pubFile); code != 0 {
		t.Fatalf("keygen: %s", errOut)
	}
	b, _ := os.ReadFile(keyFile)
	key, err := audit.ParsePrivateKey(b)
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "audit.log")
	l, err := audit.New(audit.Options{Writer: io.Discard, File: log, Key: key, MaxBytes: 1024, SealOnClose: closeIt})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		if err := l.Commit(audit.Event{Kind: audit.KindHTTP, Decision: audit.DecisionAllow, Destination: fmt.Sprintf("h%d.test:443", i), Method: "GET"}); err != nil {
			t.Fatal(err)
		}
	}
	root = filepath.Join(dir, "bucket")
	sh, err := ship.New(ship.Config{Log: log, Store: ship.DirStore{Root: root}, Prefix: "p", KeyPrefix: "ns/pod/uid"})
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Open(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if closeIt {
		err = sh.Finish(context.Background())
	} else {
		err = sh.ShipSealed(context.Background())
	}
	if err != nil {
		t.Fatal(err)
	}
	return root, pubFile
}

func TestAuditVerifyAndExportShippedCLI(t *testing.T) {
	root, pub := shippedChain(t, true)
	code, out, errOut := airlock(t, "audit", "verify", "file://"+root, "--key", pub)
	if code != 0 || !strings.Contains(out, "intact, closed at seq 30") {
		t.Fatalf("verify shipped: exit %d, %q %q; want intact and closed", code, out, errOut)
	}
	pack := filepath.Join(t.TempDir(), "pack")
	code, out, errOut = airlock(t, "audit", "export", "--from", "file://"+root, "-o", pack, "--key", pub)
	if code != 0 || !strings.Contains(out, "intact, closed") {
		t.Fatalf("export shipped: exit %d, %q %q", code, out, errOut)
	}
	var m audit.Manifest
	b, err := os.ReadFile(filepath.Join(pack, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &m); err != nil || !m.Verify.Intact || m.Verify.LastSeq != 30 || !m.Verify.KeyGiven {
		t.Fatalf("manifest verify %+v (%v), want intact to seq 30 with the key", m.Verify, err)
	}
	// A segment removed from the middle is named by its range, and verify fails.
	segs, _ := filepath.Glob(filepath.Join(root, "p", "ns", "pod", "uid", "*", "seg-*"))
	if len(segs) < 3 {
		t.Fatalf("%d segments, want several", len(segs))
	}
	if err := os.Remove(segs[1]); err != nil {
		t.Fatal(err)
	}
	code, out, _ = airlock(t, "audit", "verify", "file://"+root, "--key", pub)
	if code != 1 || !strings.Contains(out, "MISSING: seq") {
		t.Fatalf("verify with a segment gone: exit %d %q, want 1 naming the missing range", code, out)
	}
}

func TestAuditVerifyOpenShippedChainCLI(t *testing.T) {
	root, pub := shippedChain(t, false)
	code, out, _ := airlock(t, "audit", "verify", "file://"+root, "--key", pub)
	if code != exitOpen || !strings.Contains(out, "open, last shipped seq") {
		t.Fatalf("verify open chain: exit %d %q, want %d and open, last shipped seq N", code, out, exitOpen)
	}
}

func TestAuditOCSFCLI(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "k.pem")
	if code, _, errOut := airlock(t, "audit", "keygen", "-o", key); code != 0 {
		t.Fatalf("keygen: %s", errOut)
	}
	log := chainedLog(t, dir, key, 3)
	code, out, errOut := airlock(t, "audit", "ocsf", log)
	if code != 0 {
		t.Fatalf("ocsf: exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d OCSF lines, want 3:\n%s", len(lines), out)
	}
	var ev map[string]any
	if err := json.Unmarshal([]byte(lines[2]), &ev); err != nil {
		t.Fatal(err)
	}
	if ev["class_uid"] != float64(4002) || ev["unmapped"].(map[string]any)["airlock"].(map[string]any)["seq"] != float64(3) {
		t.Errorf("OCSF event %v, want HTTP Activity carrying native seq 3", ev)
	}
}
