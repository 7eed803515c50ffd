package sandbox

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/test/privtest"
)

// TestVethGoesWithItsNamespace runs the veth's life on real netlink, with a throw-away network
// namespace as the host's: the pair wired, released (the host end loses its addresses at
// once and stays), gone with the sandbox's namespace; and a create that finds a link of its
// name left over replaces it.
func TestVethGoesWithItsNamespace(t *testing.T) {
	privtest.Require(t)
	name := fmt.Sprintf("airlock-vethtest-%d", os.Getpid())
	hostVeth := fmt.Sprintf("alvt%d", os.Getpid()%1000000)
	l := link{Prefix: netip.MustParsePrefix("198.18.7.0/30"), Host: netip.MustParseAddr("198.18.7.1"), Sandbox: netip.MustParseAddr("198.18.7.2")}
	errc := make(chan error, 1)
	go func() {
		// This thread enters a namespace of its own and is never handed back: it ends with
		// the goroutine, and the host's network is never touched.
		runtime.LockOSThread()
		errc <- vethLife(name, hostVeth, l)
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func vethLife(name, hostVeth string, l link) (err error) {
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("unshare: %w", err)
	}
	// A leftover of the name (here a pair of its own) is replaced by the create.
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hostVeth}, PeerName: "alvtold"}); err != nil {
		return fmt.Errorf("leftover link: %w", err)
	}
	if err := createNetns(name); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, deleteNetns(name)) }()
	if err := wireLink(name, hostVeth, l, nil); err != nil {
		return fmt.Errorf("wire over a leftover: %w", err)
	}
	lk, err := netlink.LinkByName(hostVeth)
	if err != nil {
		return fmt.Errorf("after the wire: %w", err)
	}
	if _, err := netlink.LinkByName("alvtold"); err == nil {
		return fmt.Errorf("the leftover pair is still there after the wire")
	}
	if n := hostAddrs(lk); n != 1 {
		return fmt.Errorf("wired veth has %d IPv4 addresses, want 1", n)
	}
	for round := range 2 { // a second release finds nothing to do
		if err := releaseHostVeth(hostVeth, 0, 0); err != nil {
			return fmt.Errorf("release (round %d): %w", round, err)
		}
	}
	if lk, err = netlink.LinkByName(hostVeth); err != nil {
		return fmt.Errorf("the released veth is gone before its namespace: %w", err)
	}
	if n := hostAddrs(lk); n != 0 {
		return fmt.Errorf("released veth keeps %d IPv4 addresses", n)
	}
	if err := deleteNetns(name); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := netlink.LinkByName(hostVeth)
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("veth %s still there 10 s after its namespace went (%v)", hostVeth, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func hostAddrs(lk netlink.Link) int {
	addrs, err := netlink.AddrList(lk, netlink.FAMILY_V4)
	if err != nil {
		return -1
	}
	return len(addrs)
}
