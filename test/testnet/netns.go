//go:build linux

package testnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// netnsDir is where `ip netns add` bind-mounts named namespaces.
const netnsDir = "/run/netns"

// nameSeq makes namespace names unique within this process; the pid makes them unique across
// concurrent `go test` processes.
var nameSeq atomic.Int64

// uniqueName returns "al-<pid>-<n>", short enough to leave room for a suffix. The first call
// in a process also removes namespaces left behind by test processes that died before their
// cleanups ran (a timeout panic, a kill).
func uniqueName() string {
	reapOnce.Do(reapStale)
	return fmt.Sprintf("al-%d-%d", os.Getpid(), nameSeq.Add(1))
}

var (
	reapOnce  sync.Once
	staleName = regexp.MustCompile(`^al-([0-9]+)-[0-9]+-`)
)

// reapStale deletes namespaces named by uniqueName whose process no longer exists. A name whose
// pid is alive (this process, a concurrent `go test`, or an unrelated process that reused the
// pid) is left alone.
func reapStale() {
	entries, err := os.ReadDir(netnsDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		m := staleName.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) {
			_ = runIP("netns", "delete", e.Name())
		}
	}
}

// Netns is a named network namespace created by the test (`ip netns add`). Its methods create
// sockets inside it; a socket stays in the namespace it was created in whichever thread uses it.
type Netns struct {
	// Name is the namespace name, usable with `ip -n NAME` and `ip netns exec NAME`.
	Name string
	fd   int // open /run/netns/<Name>, for setns(2)
}

// NewNetns creates a network namespace named name with its loopback up, and deletes it in
// t.Cleanup.
func NewNetns(t testing.TB, name string) *Netns {
	t.Helper()
	if err := runIP("netns", "add", name); err != nil {
		t.Fatalf("create netns %s: %v", name, err)
	}
	n := &Netns{Name: name, fd: -1}
	t.Cleanup(func() {
		if n.fd >= 0 {
			unix.Close(n.fd)
		}
		if err := runIP("netns", "delete", name); err != nil {
			t.Errorf("delete netns %s: %v", name, err)
		}
	})
	fd, err := unix.Open(filepath.Join(netnsDir, name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open netns %s: %v", name, err)
	}
	n.fd = fd
	n.IP(t, "link", "set", "lo", "up")
	return n
}

// IP runs `ip -n <ns> args...` and fails t on error.
func (n *Netns) IP(t testing.TB, args ...string) {
	t.Helper()
	if err := runIP(append([]string{"-n", n.Name}, args...)...); err != nil {
		t.Fatalf("netns %s: %v", n.Name, err)
	}
}

// Command returns a command that runs name with args inside the namespace
// (`ip netns exec <ns> name args...`). ip execs the program, so the process's pid is the
// program's own and signals reach it directly.
func (n *Netns) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// Do runs fn on an OS thread that has entered the namespace, then moves the thread back.
// Sockets fn creates belong to the namespace. fn must not start goroutines that create
// sockets (they run on other threads) and must not call t.Fatal (it runs on another goroutine).
//
// If the thread cannot be moved back, it is never unlocked, so the Go runtime terminates it
// when its goroutine exits instead of reusing a thread in the wrong namespace.
func (n *Netns) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() { errc <- n.doLocked(fn) }()
	return <-errc
}

func (n *Netns) doLocked(fn func() error) error {
	runtime.LockOSThread()
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open current netns: %w", err)
	}
	defer unix.Close(orig)
	if err := unix.Setns(n.fd, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter netns %s: %w", n.Name, err)
	}
	ferr := fn()
	if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
		// Leave the thread locked: it is poisoned and dies with this goroutine.
		return errors.Join(ferr, fmt.Errorf("restore netns after %s: %w", n.Name, err))
	}
	runtime.UnlockOSThread()
	return ferr
}

// Listen is net.Listen inside the namespace.
func (n *Netns) Listen(network, addr string) (net.Listener, error) {
	var l net.Listener
	err := n.Do(func() error {
		var err error
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}

// ListenPacket is net.ListenPacket inside the namespace.
func (n *Netns) ListenPacket(network, addr string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := n.Do(func() error {
		var err error
		pc, err = net.ListenPacket(network, addr)
		return err
	})
	return pc, err
}

// DialContext dials from inside the namespace; it fits http.Transport.DialContext. addr must be
// an IP literal and port: a name would be resolved by the process's resolver, outside the
// world.
func (n *Netns) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if net.ParseIP(host) == nil {
		return nil, fmt.Errorf("testnet: dial %s: want an IP literal, not a name", addr)
	}
	var c net.Conn
	err = n.Do(func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// WriteSysctl writes a per-namespace sysctl (key like "net/ipv6/conf/all/accept_dad"). The
// /proc/sys/net tree belongs to the namespace of the thread that opens it.
func (n *Netns) WriteSysctl(key, value string) error {
	return n.Do(func() error {
		return os.WriteFile(filepath.Join("/proc/sys", key), []byte(value), 0o644)
	})
}

// runIP runs the ip tool and returns its output in the error.
func runIP(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
