package sidecar

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSeparateNetns: the sandbox's loopback is allowed only for a network namespace other
// than the sidecar's own; anything else is refused with the reason.
func TestSeparateNetns(t *testing.T) {
	plain := filepath.Join(t.TempDir(), "netns")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{"/proc/self/ns/net", "the sidecar's own network namespace"},
		{plain, "not a namespace file"},
		{filepath.Join(t.TempDir(), "missing"), "no such file"},
	} {
		err := separateNetns(tc.path)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("separateNetns(%s) = %v, want an error saying %q", tc.path, err, tc.want)
		}
	}
}
