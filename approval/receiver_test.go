package approval

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/policy"
)

// TestExampleReceiver runs deploy/examples/approval-receiver.py against the stage: its
// signatures match the sidecar's, it answers pending until the decisions file names the
// host, and a deny denies.
func TestExampleReceiver(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	decisions := filepath.Join(dir, "decisions.json")
	cmd := exec.Command(py, filepath.Join("..", "deploy", "examples", "approval-receiver.py"), "--listen", addr, "--decisions", decisions)
	cmd.Env = append(os.Environ(), "AIRLOCK_HOOK_KEY="+hookKey, "USER=bob")
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(stderr)
	seen := make(chan string, 100)
	go func() {
		for lines.Scan() {
			seen <- lines.Text()
		}
	}()
	// Wait until it listens (a bounded poll of another process's readiness).
	for i := 0; ; i++ {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if i > 200 {
			t.Fatalf("the receiver does not listen: %v", err)
		}
		time.Sleep(25 * time.Millisecond)
	}
	approval := fmt.Sprintf("  approval:\n    hold: 1ms\n    approvers:\n      webhook: {url: \"http://%s/\", secret: hook-key, pollInterval: 1ms}\n", addr)
	f := newFixture(t, approval, func(c *Config) {
		c.Transport, c.Secrets, c.Now = http.DefaultTransport.(*http.Transport).Clone(), keySecrets(hookKey), time.Now
	})
	d := f.settle(context.Background(), "new.example.org", 443)
	if d.Reason != policy.ReasonApprovalPending {
		t.Fatalf("got %s (%s), want pending", d.Reason, d.Detail)
	}
	<-seen // one ask (or poll) reached it and was answered pending
	if err := os.WriteFile(decisions, []byte(`{"new.example.org": "grant:10m", "other.example.org": "deny"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	ev := waitFor(t, f, EventGrant)
	if !strings.Contains(ev, "approver=webhook:bob") || !strings.Contains(ev, "scope=duration") {
		t.Fatalf("grant event %s", ev)
	}
	f.settle(context.Background(), "other.example.org", 443)
	if ev := waitFor(t, f, EventDeny); !strings.Contains(ev, "denied by webhook:bob") {
		t.Fatalf("deny event %s", ev)
	}
}

// waitFor waits for an event with that decision; the stage writes it from the webhook's
// goroutine. The stage's audit sink is polled: there is no other signal to wait on.
func waitFor(t *testing.T, f *fixture, decision string) string {
	t.Helper()
	for i := 0; i < 400; i++ {
		if ev := f.ev.of(decision); len(ev) > 0 {
			return ev[0].Detail
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("no %s event", decision)
	return ""
}
