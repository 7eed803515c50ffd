package nodeagent

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/internal/nodeproto"
	"github.com/airlock-dev/airlock/internal/sidecar"
)

// envHelper makes the test binary play a pod's container (TestMain): "sidecar" attaches
// through the node agent with the sidecar's real client, "app" is an app container. Both
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
	log := logrus.New()
	log.SetOutput(io.Discard)
	spec := sidecar.KernelSpec{
		Sandbox:   "ignored",
		Listeners: []sidecar.KernelListener{{Addr: netip.MustParseAddrPort("127.0.0.1:3128"), Kind: sidecar.ListenerProxy}},
		OnDeny:    func(ev audit.Event) { out <- "D " + ev.Destination },
		Logger:    log,
	}
	var ln net.Listener
	if transparent {
		var err error
		if ln, err = net.Listen("tcp", transparentAddr.String()); err != nil {
			out <- "R ERR " + err.Error()
			return
		}
		spec.Transparent = &sidecar.KernelTransparent{Addr4: transparentAddr, Ports: []uint16{transparentPort}}
		spec.Listeners = append(spec.Listeners, sidecar.KernelListener{Addr: transparentAddr, Kind: sidecar.ListenerTransparent})
	}
	enf, err := sidecar.AttachNodeAgent(sock, 20*time.Second)(spec)
	if err != nil {
		out <- "R ERR " + strings.ReplaceAll(err.Error(), "\n", " ")
		time.Sleep(100 * time.Millisecond)
		return
	}
	if ln != nil {
		go serveTransparent(ln, enf)
	}
	out <- "R attached"
	runCommands(enf, sock)
}

// serveTransparent reports the original destination of every redirected connection ("O").
func serveTransparent(ln net.Listener, enf sidecar.Enforcer) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		dst, err := enf.OriginalDst(c)
		if err != nil {
			out <- "O ERR " + err.Error()
		} else {
			out <- "O " + dst.String()
		}
		c.Close()
	}
}

// runCommands answers: "dial ADDR" (a TCP connect), "agent" (talk to the agent's socket as
// a sidecar would), and with an enforcer "allow IP" and "counters".
func runCommands(enf sidecar.Enforcer, sock string) {
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

func command(enf sidecar.Enforcer, sock, cmd, arg string) string {
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
	case "agent":
		return talkToAgent(sock)
	case "allow":
		return result(enf.Allow(netip.MustParseAddr(arg), []uint16{80}, time.Now().Add(time.Hour)))
	case "counters":
		c, err := enf.Counters()
		if err != nil {
			return result(err)
		}
		return fmt.Sprintf("OK denies=%d", c.Denies)
	}
	return "ERR unknown command " + cmd
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
	pc := nodeproto.NewConn(c)
	hello := nodeproto.Hello{Version: nodeproto.Version, Listeners: []nodeproto.Listener{{Addr: "198.18.0.20:80", Kind: "proxy"}}}
	_ = pc.Write(nodeproto.Request{ID: 1, Op: nodeproto.OpHello, Hello: &hello})
	var r nodeproto.Reply
	if err := pc.Read(&r); err != nil {
		return "ERR read " + err.Error()
	}
	if r.Error != "" {
		return "REFUSED " + r.Error
	}
	return "WELCOMED"
}
