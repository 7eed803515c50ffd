//go:build linux

// Package e2e runs the real airlock binary against real clients (the curl binary and Go's
// net/http) inside network namespaces built by test/testnet: upstream hosts at 198.18.0.x
// and 198.19.0.x, names from a test DNS server, TLS from a test CA. Every test but the policy
// check needs root (privtest.Require) and builds its own world, so tests run in parallel.
package e2e

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/airlock-dev/airlock/test/testnet"
)

// build is the airlock binary, built at most once per test process, on first use.
var build struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// airlockBinary returns the binary under test, building ./cmd/airlock (or taking
// $AIRLOCK_BIN) the first time; it fails t when the binary does not build.
func airlockBinary(t testing.TB) string {
	t.Helper()
	build.once.Do(func() {
		build.dir, build.err = os.MkdirTemp("", "airlock-e2e-bin-")
		if build.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		build.path, build.err = testnet.BuildAirlock(ctx, build.dir)
	})
	if build.err != nil {
		t.Fatalf("airlock binary: %v", build.err)
	}
	return build.path
}

func TestMain(m *testing.M) {
	// Kernel tests re-execute this binary as the sandbox probe (test/testnet).
	testnet.RunProbeIfRequested()
	code := m.Run()
	for _, dir := range []string{build.dir, hostileProbe.dir} {
		if dir != "" {
			os.RemoveAll(dir)
		}
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
