package node

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

// envHelper makes the test binary play a pod's container (TestMain): "sidecar" attaches
// through the node agent with the sidecar's client (Client), "app" is an app container. Both
// then run commands from stdin, one answer line each ("R ..."); the sidecar also prints
// the kernel's deny events it receives ("D DEST").
const (
	envHelper = "NODEAGENT_TEST_HELPER"
	envSocket = "NODEAGENT_TEST_SOCKET"
)

func TestMain(m *testing.M) {
	switch os.Getenv(envHelper) {
	case "sidecar":
		runSidecarHelper(os.Getenv(envSocket), false)
		os.Exit(0)
	case "sidecar-transparent":
		runSidecarHelper(os.Getenv(envSocket), true)
		os.Exit(0)
	case "sidecar-identities":
		runIdentitiesHelper(os.Getenv(envSocket))
		os.Exit(0)
	case "app":
		runCommands(nil, os.Getenv(envSocket))
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// out serialises the helper's output lines.
var out = make(chan string, 64)

func printer() {
	for l := range out {
		fmt.Println(l)
	}
}

// transparentAddr is the transparent listener of the "sidecar-transparent" helper; it
// redirects transparentPort.
var transparentAddr = netip.MustParseAddrPort("127.0.0.1:15001")

const transparentPort = 8080

func runSidecarHelper(sock string, transparent bool) {
	go printer()
	out <- "R started"
	cfg := ClientConfig{
		SocketName: sock,
		Hello:      Hello{Listeners: []Listener{{Addr: proxyAddr, Kind: "proxy"}}},
		OnDeny:     func(d DenyEvent) { out <- "D " + d.Dest },
	}
	var ln net.Listener
	if transparent {
		var err error
		if ln, err = net.Listen("tcp", transparentAddr.String()); err != nil {
			out <- "R ERR " + err.Error()
			return
		}
		cfg.Hello.Transparent = &Transparent{Addr4: transparentAddr.String(), Ports: []uint16{transparentPort}}
		cfg.Hello.Listeners = append(cfg.Hello.Listeners, Listener{Addr: transparentAddr.String(), Kind: "transparent"})
	}
	c, err := Dial(cfg, 20*time.Second)
	if err != nil {
		out <- "R ERR " + strings.ReplaceAll(err.Error(), "\n", " ")
		time.Sleep(100 * time.Millisecond)
		return
	}
	if ln != nil {
		go serveTransparent(ln, c)
	}
	out <- "R attached"
	runCommands(c, sock)
}

// proxyAddr is the proxy listener every sidecar helper names in its hello.
const proxyAddr = "127.0.0.1:3128"

// dnsAddr is the DNS listener the identities sidecar helper names in its hello.
const dnsAddr = "127.0.0.1:5353"

// runIdentitiesHelper is a sidecar whose policy has identities: it listens on the proxy
// address and reports which container connected each connection it accepts ("P NAME"), and
// on the DNS address which container sent each datagram it receives (its first two bytes
// are a DNS message ID).
func runIdentitiesHelper(sock string) {
	go printer()
	out <- "R started"
	ln, err := net.Listen("tcp", proxyAddr)
	if err != nil {
		out <- "R ERR " + err.Error()
		return
	}
	pc, err := net.ListenPacket("udp", dnsAddr)
	if err != nil {
		out <- "R ERR " + err.Error()
		return
	}
	cfg := ClientConfig{SocketName: sock, Hello: Hello{Listeners: []Listener{{Addr: proxyAddr, Kind: "proxy"},
		{Addr: dnsAddr, UDP: true, Kind: "dns"}}, Identities: true,
		CIDRs: []CIDR{rawRule()}, IdentityTCP: identityTCPFor("author")}}
	c, err := Dial(cfg, 20*time.Second)
	if err != nil {
		out <- "R ERR " + strings.ReplaceAll(err.Error(), "\n", " ")
		return
	}
	go reportQueries(c, pc)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				name, err := c.PeerContainer(conn.RemoteAddr().(*net.TCPAddr).AddrPort())
				if err != nil {
					out <- "P ERR " + err.Error()
				} else {
					out <- "P " + name
				}
			}()
		}
	}()
	out <- "R attached"
	runCommands(c, sock)
}

// reportQueries reports which container sent each datagram pc receives ("P NAME").
func reportQueries(c *Client, pc net.PacketConn) {
	buf := make([]byte, 512)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		if n < 2 {
			continue
		}
		name, err := c.QueryContainer(from.(*net.UDPAddr).AddrPort(), uint16(buf[0])<<8|uint16(buf[1]))
		if err != nil {
			out <- "P ERR " + err.Error()
		} else {
			out <- "P " + name
		}
	}
}

// rawRule is the sandbox's protocol tcp rule of the identities sidecar: rawIP, port 80.
func rawRule() CIDR { return CIDR{Prefix: rawIP + "/32", Ports: []uint16{80}, Raw: true} }

