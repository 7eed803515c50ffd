package xconnect

import (
	"os"
	"testing"
)

func TestWith(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"", "http2xconnect=1", true},
		{"http2debug=1", "http2debug=1,http2xconnect=1", true},
		{"http2xconnect=0", "", false},
		{"x=1,http2xconnect=1", "", false},
	} {
		if got, ok := with(tc.in); got != tc.want || ok != tc.ok {
			t.Errorf("with(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// TestInitAndRestore checks init added the setting to this test binary's environment and
// Restore puts the environment back.
func TestInitAndRestore(t *testing.T) {
	want, ok := with(orig)
	if got := os.Getenv("GODEBUG"); ok && got != want {
		t.Fatalf("GODEBUG after init = %q, want %q", got, want)
	}
	Restore()
	got, had := os.LookupEnv("GODEBUG")
	if got != orig || had != hadOrig {
		t.Fatalf("GODEBUG after Restore = %q (set %v), want %q (set %v)", got, had, orig, hadOrig)
	}
}
