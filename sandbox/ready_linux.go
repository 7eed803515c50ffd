package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// readyListener is the socket a starting sidecar says READY=1 on, by the systemd notification
// protocol (the sidecar is started with NOTIFY_SOCKET naming it): the manager waits on it
// instead of polling the sidecar's /readyz, which cost a connection attempt every 2 ms and up
// to 2 ms of latency.
type readyListener struct {
	conn *net.UnixConn
	path string
}

// maxSocketPath is the longest path a unix socket address holds (sun_path, with its NUL).
const maxSocketPath = 107

// listenReady opens the ready socket in dir (the sandbox's directory, mode 0700: only root
// reaches it). A dir too long for a socket path gives nil and no error: the manager then
// polls /readyz alone.
func listenReady(dir string) (*readyListener, error) {
	path := filepath.Join(dir, "ready.sock")
	if len(path) > maxSocketPath {
		return nil, nil
	}
	_ = os.Remove(path) // a crashed create's
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return nil, fmt.Errorf("ready socket: %w", err)
	}
	raw, err := conn.SyscallConn()
	if err == nil {
		cerr := raw.Control(func(fd uintptr) {
			err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSCRED, 1)
		})
		err = errors.Join(cerr, err)
	}
	if err != nil {
		conn.Close()
		_ = os.Remove(path)
		return nil, fmt.Errorf("ready socket: credentials: %w", err)
	}
	return &readyListener{conn: conn, path: path}, nil
}

// Env is the sidecar's NOTIFY_SOCKET variable.
func (r *readyListener) Env() string { return "NOTIFY_SOCKET=" + r.path }

// wait returns nil once process pid has sent READY=1; messages from other processes, and
// other messages, are ignored. It ends with an error when ctx ends.
func (r *readyListener) wait(ctx context.Context, pid int) error {
	stop := context.AfterFunc(ctx, func() { r.conn.Close() })
	defer stop()
	buf, oob := make([]byte, 512), make([]byte, unix.CmsgSpace(unix.SizeofUcred))
	for {
		n, oobn, _, _, err := r.conn.ReadMsgUnix(buf, oob)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("ready socket: %w", err)
		}
		if senderPid(oob[:oobn]) == pid && bytes.Contains(append([]byte("\n"), buf[:n]...), []byte("\nREADY=1")) {
			return nil
		}
	}
}

// senderPid is the pid the kernel put in a message's credentials; 0 without them.
func senderPid(oob []byte) int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0
	}
	for i := range msgs {
		if cred, err := unix.ParseUnixCredentials(&msgs[i]); err == nil {
			return int(cred.Pid)
		}
	}
	return 0
}

// Close closes the socket and removes its file.
func (r *readyListener) Close() {
	r.conn.Close()
	_ = os.Remove(r.path)
}

// withoutNotify is env without NOTIFY_SOCKET: a sidecar tells only the ready socket its
// manager gave it, never the service manager of the process that runs airlock (a restarted
// sidecar has no one to tell).
func withoutNotify(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, "NOTIFY_SOCKET=") })
}
