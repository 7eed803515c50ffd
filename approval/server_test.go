package approval

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/test/privtest"
)

// serve starts the operator socket of f in its state dir.
func serve(t *testing.T, f *fixture) string {
	t.Helper()
	l, err := Listen(f.s.cfg.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.s.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return f.s.cfg.StateDir
}

func TestOperatorSocket(t *testing.T) {
	f := newFixture(t, askAll, nil)
	dir := serve(t, f)
	fi, err := os.Stat(filepath.Join(dir, SocketFile))
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket: %v %v, want a 0600 socket", err, fi)
	}
	c := NewClient(dir)
	ctx := context.Background()
	res := f.settleAsync("new.example.org", 443)
	a := <-f.asked
	asks, grants, err := c.List(ctx)
	if err != nil || len(asks) != 1 || asks[0].ID != a.ID || len(grants) != 0 {
		t.Fatalf("list: %v %+v %+v", err, asks, grants)
	}
	g, err := c.Grant(ctx, a.ID, ScopeDuration, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("uid:%d", os.Geteuid()); g.Approver != want || g.Scope != ScopeDuration {
		t.Fatalf("grant %+v, want approver %s (SO_PEERCRED)", g, want)
	}
	if d := <-res; !d.Allowed() {
		t.Fatalf("held request after the CLI grant: %+v", d)
	}
	if _, err := c.Grant(ctx, a.ID, "", 0); err == nil || !strings.Contains(err.Error(), "already answered") && !strings.Contains(err.Error(), "no such") {
		t.Fatalf("second grant: %v", err)
	}
	if _, err := c.Grant(ctx, "nope", "", 0); err == nil {
		t.Fatal("granted an unknown ask")
	}
	if err := c.Revoke(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	res = f.settleAsync("other.example.org", 443)
	b := <-f.asked
	if err := c.Deny(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if d := <-res; d.Reason != "approval_denied" {
		t.Fatalf("after deny: %s", d.Reason)
	}
}

// TestOtherUserCannotAnswer: a process of another user cannot connect to the 0600 socket,
// and with the socket opened up, SO_PEERCRED still refuses it.
func TestOtherUserCannotAnswer(t *testing.T) {
	if os.Getenv("APPROVAL_TEST_SOCKET") != "" {
		return // the child side runs in TestHelperClient
	}
	privtest.Require(t)
	open := func() string { // a directory the other user can reach
		d, err := os.MkdirTemp("", "approval-peer-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	bin := filepath.Join(open(), "approval.test")
	exe, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, exe, 0o755); err != nil {
		t.Fatal(err)
	}
	state := open()
	f := newFixture(t, askAll, func(c *Config) { c.StateDir = state })
	dir := serve(t, f)
	sock := filepath.Join(dir, SocketFile)
	run := func() string {
		cmd := exec.Command(bin, "-test.run=^TestHelperClient$", "-test.v")
		cmd.Env = append(os.Environ(), "APPROVAL_TEST_SOCKET="+sock)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		return fmt.Sprintf("%s (%v)", out, err)
	}
	if out := run(); !strings.Contains(out, "RESULT: dial refused") {
		t.Fatalf("another user on the 0600 socket: %s", out)
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	if out := run(); !strings.Contains(out, "RESULT: status 403") {
		t.Fatalf("another user on an open socket: %s", out)
	}
}

// TestHelperClient is the child of TestOtherUserCannotAnswer.
func TestHelperClient(t *testing.T) {
	sock := os.Getenv("APPROVAL_TEST_SOCKET")
	if sock == "" {
		t.Skip("helper process only")
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		fmt.Println("RESULT: dial refused:", err)
		return
	}
	c.Close()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := hc.Post("http://x/v1/approvals/abc/grant", "application/json", nil)
	if err != nil {
		fmt.Println("RESULT: error:", errors.Unwrap(err))
		return
	}
	resp.Body.Close()
	fmt.Printf("RESULT: status %d\n", resp.StatusCode)
}
