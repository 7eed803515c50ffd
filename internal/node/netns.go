package node

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// listenInNetns binds the abstract unix socket name inside the network namespace at nsPath
// (an abstract socket belongs to the network namespace it is created in). The bind runs on a
// thread of its own that switches namespace and back; should the way back fail, the thread
// is left locked, so the Go runtime ends it instead of reusing it in the pod's namespace.
func listenInNetns(nsPath, name string) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		ln, err, restored := bindIn(nsPath, name)
		if restored {
			runtime.UnlockOSThread()
		}
		ch <- result{ln, err}
	}()
	r := <-ch
	return r.ln, r.err
}

// bindIn does listenInNetns's work on the locked thread; restored says the thread is back in
// its own network namespace.
func bindIn(nsPath, name string) (_ net.Listener, _ error, restored bool) {
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, fmt.Errorf("open own network namespace: %w", err), true
	}
	defer self.Close()
	target, err := os.Open(nsPath)
	if err != nil {
		return nil, fmt.Errorf("open pod network namespace: %w", err), true
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return nil, fmt.Errorf("enter pod network namespace: %w", err), true
	}
	ln, lerr := net.Listen("unix", name)
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		if ln != nil {
			ln.Close()
		}
		return nil, fmt.Errorf("leave pod network namespace: %w", err), false
	}
	if lerr != nil {
		return nil, fmt.Errorf("bind %s in the pod's network namespace: %w", name, lerr), true
	}
	return ln, nil, true
}

// netnsOf returns the network namespace path of a process of the cgroup dir.
func netnsOf(dir string) (string, error) {
	pids, err := cgroupPIDs(dir)
	if err != nil {
		return "", err
	}
	var own, host unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &own); err != nil {
		return "", fmt.Errorf("stat own network namespace: %w", err)
	}
	// The node's: PID 1 of the agent's PID namespace is the node's init with hostPID. (In a
	// test's own PID namespace it is that namespace's init; the check is then no stricter.)
	if err := unix.Stat("/proc/1/ns/net", &host); err != nil {
		host = own
	}
	for _, pid := range pids {
		p := filepath.Join("/proc", strconv.Itoa(pid), "ns", "net")
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			continue // exited
		}
		if (st.Ino == own.Ino && st.Dev == own.Dev) || (st.Ino == host.Ino && st.Dev == host.Dev) {
			// Never bind in the agent's own namespace (a process not yet in its pod's) nor the
			// node's (a hostNetwork pod, which the webhook refuses: a pod labelled after its
			// creation skipped the webhook).
			return "", fmt.Errorf("find pod network namespace: pid %d of %s is in the agent's or the node's network namespace", pid, dir)
		}
		return p, nil
	}
	return "", fmt.Errorf("find pod network namespace: no process in %s: %w", dir, os.ErrNotExist)
}

// cgroupPIDs lists the processes of the cgroup dir (not of the cgroups below it), in the
// agent's PID namespace (the node's: the agent runs with hostPID).
func cgroupPIDs(dir string) ([]int, error) {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, fmt.Errorf("read cgroup members: %w", err)
	}
	var out []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			out = append(out, pid)
		}
	}
	return out, nil
}

// errNotSidecar refuses a caller that is not a process of the pod's sidecar container.
var errNotSidecar = errors.New("caller is not the pod's sidecar container")

// checkPeer accepts the connection's peer only if it is a process of the cgroup dir (the
// sidecar container's). The peer's PID comes from SO_PEERCRED, as the kernel recorded it at
// connect time; a pidfd of it (SO_PEERPIDFD, Linux 6.5) proves after the membership check
// that the PID still names that very process, not a reused one.
func checkPeer(c *net.UnixConn, dir string) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("check caller: %w", err)
	}
	var cred *unix.Ucred
	pidfd := -1
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if credErr == nil {
			if p, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PEERPIDFD); err == nil {
				pidfd = p
			}
		}
	}); err != nil {
		return fmt.Errorf("check caller: %w", err)
	}
	if credErr != nil {
		return fmt.Errorf("check caller: SO_PEERCRED: %w", credErr)
	}
	if pidfd >= 0 {
		defer unix.Close(pidfd)
	}
	if cred.Pid <= 0 {
		return fmt.Errorf("%w: its PID is not visible to the agent (run the agent with hostPID)", errNotSidecar)
	}
	pids, err := cgroupPIDs(dir)
	if err != nil {
		return err
	}
	member := false
	for _, p := range pids {
		member = member || p == int(cred.Pid)
	}
	if !member {
		return fmt.Errorf("%w: pid %d is not in %s", errNotSidecar, cred.Pid, dir)
	}
	if pidfd >= 0 {
		if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); err != nil {
			return fmt.Errorf("%w: pid %d exited during the check", errNotSidecar, cred.Pid)
		}
	}
	return nil
}
