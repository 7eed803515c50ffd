//go:build linux

package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// The demo's addresses. They live only inside the demo's own namespaces: the "host" namespace
// plays this machine (the sandbox's veth host end and its sidecar live there) and the
// "outside" namespace plays the internet. 198.18.0.0/15 is the benchmarking range.
const (
	hostAddr     = "198.19.255.254" // the host namespace's end of the link to the outside
	outsideRange = "198.18.0.0/15"  // routed from the host namespace to the outside one
	sandboxPool  = "198.19.200.0/24"
	dnsAddr      = "198.18.0.53"
	apiAddr      = "198.18.0.10" // api.demo.test: the HTTPS upstream
	evilAddr     = "198.18.0.20" // evil.demo.test: a host the policy does not name
	llmAddr      = "198.18.0.40" // llm.demo.test: the fake model provider
)

// topology is two network namespaces joined by a veth pair.
type topology struct {
	host, outside string
}

// ip runs the ip tool.
func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// newTopology creates the namespaces, the link and the routes. Nothing is added to the
// network namespace this program runs in: the veth pair is created inside the host namespace
// with its peer placed in the outside one.
func newTopology(prefix string) (*topology, error) {
	tp := &topology{host: prefix + "-host", outside: prefix + "-out"}
	steps := [][]string{
		{"netns", "add", tp.host},
		{"netns", "add", tp.outside},
		{"-n", tp.host, "link", "set", "lo", "up"},
		{"-n", tp.outside, "link", "set", "lo", "up"},
		{"-n", tp.host, "link", "add", "out0", "type", "veth", "peer", "name", "in0", "netns", tp.outside},
		// Backstops: a packet for anything else dies here instead of leaving.
		{"-n", tp.host, "route", "add", "unreachable", "default", "metric", "4000"},
		{"-n", tp.outside, "route", "add", "unreachable", "default", "metric", "4000"},
		{"-n", tp.host, "addr", "add", hostAddr + "/32", "dev", "out0"},
		{"-n", tp.host, "link", "set", "out0", "up"},
		{"-n", tp.outside, "link", "set", "in0", "up"},
		{"-n", tp.host, "route", "add", outsideRange, "dev", "out0", "src", hostAddr},
		{"-n", tp.outside, "route", "add", hostAddr + "/32", "dev", "in0"},
	}
	for _, a := range []string{dnsAddr, apiAddr, evilAddr, llmAddr} {
		steps = append(steps, []string{"-n", tp.outside, "addr", "add", a + "/32", "dev", "in0"})
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			return tp, err
		}
	}
	return tp, nil
}

// remove deletes both namespaces (and with them the veth pair).
func (tp *topology) remove() error {
	var errs []error
	for _, n := range []string{tp.host, tp.outside} {
		if _, err := os.Stat(filepath.Join("/run/netns", n)); err == nil {
			errs = append(errs, ip("netns", "delete", n))
		}
	}
	return errors.Join(errs...)
}

// inNetns runs fn on a thread inside namespace name; sockets fn creates stay there.
func inNetns(name string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer unix.Close(orig)
		target, err := unix.Open(filepath.Join("/run/netns", name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer unix.Close(target)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter netns %s: %w", name, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, err) // the thread stays locked and dies with the goroutine
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// listen is net.Listen inside namespace ns.
func listen(ns, network, addr string) (net.Listener, error) {
	var l net.Listener
	err := inNetns(ns, func() error {
		var err error
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}

// listenPacket is net.ListenPacket inside namespace ns.
func listenPacket(ns, network, addr string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := inNetns(ns, func() error {
		var err error
		pc, err = net.ListenPacket(network, addr)
		return err
	})
	return pc, err
}
