package main

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// tb satisfies the testing.TB that vault.NewTestCluster wants outside a test
// binary. Methods Vault's cluster helpers do not call are left to the nil
// embedded interface (they would panic, which is loud, not silent).
type tb struct {
	testing.TB

	// mu guards cleanups.
	mu       sync.Mutex
	cleanups []func()
}

func (t *tb) Helper()      {}
func (t *tb) Name() string { return "vaulttest" }
func (t *tb) Failed() bool { return false }
func (t *tb) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}
func (t *tb) Log(args ...any)                 { fmt.Fprintln(os.Stderr, args...) }
func (t *tb) Logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
func (t *tb) Error(args ...any)               { t.Log(args...) }
func (t *tb) Errorf(format string, args ...any) {
	t.Logf(format, args...)
}
func (t *tb) Fatal(args ...any) {
	t.Log(args...)
	os.Exit(1)
}
func (t *tb) Fatalf(format string, args ...any) {
	t.Logf(format, args...)
	os.Exit(1)
}
func (t *tb) FailNow()         { os.Exit(1) }
func (t *tb) Skip(args ...any) { t.Fatal(append([]any{"skip:"}, args...)...) }
func (t *tb) TempDir() string {
	d, err := os.MkdirTemp("", "vaulttest-")
	if err != nil {
		t.Fatal(err)
	}
	return d
}
