package sidecar

import (
	"net"
	"path/filepath"
	"testing"
	"time"
)

// TestNotifyReady: READY=1 reaches a socket named by path and one named "@abstract"; no
// socket named is nothing to do; a socket nobody listens on is an error.
func TestNotifyReady(t *testing.T) {
	for _, name := range []string{filepath.Join(t.TempDir(), "notify.sock"), "@airlock-notify-test-" + t.Name()} {
		addr := name
		if name[0] == '@' {
			addr = "\x00" + name[1:]
		}
		ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		if err := notifyReady(name); err != nil {
			t.Fatalf("notifyReady(%q): %v", name, err)
		}
		_ = ln.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 64)
		n, err := ln.Read(buf)
		ln.Close()
		if err != nil || string(buf[:n]) != "READY=1\n" {
			t.Errorf("%s got %q, %v; want READY=1", name, buf[:n], err)
		}
	}
	if err := notifyReady(""); err != nil {
		t.Errorf("notifyReady without a socket: %v", err)
	}
	if err := notifyReady(filepath.Join(t.TempDir(), "absent.sock")); err == nil {
		t.Error("notifyReady to a socket nobody listens on: no error")
	}
}