// identityTCPFor is the identities sidecar's table: containers reviewer and author are the
// identities of their names, and only identity who has rawRule.
func identityTCPFor(who string) *IdentityTCP {
	return &IdentityTCP{
		Containers: map[string]string{"reviewer": "reviewer", "author": "author"},
		Rules:      map[string][]CIDR{who: {rawRule()}},
	}
}

// serveTransparent reports the original destination of every redirected connection ("O").
func serveTransparent(ln net.Listener, c *Client) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		dst, err := c.OriginalDst(conn.RemoteAddr().(*net.TCPAddr).AddrPort())
		if err != nil {
			out <- "O ERR " + err.Error()
		} else {
			out <- "O " + dst.String()
		}
		conn.Close()
	}
}

// runCommands answers: "dial ADDR" (a TCP connect), "agent" (talk to the agent's socket as
// a sidecar would), and with an enforcer "allow IP" and "counters".
func runCommands(enf *Client, sock string) {
	if enf == nil {
		go printer()
		out <- "R started"
	}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		arg := ""
		if len(f) > 1 {
			arg = f[1]
		}
		out <- "R " + command(enf, sock, f[0], arg)
	}
}

func command(enf *Client, sock, cmd, arg string) string {
	switch cmd {
	case "dial":
		c, err := net.DialTimeout("tcp", arg, 3*time.Second)
		if err != nil {
			var errno unix.Errno
			if errors.As(err, &errno) {
				return unix.ErrnoName(errno)
			}
			return "ERR " + err.Error()
		}
		c.Close()
		return "OK"
	case "query": // query ADDR: one datagram, a DNS message ID and a header's worth of zeros
		c, err := net.Dial("udp", arg)
		if err != nil {
			return result(err)
		}
		defer c.Close()
		_, err = c.Write([]byte{0x12, 0x34, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
		return result(err)
	case "agent":
		return talkToAgent(sock)
	case "allow":
		return result(enf.Allow(netip.MustParseAddr(arg), []uint16{80}, time.Now().Add(time.Hour)))
	case "identities":
		return result(enf.SetIdentities(arg == "on"))
	case "idtcp": // idtcp off, or idtcp IDENTITY: only IDENTITY has rawRule
		if arg == "off" {
			return result(enf.SetIdentityTCP(nil))
		}
		return result(enf.SetIdentityTCP(identityTCPFor(arg)))
	case "usage": // one "NAME:ID:CPU-USEC:MEMORY-PEAK" (PEAK "-" when not counted) per container
		us, err := enf.Usage()
		if err != nil {
			return result(err)
		}
		line := "OK"
		for _, u := range us {
			peak := "-"
			if u.Memory {
				peak = strconv.FormatUint(u.MemoryPeakBytes, 10)
			}
			line += fmt.Sprintf(" %s:%s:%d:%s", u.Container, u.ID, u.CPUUserUsec+u.CPUSystemUsec, peak)
		}
		return line
	case "burn": // burn MS milliseconds of CPU
		ms, _ := strconv.Atoi(arg)
		return burn(time.Duration(ms) * time.Millisecond)
	case "hog": // hold MB mebibytes of touched memory
		mb, _ := strconv.Atoi(arg)
		held = make([]byte, mb<<20)
		for i := range held {
			held[i] = 1
		}
		return "OK"
	case "counters":
		c, err := enf.Counters()
		if err != nil {
			return result(err)
		}
		return fmt.Sprintf("OK denies=%d", c.Denies)
	}
	return "ERR unknown command " + cmd
}

// held keeps the "hog" command's memory.
var held []byte

// burn spins until the process has used d more CPU time.
func burn(d time.Duration) string {
	cpu := func() time.Duration {
		var ru unix.Rusage
		_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	until := cpu() + d
	for n := 0; cpu() < until; n++ {
		for i := 0; i < 100000; i++ {
			n ^= i
		}
	}
	return "OK"
}

func result(err error) string {
	if err != nil {
		return "ERR " + strings.ReplaceAll(err.Error(), "\n", " ")
	}
	return "OK"
}

// talkToAgent connects to the agent's socket and says hello with a listener that would
// open everything the sidecar's proxy port serves.
func talkToAgent(sock string) string {
	c, err := net.DialTimeout("unix", sock, 3*time.Second)
	if err != nil {
		return "ERR dial " + err.Error()
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	pc := NewConn(c)
	hello := Hello{Version: ProtocolVersion, Listeners: []Listener{{Addr: "198.18.0.20:80", Kind: "proxy"}}}
	_ = pc.Write(Request{ID: 1, Op: OpHello, Hello: &hello})
	var r Reply
	if err := pc.Read(&r); err != nil {
		return "ERR read " + err.Error()
	}
	if r.Error != "" {
		return "REFUSED " + r.Error
	}
	return "WELCOMED"
}
