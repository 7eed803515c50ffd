package main

// The kernel section of `make bench`: what connect() costs a sandbox process with airlock's
// eBPF programs on its cgroup against the same cgroup without them, and how long the DNS
// filter's Allow (the allow map write) takes before the kernel sees the entry (Allow returns
// only then). It needs root, cgroup v2 and bpffs; without them it reports why and is skipped.
//
// The connecting process is this binary re-executed with kernelConnectRole, started directly
// in the cgroup (CLONE_INTO_CGROUP); it connects to a listener of the bench on 127.0.0.1 (the
// listener's port is allowed in the allow map) and prints nanoseconds per connect.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/ebpf"
)

const (
	kernelConnectRole = "kernel-connect-child"
	kernelConnects    = 20000
	kernelAllows      = 2000
	kernelRounds      = 5
)

// kernelReport holds the kernel section's figures.
type kernelReport struct {
	skipped               string
	withoutNs, withNs     float64
	allowMedian, allowP99 time.Duration
	err                   error
}

// runKernelConnectChild connects kernelConnects times to the address in os.Args[2] with
// plain socket/connect/close system calls (no Go poller in the way) and prints ns per
// connect+close.
func runKernelConnectChild() int {
	ap, err := netip.ParseAddrPort(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	sa := &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	start := time.Now()
	for range kernelConnects {
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			fmt.Fprintf(os.Stderr, "socket: %v\n", err)
			return 1
		}
		for {
			err = syscall.Connect(fd, sa)
			if err != syscall.EINTR {
				break
			}
		}
		syscall.Close(fd)
		if err != nil && err != syscall.EISCONN {
			fmt.Fprintf(os.Stderr, "connect: %v\n", err)
			return 1
		}
	}
	fmt.Println(time.Since(start).Nanoseconds() / kernelConnects)
	return 0
}

func runKernelBench(ctx context.Context, progress func(string, ...any)) kernelReport {
	if os.Geteuid() != 0 {
		return kernelReport{skipped: "not root"}
	}
	if err := ebpf.Probe(); err != nil {
		return kernelReport{skipped: err.Error()}
	}
	root, err := ebpf.Cgroup2Root()
	if err != nil {
		return kernelReport{skipped: err.Error()}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return kernelReport{err: err}
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	addr := ln.Addr().(*net.TCPAddr).AddrPort()

	var rep kernelReport
	pair, err := newCgroupPair(root, "kernel", addr)
	if err != nil {
		return kernelReport{err: err}
	}
	defer pair.Close()
	plain, enforced, enf := pair.plain, pair.enforced, pair.enf

	// Alternate the two cgroups and take medians, so load from elsewhere hits both alike.
	var without, with []float64
	for round := range kernelRounds {
		progress("kernel: round %d/%d: %d connects without the programs, then with them", round+1, kernelRounds, kernelConnects)
		ns, err := connectChild(ctx, plain, addr)
		if err != nil {
			return kernelReport{err: err}
		}
		without = append(without, ns)
		if ns, err = connectChild(ctx, enforced, addr); err != nil {
			return kernelReport{err: err}
		}
		with = append(with, ns)
	}
	rep.withoutNs, rep.withNs = median(without), median(with)

	lat := make([]time.Duration, 0, kernelAllows)
	for i := range kernelAllows {
		a := netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})
		t0 := time.Now()
		if err := enf.Allow(a, []uint16{443}, time.Now().Add(time.Minute)); err != nil {
			return kernelReport{err: err}
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	rep.allowMedian, rep.allowP99 = lat[len(lat)/2], lat[len(lat)*99/100]
	return rep
}

// connectChild runs the connect child in cgroup dir and returns its ns per connect.
func connectChild(ctx context.Context, dir string, addr netip.AddrPort) (float64, error) {
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	f, err := os.Open(dir)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, kernelConnectRole, addr.String())
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(f.Fd()), Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("connect child in %s: %w", dir, err)
	}
	return strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
}

func printKernelReport(w io.Writer, r kernelReport) {
	fmt.Fprintln(w, "\nkernel enforcement (eBPF on the sandbox cgroup)")
	switch {
	case r.skipped != "":
		fmt.Fprintf(w, "  skipped: %s\n", r.skipped)
	case r.err != nil:
		fmt.Fprintf(w, "  failed: %v\n", r.err)
	default:
		fmt.Fprintf(w, "  connect()+close() to 127.0.0.1 (median of %d rounds): %.0f ns/op without programs, %.0f ns/op with them (+%.0f ns, x%.2f)\n",
			kernelRounds, r.withoutNs, r.withNs, r.withNs-r.withoutNs, r.withNs/r.withoutNs)
		fmt.Fprintf(w, "  DNS answer to kernel-visible (Allow, one address, one port): median %v, p99 %v\n", r.allowMedian, r.allowP99)
	}
}
