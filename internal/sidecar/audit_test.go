package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/test/privtest"
)

// smallTmpfs mounts a tmpfs of size bytes on a new directory and unmounts it when the test
// ends. The mount is in this machine's mount namespace (a Go process cannot unshare one for
// a single goroutine), on a directory only this test knows.
func smallTmpfs(t *testing.T, size int) string {
	t.Helper()
	privtest.Require(t)
	dir := t.TempDir()
	if err := unix.Mount("airlock-audit-test", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount tmpfs: %v", err)
		}
	})
	return dir
}

// fill writes to a file in dir until the file system is full; it returns the file.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill: %v", err)
			}
			return path
		}
	}
}

// An audit log on a full disk makes new requests fail closed with 503 audit_unavailable and
// /readyz say why; freeing space brings service back without a restart, and the log still
// verifies, recording the outage.
func TestAuditFullDiskFailsClosedAndRecovers(t *testing.T) {
	dir := smallTmpfs(t, 256<<10)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "upstream says hi")
	}))
	defer upstream.Close()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	writePolicy(t, file, fmt.Sprintf(inprocPolicy, upstream.Listener.Addr().(*net.TCPAddr).Port))
	var stderr syncBuffer
	cfg := testConfig(t, file, &stderr)
	cfg.AuditLog = filepath.Join(dir, "audit.log")
	s := startSidecar(t, cfg)
	client := proxyClient(s.Addrs().Proxy)
	defer client.CloseIdleConnections()
	readyz := "http://" + s.Addrs().Admin.String() + "/readyz"

	if status, _, _ := get(t, client, upstream.URL); status != http.StatusOK {
		t.Fatalf("before: got %d, want 200", status)
	}
	filler := fill(t, dir)
	refused := false
	for range 2000 { // the audit file's last page takes a few more lines before ENOSPC
		status, body, _ := get(t, client, upstream.URL)
		if status == http.StatusServiceUnavailable && strings.Contains(body, `"reason":"audit_unavailable"`) {
			refused = true
			break
		}
		if status != http.StatusOK {
			t.Fatalf("full disk: got %d %q, want 200 until the log fails, then 503 audit_unavailable", status, body)
		}
	}
	if !refused {
		t.Fatal("requests were still served after the audit volume filled up")
	}
	if status, body, _ := get(t, http.DefaultClient, readyz); status != http.StatusServiceUnavailable || !strings.Contains(body, "no space left on device") {
		t.Errorf("/readyz on a full disk: got %d %q, want 503 naming the error", status, body)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitTimeout)
	for {
		status, _, _ := get(t, http.DefaultClient, readyz)
		if status == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("/readyz did not recover after space was freed")
		}
		time.Sleep(10 * time.Millisecond) // polling the retry, not synchronising
	}
	if status, _, _ := get(t, client, upstream.URL); status != http.StatusOK {
		t.Fatalf("after space returned: got %d, want 200 without a restart", status)
	}
	client.CloseIdleConnections()
	http.DefaultClient.CloseIdleConnections()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	rep, err := audit.Verify([]string{cfg.AuditLog}, nil)
	if err != nil || !rep.Intact() || rep.SignedSeq != rep.LastSeq {
		t.Fatalf("verify after the outage: %+v, %v; want intact and signed to the end", rep.Tampered, err)
	}
	b, _ := os.ReadFile(cfg.AuditLog)
	if !strings.Contains(string(b), `"kind":"audit"`) {
		t.Errorf("the log does not record the outage")
	}
}

// Every policy the sidecar loads is archived for evidence packs (the reload's audit event
// names the copy), and Close signs a last checkpoint covering the whole log.
func TestPolicyArchiveAndShutdownCheckpoint(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.yaml")
	writePolicy(t, file, fmt.Sprintf(inprocPolicy, 443))
	hup := make(chan os.Signal)
	var stderr syncBuffer
	cfg := testConfig(t, file, &stderr)
	cfg.AuditLog = filepath.Join(t.TempDir(), "audit.log")
	cfg.ReloadSignal = hup
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	writePolicy(t, file, fmt.Sprintf(inprocPolicy, 8443))
	select {
	case hup <- syscall.SIGHUP:
	case <-ctx.Done():
		t.Fatal("the reloader does not take signals")
	}
	s.reload.sync(ctx)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	hist, _ := filepath.Glob(filepath.Join(cfg.StateDir, PolicyHistoryDir, "*.yaml"))
	if len(hist) != 2 {
		t.Fatalf("policy history: got %v, want the first policy and the reloaded one", hist)
	}
	if b, _ := os.ReadFile(hist[1]); !strings.Contains(string(b), "8443") {
		t.Errorf("the newest archived policy is not the reloaded one:\n%s", b)
	}
	log, _ := os.ReadFile(cfg.AuditLog)
	if !strings.Contains(string(log), `"detail":"archived as `+filepath.Join(PolicyHistoryDir, filepath.Base(hist[1]))) {
		t.Errorf("the reload event does not name the archived copy:\n%s", log)
	}
	rep, err := audit.Verify([]string{cfg.AuditLog}, nil)
	if err != nil || !rep.Intact() || rep.LastSeq == 0 || rep.SignedSeq != rep.LastSeq {
		t.Fatalf("verify: %+v, %v; want intact and signed up to the last line", rep, err)
	}
}
