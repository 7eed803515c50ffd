package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// stopGrace is how long a child gets after SIGTERM before its process group is killed.
const stopGrace = 5 * time.Second

// proc is one child process the bench started: a proxy, the upstream or wrk. It runs in its
// own process group so that stop also reaches the helpers it forks (Squid's log daemon).
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string

	done    chan struct{} // closed when the process has been reaped
	waitErr error         // set before done is closed

	stopOnce sync.Once
	onStop   []func() // run by stop before signalling (e.g. close the child's stdin)
}

// startProc starts cmd as a named child in a new process group. Output the caller did not
// direct elsewhere goes to logPath (a file, never an undrained pipe).
func startProc(name string, cmd *exec.Cmd, logPath string) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s log: %w", name, err)
	}
	defer logf.Close() // the child holds its own descriptor
	if cmd.Stdout == nil {
		cmd.Stdout = logf
	}
	if cmd.Stderr == nil {
		cmd.Stderr = logf
	}
	// Pdeathsig kills the child if the bench dies without cleaning up (SIGKILL, panic). The
	// kernel clears it when the child changes credentials (Squid dropping to "proxy"), so
	// stop, run on every exit path and on SIGINT/SIGTERM, is the primary cleanup.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended, and how.
func (p *proc) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.waitErr
	default:
		return false, nil
	}
}

// stop ends the process group: SIGTERM, then SIGKILL after stopGrace. It is idempotent and
// safe to call on a process that already exited (its helpers are still signalled).
func (p *proc) stop() {
	p.stopOnce.Do(func() {
		for _, f := range p.onStop {
			f()
		}
		pgid := p.cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(stopGrace):
		}
		// Helpers of an exited leader may linger in the group; make sure none survives.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	})
}

// logTail returns the last n lines of the process log, for error reports.
func (p *proc) logTail(n int) string {
	return fileTail(p.logPath, n)
}

func fileTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitReady polls check until it succeeds, the process exits, ctx ends or timeout passes.
// Polling with a bounded deadline is the only readiness signal Squid and tinyproxy offer.
func waitReady(ctx context.Context, p *proc, timeout time.Duration, check func() error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if done, err := p.exited(); done {
			return fmt.Errorf("%s exited before it was ready (%v); last log lines:\n%s", p.name, err, indent(p.logTail(15)))
		}
		if last = check(); last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %v; last log lines:\n%s", p.name, timeout, last, indent(p.logTail(15)))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// dialCheck succeeds once addr accepts a TCP connection.
func dialCheck(addr string) func() error {
	return func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	}
}

// freeAddr returns a 127.0.0.1 address with a port the kernel just handed out. Another
// process could take it before the child binds it; on a bench machine that race is
// theoretical, and a clash shows up as a failed start, not as a wrong figure.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("pick a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// treeCPU returns the CPU time (user+system) used so far by process pid and every live
// descendant, read from /proc/*/stat. Descendants count even in other process groups:
// Squid's logfile daemon, which it starts in a group of its own, is part of Squid's cost of
// auditing.
func treeCPU(pid int) time.Duration {
	const userHZ = 100 // USER_HZ: fixed at 100 on Linux for user space, whatever CONFIG_HZ is
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	type stat struct{ ppid, ticks int64 }
	procs := map[int64]stat{}
	for _, e := range ents {
		id, err := strconv.ParseInt(e.Name(), 10, 64)
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		// After the parenthesised command name: state(3) ppid(4) ... utime(14) stime(15).
		s := string(b)
		k := strings.LastIndexByte(s, ')')
		if k < 0 {
			continue
		}
		f := strings.Fields(s[k+1:])
		if len(f) < 13 {
			continue
		}
		ppid, _ := strconv.ParseInt(f[1], 10, 64)
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		procs[id] = stat{ppid: ppid, ticks: ut + st}
	}
	var ticks int64
	for id, st := range procs {
		// Walk up to pid (or init); process trees here are a few levels deep.
		for a := id; a > 1; a = procs[a].ppid {
			if a == int64(pid) {
				ticks += st.ticks
				break
			}
			if _, ok := procs[a]; !ok {
				break
			}
		}
	}
	return time.Duration(ticks) * time.Second / userHZ
}

// exitStatus renders a process's wait error for a report.
func exitStatus(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.String()
	}
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}
