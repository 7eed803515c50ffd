// Package privtest is the one gate every privileged test goes through (DESIGN.md "Testing",
// STYLE.md rule 16). A privileged test calls Require first: it skips, with the reason, when this
// machine cannot run it (not root, `ip` or another tool missing, network namespaces refused
// with EPERM), and fails instead of skipping when AIRLOCK_PRIVILEGED_TESTS=1, as CI sets it.
//
// It is for tests only; production code never imports it. It imports nothing of ours.
package privtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
)

// EnvStrict is the environment variable that turns every skip into a failure.
const EnvStrict = "AIRLOCK_PRIVILEGED_TESTS"

// ErrNotSupported marks a condition of this machine under which privileged tests cannot run.
// Require skips only on errors that wrap it; any other error fails the test.
var ErrNotSupported = errors.New("privileged tests not supported here")

// Require skips t unless it can run as a privileged test: effective uid 0, the `ip` tool and
// every tool named in tools on PATH, and network namespaces that can be created. When
// AIRLOCK_PRIVILEGED_TESTS=1 it calls t.Fatal instead of t.Skip. An unexpected error while
// probing always fails the test.
func Require(t testing.TB, tools ...string) {
	t.Helper()
	err := Check(tools...)
	if err == nil {
		return
	}
	if !errors.Is(err, ErrNotSupported) {
		t.Fatalf("privtest: probe privileged environment: %v", err)
	}
	if os.Getenv(EnvStrict) == "1" {
		t.Fatalf("privtest: %v (%s=1, so this is a failure, not a skip)", err, EnvStrict)
	}
	t.Skipf("privtest: skipping privileged test: %v (run as root on Linux; set %s=1 to fail instead of skipping)", err, EnvStrict)
}

// Check reports why privileged tests cannot run here: nil when they can, an error wrapping
// ErrNotSupported for a missing capability, or another error when probing itself failed.
func Check(tools ...string) error {
	if euid := os.Geteuid(); euid != 0 {
		return fmt.Errorf("%w: not root (euid %d)", ErrNotSupported, euid)
	}
	for _, tool := range append([]string{"ip"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			if errors.Is(err, exec.ErrNotFound) {
				return fmt.Errorf("%w: %q not found on PATH", ErrNotSupported, tool)
			}
			return fmt.Errorf("look up %q: %w", tool, err)
		}
	}
	netnsOnce.Do(func() { netnsErr = probeNetns() })
	return netnsErr
}

var (
	netnsOnce sync.Once
	netnsErr  error // result of the one netns probe per process
)
