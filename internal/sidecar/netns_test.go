package sidecar

import (
	"os"
	"path/filepath"
	"runtime"
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
	// The namespace of the thread asking: /proc/self is the main thread's, which another
	// test's goroutine may have left locked in a namespace of its own (so may a sidecar's
	// neighbour in exec --ephemeral's process).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, tc := range []struct{ path, want string }{
		{"/proc/thread-self/ns/net", "the sidecar's own network namespace"},
		{plain, "not a namespace file"},
		{filepath.Join(t.TempDir(), "missing"), "no such file"},
	} {
		err := separateNetns(tc.path)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("separateNetns(%s) = %v, want an error saying %q", tc.path, err, tc.want)
		}
	}
}
