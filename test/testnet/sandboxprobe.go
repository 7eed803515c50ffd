//go:build linux

package testnet

// The sandbox probe: a small program that runs inside a test's sandbox cgroup and network
// namespace and tries what an agent might try (connect, sendto, raw sockets, TCP Fast Open),
// answering with the errno the kernel gave. It is the test binary itself, re-executed with
// EnvProbe set (TestMain calls RunProbeIfRequested first), so it needs no separate build.
//
// Protocol: one command per line on stdin, one answer per line on stdout: "OK [detail]" or
// the errno name ("EPERM", "ECONNREFUSED", ...) or "ERR message".

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// EnvProbe makes a test binary run the sandbox probe instead of its tests.
const EnvProbe = "AIRLOCK_TESTNET_SANDBOX_PROBE"

// RunProbeIfRequested runs the probe and exits when EnvProbe is set; otherwise it returns.
// Call it first thing in TestMain.
func RunProbeIfRequested() {
	if os.Getenv(EnvProbe) != "1" {
		return
	}
	runProbe(os.Stdin, os.Stdout)
	os.Exit(0)
}

func runProbe(in io.Reader, out io.Writer) {
	held := map[string]int{}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		fmt.Fprintln(out, probeCommand(f, held))
	}
}

func probeCommand(f []string, held map[string]int) string {
	arg := func(i int) string {
		if i < len(f) {
			return f[i]
		}
		return ""
	}
	switch f[0] {
	case "uid":
		return fmt.Sprintf("OK %d", os.Geteuid())
	case "connect": // connect FAMILY tcp|udp ADDR
		fd, err := probeConnect(arg(1), arg(2), arg(3))
		if err == nil {
			unix.Close(fd)
		}
		return answer(err)
	case "loop": // loop N FAMILY ADDR: N TCP connects, stopping at the first failure
		n, _ := strconv.Atoi(arg(1))
		for i := range n {
			fd, err := probeConnect(arg(2), "tcp", arg(3))
			if err != nil {
				return fmt.Sprintf("%s at %d", answer(err), i)
			}
			unix.Close(fd)
		}
		return "OK"
	case "hold": // hold ID FAMILY ADDR: keep a TCP connection open as ID
		fd, err := probeConnect(arg(2), "tcp", arg(3))
		if err == nil {
			held[arg(1)] = fd
		}
		return answer(err)
	case "echo": // echo ID: send a line on a held connection and read it back
		fd, ok := held[arg(1)]
		if !ok {
			return "ERR no such connection"
		}
		return answer(probeEcho(fd))
	case "sendto": // sendto FAMILY ADDR: one unconnected UDP datagram
		return answer(probeSendto(arg(1), arg(2), false))
	case "udpconnsend": // udpconnsend FAMILY ADDR: connect(), then send()
		return answer(probeSendto(arg(1), arg(2), true))
	case "udpgso": // udpgso FAMILY ADDR: one sendto of two 8-byte UDP GSO segments (UDP_SEGMENT)
		return answer(probeGSO(arg(1), arg(2)))
	case "socket": // socket DOMAIN TYPE PROTO
		d, _ := strconv.Atoi(arg(1))
		ty, _ := strconv.Atoi(arg(2))
		p, _ := strconv.Atoi(arg(3))
		fd, err := unix.Socket(d, ty, p)
		if err == nil {
			unix.Close(fd)
		}
		return answer(err)
	case "tfo": // tfo FAMILY ADDR: sendto with MSG_FASTOPEN on an unconnected TCP socket
		return answer(probeFastOpen(arg(1), arg(2)))
	case "resolve": // resolve NAME SERVER: A query over UDP; "OK addr,addr" or "RCODE name"
		addrs, err := probeResolve(arg(1), arg(2))
		if err != nil {
			return answer(err)
		}
		return "OK " + joinAddrs(addrs)
	case "resolveloop": // resolveloop NAME SERVER PORT N: resolve, then at once N connects to each address
		addrs, err := probeResolve(arg(1), arg(2))
		if err != nil {
			return answer(err)
		}
		n, _ := strconv.Atoi(arg(4))
		for _, a := range addrs {
			ap := netip.AddrPortFrom(a, parsePort(arg(3))).String()
			for i := range n {
				fd, err := probeConnect("4", "tcp", ap)
				if err != nil {
					return fmt.Sprintf("%s at %d to %s", answer(err), i, ap)
				}
				unix.Close(fd)
			}
		}
		return "OK " + joinAddrs(addrs)
	default:
		return "ERR unknown command " + f[0]
	}
}

func answer(err error) string {
	if err == nil {
		return "OK"
	}
	var errno unix.Errno
	if errors.As(err, &errno) {
		return unix.ErrnoName(errno)
	}
	return "ERR " + strings.ReplaceAll(err.Error(), "\n", " ")
}

// sockaddr builds the socket address for family "4" or "6"; an IPv4 address with family 6 is
// given in its IPv4-mapped form.
func sockaddr(family, addr string) (int, unix.Sockaddr, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return 0, nil, err
	}
	if family == "4" {
		return unix.AF_INET, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().Unmap().As4()}, nil
	}
	return unix.AF_INET6, &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}, nil
}

