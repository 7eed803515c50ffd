package cachedbuild

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestBinaryBuildsOncePerSources: a module is built once; the same sources give the cached
// binary back; a change to a Go file gives a new binary and removes the old one.
func TestBinaryBuildsOncePerSources(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "test", "pkg", "server")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.test/server\n\ngo 1.21\n")
	write("go.sum", "")
	write("main.go", "package main\n\nfunc main() { println(\"one\") }\n")
	s := Spec{Name: "demo-server", Dir: dir, Package: ".", Env: []string{"GOFLAGS=-mod=mod"}}
	first, err := Binary(s)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, ".cache"); filepath.Dir(first) != want {
		t.Errorf("binary %s, want it in %s", first, want)
	}
	if again, err := Binary(s); err != nil || again != first {
		t.Errorf("second Binary = %s, %v; want the cached %s", again, err, first)
	}
	write("main.go", "package main\n\nfunc main() { println(\"two\") }\n")
	second, err := Binary(s)
	if err != nil || second == first {
		t.Fatalf("Binary after a change = %s, %v; want a new binary", second, err)
	}
	if _, err := os.Stat(first); !os.IsNotExist(err) {
		t.Errorf("the old binary %s is still there (%v)", first, err)
	}
	out, err := exec.Command(second).CombinedOutput()
	if err != nil || string(out) != "two\n" {
		t.Errorf("the new binary printed %q, %v; want two", out, err)
	}
}
