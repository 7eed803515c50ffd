package sandbox

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestReadyListener: READY=1 from the sidecar's pid ends the wait; other messages, and
// READY=1 from another process (credentials forged as root may do), do not.
func TestReadyListener(t *testing.T) {
	r, err := listenReady(t.TempDir())
	if err != nil || r == nil {
		t.Fatalf("listenReady = %v, %v", r, err)
	}
	defer r.Close()
	if !strings.HasPrefix(r.Env(), "NOTIFY_SOCKET=/") {
		t.Errorf("Env = %q", r.Env())
	}
	send := func(msg string, pid int32) {
		t.Helper()
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		var oob []byte
		if pid != 0 {
			oob = unix.UnixCredentials(&unix.Ucred{Pid: pid, Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid())})
		}
		if err := unix.Sendmsg(fd, []byte(msg), oob, &unix.SockaddrUnix{Name: r.path}, 0); err != nil {
			t.Fatalf("send %q as pid %d: %v", msg, pid, err)
		}
	}
	// Datagrams queue in order: the wait must read past the others to the sidecar's own
	// READY=1, the last one, and leave nothing behind.
	send("STATUS=starting\n", 0)
	if os.Getuid() == 0 {
		send("READY=1\n", 1) // another process's credentials: only root may send them
	}
	send("READY=0\n", 0)
	send("STATUS=up\nREADY=1\n", 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.wait(ctx, os.Getpid()); err != nil {
		t.Fatalf("wait = %v after READY=1 from the sidecar's pid", err)
	}
	_ = r.conn.SetReadDeadline(time.Now())
	if n, _, _, _, err := r.conn.ReadMsgUnix(make([]byte, 64), nil); err == nil {
		t.Errorf("a message was left after the wait (%d bytes): it stopped at an earlier one", n)
	}
	_ = r.conn.SetReadDeadline(time.Time{})

	ended, stop := context.WithCancel(context.Background())
	stop()
	if err := r.wait(ended, os.Getpid()); err == nil {
		t.Error("wait returned nil when its context had ended")
	}
}

// TestReadyListenerLongPath: a directory too long for a socket path means no socket (the
// manager polls /readyz alone), not an error.
func TestReadyListenerLongPath(t *testing.T) {
	r, err := listenReady("/" + strings.Repeat("d", maxSocketPath))
	if r != nil || err != nil {
		t.Errorf("listenReady(long) = %v, %v; want nil, nil", r, err)
	}
}

// TestWithoutNotify: the service manager's NOTIFY_SOCKET never reaches a sidecar.
func TestWithoutNotify(t *testing.T) {
	in := []string{"A=1", "NOTIFY_SOCKET=/run/systemd/notify", "B=2"}
	got := withoutNotify(in)
	if strings.Join(got, " ") != "A=1 B=2" || len(in) != 3 {
		t.Errorf("withoutNotify(%q) = %q (input now %q)", in, got, in)
	}
}