func newSocket(af, typ int) (int, error) {
	fd, err := unix.Socket(af, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if af == unix.AF_INET6 {
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0)
	}
	tv := unix.Timeval{Sec: 3}
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	return fd, nil
}

func probeConnect(family, proto, addr string) (int, error) {
	af, sa, err := sockaddr(family, addr)
	if err != nil {
		return -1, err
	}
	typ := unix.SOCK_STREAM
	if proto == "udp" {
		typ = unix.SOCK_DGRAM
	}
	fd, err := newSocket(af, typ)
	if err != nil {
		return -1, err
	}
	if err := connectRetry(fd, sa); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// connectRetry is connect(2) that survives EINTR (the Go runtime's preemption signals): the
// kernel goes on connecting, so wait for the socket to become writable and read the result.
func connectRetry(fd int, sa unix.Sockaddr) error {
	err := unix.Connect(fd, sa)
	if !errors.Is(err, unix.EINTR) {
		return err
	}
	for {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		n, err := unix.Poll(pfd, 3000)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return unix.ETIMEDOUT
		}
		soErr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
		if err != nil {
			return err
		}
		if soErr != 0 {
			return unix.Errno(soErr)
		}
		return nil
	}
}

func probeEcho(fd int) error {
	if _, err := unix.Write(fd, []byte("ping\n")); err != nil {
		return err
	}
	buf := make([]byte, 64)
	n, err := unix.Read(fd, buf)
	if err != nil {
		return err
	}
	if got := string(buf[:n]); got != "ping\n" {
		return fmt.Errorf("echo: got %q", got)
	}
	return nil
}

func probeSendto(family, addr string, connect bool) error {
	af, sa, err := sockaddr(family, addr)
	if err != nil {
		return err
	}
	fd, err := newSocket(af, unix.SOCK_DGRAM)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if connect {
		if err := connectRetry(fd, sa); err != nil {
			return err
		}
		_, err = unix.Write(fd, []byte("probe"))
		return err
	}
	return unix.Sendto(fd, []byte("probe"), 0, sa)
}

func probeGSO(family, addr string) error {
	af, sa, err := sockaddr(family, addr)
	if err != nil {
		return err
	}
	fd, err := newSocket(af, unix.SOCK_DGRAM)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_SEGMENT, 8); err != nil {
		return err
	}
	return unix.Sendto(fd, []byte("probe-1\nprobe-2\n"), 0, sa)
}

func probeFastOpen(family, addr string) error {
	af, sa, err := sockaddr(family, addr)
	if err != nil {
		return err
	}
	fd, err := newSocket(af, unix.SOCK_STREAM)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Sendto(fd, []byte("GET / HTTP/1.0\r\n\r\n"), unix.MSG_FASTOPEN, sa)
}

// SandboxProbe is a running probe process inside a sandbox cgroup and network namespace.
type SandboxProbe struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader

	// mu serialises commands.
	mu sync.Mutex
}

// StartSandboxProbe starts the test binary as a probe in cgroup cg and namespace ns, and
// kills it when the test ends. The test binary's TestMain must call RunProbeIfRequested.
func StartSandboxProbe(t testing.TB, cg *Cgroup, ns *Netns) *SandboxProbe {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := cg.Command(context.Background(), ns, self)
	cmd.Env = []string{ProbeEnv, "PATH=" + os.Getenv("PATH")}
	return StartProbeCommand(t, cmd)
}

// Pid is the probe's process id.
func (p *SandboxProbe) Pid() int { return p.cmd.Process.Pid }

// Do sends one command and returns the answer line. A probe that does not answer within a
// minute fails t.
func (p *SandboxProbe) Do(t testing.TB, command string) string {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := fmt.Fprintln(p.in, command); err != nil {
		t.Fatalf("sandbox probe %q: %v", command, err)
	}
	type result struct {
		line string
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		l, err := p.out.ReadString('\n')
		ch <- result{strings.TrimSpace(l), err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("sandbox probe %q: read answer: %v", command, r.err)
		}
		return r.line
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		t.Fatalf("sandbox probe %q: no answer within a minute", command)
		return ""
	}
}

// probeResolve sends one A query for name to server (ip:port) over UDP and returns the
// answer's addresses; a non-success rcode is an error "RCODE <name>".
func probeResolve(name, server string) ([]netip.Addr, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	c := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
	resp, _, err := c.Exchange(m, server)
	if err != nil {
		return nil, err
	}
	if resp.Rcode != dns.RcodeSuccess {
		return nil, fmt.Errorf("RCODE %s", dns.RcodeToString[resp.Rcode])
	}
	var out []netip.Addr
	for _, rr := range resp.Answer {
		if a, ok := rr.(*dns.A); ok {
			if ip, ok := netip.AddrFromSlice(a.A.To4()); ok {
				out = append(out, ip)
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no A records")
	}
	return out, nil
}

func joinAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

func parsePort(s string) uint16 {
	n, _ := strconv.ParseUint(s, 10, 16)
	return uint16(n)
}
