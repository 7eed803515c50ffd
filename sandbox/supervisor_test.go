package sandbox

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// closedAddr is a loopback address nothing listens on: a sidecar there is never ready.
func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func supervisedState(t *testing.T, script string) *State {
	return &State{Name: "sup", Dir: t.TempDir(), Binary: "/bin/sh", SidecarArgs: []string{"-c", script}, AdminAddr: closedAddr(t)}
}

func TestSuperviseDoesNotRestartASidecarThatWasNeverReady(t *testing.T) {
	st := supervisedState(t, "exit 3")
	logf, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	asked := false
	err = Supervise(context.Background(), st, 0, func() bool { asked = true; return true }, logf)
	if !errors.Is(err, ErrSidecarNeverReady) {
		t.Fatalf("Supervise = %v, want ErrSidecarNeverReady", err)
	}
	if asked {
		t.Error("the supervisor asked whether to restart a sidecar that never was ready")
	}
	if _, err := os.Stat(st.sidecarPidFile()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pid file left after the sidecar exited: %v", err)
	}
}

func TestSuperviseStopsTheSidecarWhenCancelled(t *testing.T) {
	st := supervisedState(t, "exec sleep 60")
	logf, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() { res <- Supervise(ctx, st, 0, nil, logf) }()
	// The supervisor writes the sidecar's pid file once it runs; wait for it.
	var pid int
	deadline := time.Now().Add(10 * time.Second)
	for pid == 0 && time.Now().Before(deadline) {
		pid, _ = readPid(st.sidecarPidFile())
		if pid == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if pid == 0 {
		t.Fatal("the supervisor did not start the sidecar")
	}
	cancel()
	if err := <-res; err != nil {
		t.Fatalf("Supervise after cancel = %v, want nil", err)
	}
	if alive(pid, 0) {
		t.Errorf("sidecar %d still runs after the supervisor stopped", pid)
	}
}
