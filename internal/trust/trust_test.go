package trust

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var testCA = []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")

func TestRoots(t *testing.T) {
	dir := t.TempDir()
	envFile := filepath.Join(dir, "env-roots.pem")
	sysFile := filepath.Join(dir, "system.pem")
	for f, data := range map[string]string{envFile: "ENV ROOTS", sysFile: "SYSTEM ROOTS"} {
		if err := os.WriteFile(f, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		name    string
		env     []string
		bundles []string
		want    string
		wantErr bool
	}{
		{name: "SSL_CERT_FILE wins", env: []string{"X=1", "SSL_CERT_FILE=" + envFile}, bundles: []string{sysFile}, want: "ENV ROOTS"},
		{name: "first readable system bundle", env: []string{"SSL_CERT_FILE="}, bundles: []string{missing, sysFile}, want: "SYSTEM ROOTS"},
		{name: "nothing found is empty", bundles: []string{missing}, want: ""},
		{name: "missing SSL_CERT_FILE is an error", env: []string{"SSL_CERT_FILE=" + missing}, bundles: []string{sysFile}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Roots(tc.env, tc.bundles)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Roots error = %v, want error %t", err, tc.wantErr)
			}
			if string(got) != tc.want {
				t.Errorf("Roots = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestBundle(t *testing.T) {
	for _, tc := range []struct{ name, roots, want string }{
		{"roots with newline", "R\n", "R\n# airlock x\n" + string(testCA)},
		{"roots without newline", "R", "R\n# airlock x\n" + string(testCA)},
		{"no roots", "", "# airlock x\n" + string(testCA)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(Bundle([]byte(tc.roots), "airlock x", testCA)); got != tc.want {
				t.Errorf("Bundle = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestBuildUsesSystemRoots(t *testing.T) {
	got, err := Build(nil, "airlock sidecar interception CA", testCA)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(got, testCA) || bytes.Count(got, testCA) != 1 {
		t.Errorf("bundle does not end with the CA exactly once:\n%s", got)
	}
	for _, f := range SystemBundles() {
		if roots, err := os.ReadFile(f); err == nil {
			if !bytes.HasPrefix(got, roots) {
				t.Errorf("bundle does not start with the system roots of %s", f)
			}
			return
		}
	}
	if !strings.HasPrefix(string(got), "# airlock sidecar interception CA\n") {
		t.Errorf("without system roots the bundle is only the CA: %q", got)
	}
}

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "ca-bundle.pem")
	for _, content := range []string{"first", "second"} { // the second write replaces the first
		if err := Write(file, []byte(content)); err != nil {
			t.Fatalf("Write: %v", err)
		}
		if got, err := os.ReadFile(file); err != nil || string(got) != content {
			t.Fatalf("after Write(%q): %q, %v", content, got, err)
		}
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("bundle mode %v (%v), want 0644: sandboxed processes run as any user", fi.Mode(), err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the bundle (no temporary files)", len(entries))
	}
	if err := Write(filepath.Join(dir, "missing", "b.pem"), []byte("x")); err == nil {
		t.Error("a bundle in a missing directory: no error")
	}
}
