package sidecar

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-dev/airlock/internal/trust"
)

func TestWriteCABundle(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "ca-bundle.pem")
	ca := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	for round := 0; round < 2; round++ { // the second write replaces the first
		if err := writeCABundle(file, ca, nil); err != nil {
			t.Fatalf("writeCABundle: %v", err)
		}
	}
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(got, ca) || bytes.Count(got, ca) != 1 {
		t.Errorf("bundle does not end with the CA exactly once:\n%s", got)
	}
	for _, f := range trust.SystemBundles() {
		if roots, err := os.ReadFile(f); err == nil {
			if !bytes.HasPrefix(got, roots) {
				t.Errorf("bundle does not start with the system roots of %s", f)
			}
			break
		}
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("bundle mode %v (%v), want 0644: app containers run as any user", fi.Mode(), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the bundle (no temporary files)", len(entries))
	}
	if err := writeCABundle("", ca, nil); err != nil {
		t.Errorf("no --ca-bundle-out: %v", err)
	}
	if err := writeCABundle(filepath.Join(dir, "missing", "b.pem"), ca, nil); err == nil {
		t.Errorf("a bundle in a missing directory: no error")
	}
}

// TestWriteCABundleUpstreamCA: with --upstream-proxy-ca, the bundle holds the inspecting
// proxy's CA after the sidecar's, so the sandbox's clients verify origins it re-signs.
func TestWriteCABundleUpstreamCA(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ca-bundle.pem")
	ca := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	corp := []byte("-----BEGIN CERTIFICATE-----\nMIIC\n-----END CERTIFICATE-----\n")
	if err := writeCABundle(file, ca, corp); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if i, j := bytes.Index(got, ca), bytes.Index(got, corp); i < 0 || j < i {
		t.Errorf("bundle lacks the sidecar CA followed by the upstream proxy's CA:\n%s", got)
	}
}
