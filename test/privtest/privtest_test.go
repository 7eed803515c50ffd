package privtest_test

import (
	"errors"
	"fmt"
	"runtime"
	"testing"

	"github.com/airlock-dev/airlock/test/privtest"
)

// recorder is a testing.TB that records Skip and Fatal instead of stopping the goroutine.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls Require on a goroutine of its own, since Skipf and Fatalf end it.
func run(tb testing.TB, tools ...string) *recorder {
	r := &recorder{TB: tb}
	done := make(chan struct{})
	go func() {
		defer close(done)
		privtest.Require(r, tools...)
	}()
	<-done
	return r
}

func TestRequireMissingTool(t *testing.T) {
	const tool = "airlock-no-such-tool-7f3a"
	cases := []struct {
		name       string
		strict     string
		wantSkip   bool
		wantFailed bool
	}{
		{"skips by default", "", true, false},
		{"fails when strict", "1", false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(privtest.EnvStrict, tc.strict)
			r := run(t, tool)
			if got := r.skipped != ""; got != tc.wantSkip {
				t.Errorf("skipped: got %t (%q), want %t", got, r.skipped, tc.wantSkip)
			}
			if got := r.failed != ""; got != tc.wantFailed {
				t.Errorf("failed: got %t (%q), want %t", got, r.failed, tc.wantFailed)
			}
		})
	}
}

func TestCheckMissingToolIsNotSupported(t *testing.T) {
	err := privtest.Check("airlock-no-such-tool-7f3a")
	if !errors.Is(err, privtest.ErrNotSupported) {
		t.Errorf("Check with a missing tool: got %v, want an error wrapping ErrNotSupported", err)
	}
}
