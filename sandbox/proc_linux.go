package sandbox

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// procStart returns the start time of pid in clock ticks since boot (field 22 of
// /proc/PID/stat), which tells a process apart from a later one that reuses its pid.
func procStart(pid int) (uint64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces: split after the last ')'.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	if f[0] == "Z" || f[0] == "X" {
		return 0, fmt.Errorf("process %d has exited", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// alive reports whether pid is still the process that started at tick start (0: any).
func alive(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	t, err := procStart(pid)
	return err == nil && (start == 0 || t == start)
}

// stopProcess sends SIGTERM to pid (if it is still the process that started at tick start),
// waits up to grace for it to exit, then SIGKILLs it and waits again. It returns nil once the
// process is gone.
func stopProcess(pid int, start uint64, grace time.Duration) error {
	if !alive(pid, start) {
		return nil
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil
		}
		return fmt.Errorf("pidfd of %d: %w", pid, err)
	}
	defer unix.Close(fd)
	if !alive(pid, start) { // the pidfd may name a newer process with the same pid
		return nil
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGTERM, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal %d: %w", pid, err)
	}
	if waitPidfd(fd, grace) {
		return nil
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill %d: %w", pid, err)
	}
	if waitPidfd(fd, 10*time.Second) {
		return nil
	}
	return fmt.Errorf("process %d did not exit after SIGKILL", pid)
}

// waitPidfd waits until the process behind fd has exited (the pidfd becomes readable) or d
// has passed.
func waitPidfd(fd int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left < 0 {
			left = 0
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(left.Milliseconds()))
		if err == nil && n > 0 {
			return true
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			return false
		}
		if left == 0 {
			return false
		}
	}
}

// readPid reads a pid file; 0 when it is missing or garbled.
func readPid(path string) (pid int, start uint64) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0, 0
	}
	pid, _ = strconv.Atoi(f[0])
	if len(f) > 1 {
		start, _ = strconv.ParseUint(f[1], 10, 64)
	}
	return pid, start
}

// pidfd opens a pidfd for pid.
func pidfd(pid int) (int, error) {
	if pid <= 0 {
		return -1, fmt.Errorf("no pid")
	}
	return unix.PidfdOpen(pid, 0)
}

func closeFd(fd int) { _ = unix.Close(fd) }
