package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NetnsDir is where named network namespaces are bind-mounted, as `ip netns` does.
const NetnsDir = "/run/netns"

// etcNetnsDir holds per-namespace files that `ip netns exec` bind-mounts over /etc.
const etcNetnsDir = "/etc/netns"

// createNetns creates the named network namespace and bind-mounts it at /run/netns/name, like
// `ip netns add`, without leaving the calling goroutine in it. It fails if the name exists.
func createNetns(name string) error {
	if err := os.MkdirAll(NetnsDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", NetnsDir, err)
	}
	path := filepath.Join(NetnsDir, name)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return fmt.Errorf("network namespace %s: %w", name, err)
	}
	f.Close()

	errc := make(chan error, 1)
	go func() {
		// The thread enters the new namespace; it is handed back to the runtime only once it is
		// back in the original one, and never if that fails (the runtime then ends it).
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open current network namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("unshare network namespace: %w", err)
			return
		}
		merr := unix.Mount(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), path, "none", unix.MS_BIND, "")
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(merr, fmt.Errorf("return to the original network namespace: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- merr
	}()
	if err := <-errc; err != nil {
		os.Remove(path)
		return fmt.Errorf("network namespace %s: %w", name, err)
	}
	return nil
}

// deleteNetns unmounts and removes /run/netns/name; a missing namespace is not an error.
// (/etc/netns/name belongs to the files step: linuxHost.RemoveNetnsEtc.)
func deleteNetns(name string) error {
	path := filepath.Join(NetnsDir, name)
	var errs []error
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		errs = append(errs, fmt.Errorf("unmount %s: %w", path, err))
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("remove %s: %w", path, err))
	}
	return errors.Join(errs...)
}

// netnsExists reports whether /run/netns/name is a mounted namespace.
func netnsExists(name string) bool {
	h, err := netns.GetFromName(name)
	if err != nil {
		return false
	}
	h.Close()
	return true
}

// currentNetnsInode identifies the calling thread's network namespace.
func currentNetnsInode() (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return 0, fmt.Errorf("stat network namespace: %w", err)
	}
	return st.Ino, nil
}

// wireLink creates the veth pair: hostVeth in the current namespace with l.Host/30, eth0 in
// the sandbox namespace with l.Sandbox/30 and routes to nothing but the link (plus the raw TCP
// CIDRs, through the host end). lo comes up in the sandbox.
func wireLink(nsName, hostVeth string, l link, rawRoutes []netip.Prefix) error {
	ns, err := netns.GetFromName(nsName)
	if err != nil {
		return fmt.Errorf("open network namespace %s: %w", nsName, err)
	}
	defer ns.Close()

	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: hostVeth},
		PeerName:      sandboxVethName,
		PeerNamespace: netlink.NsFd(int(ns)),
	}
	err = netlink.LinkAdd(veth)
	if errors.Is(err, unix.EEXIST) {
		// The pair of this sandbox's last life, still going with its namespace (undoVeth):
		// the name is this state directory's and this sandbox's alone.
		if err = deleteHostVeth(hostVeth, 0, 0); err == nil {
			err = netlink.LinkAdd(veth)
		}
	}
	if err != nil {
		return fmt.Errorf("add veth %s: %w", hostVeth, err)
	}
	host, err := netlink.LinkByName(hostVeth)
	if err != nil {
		return fmt.Errorf("veth %s: %w", hostVeth, err)
	}
	if err := netlink.AddrAdd(host, &netlink.Addr{IPNet: ipnet(l.Host, 30)}); err != nil {
		return fmt.Errorf("address %s on %s: %w", l.Host, hostVeth, err)
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return fmt.Errorf("bring up %s: %w", hostVeth, err)
	}

	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink in %s: %w", nsName, err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("lo in %s: %w", nsName, err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		return fmt.Errorf("bring up lo in %s: %w", nsName, err)
	}
	peer, err := h.LinkByName(sandboxVethName)
	if err != nil {
		return fmt.Errorf("%s in %s: %w", sandboxVethName, nsName, err)
	}
	if err := h.AddrAdd(peer, &netlink.Addr{IPNet: ipnet(l.Sandbox, 30)}); err != nil {
		return fmt.Errorf("address %s in %s: %w", l.Sandbox, nsName, err)
	}
	if err := h.LinkSetUp(peer); err != nil {
		return fmt.Errorf("bring up %s in %s: %w", sandboxVethName, nsName, err)
	}
	for _, p := range rawRoutes {
		r := &netlink.Route{LinkIndex: peer.Attrs().Index, Dst: ipnet(p.Addr(), p.Bits()), Gw: net.IP(l.Host.AsSlice())}
		if err := h.RouteAdd(r); err != nil {
			return fmt.Errorf("route %s via %s in %s: %w", p, l.Host, nsName, err)
		}
	}
	if len(rawRoutes) > 0 {
		// Forward what arrives from this sandbox (only this interface: the host's own
		// forwarding setting is left alone); the kernel programs decide what may leave.
		if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+hostVeth+"/forwarding", []byte("1"), 0o644); err != nil {
			return fmt.Errorf("enable forwarding on %s: %w", hostVeth, err)
		}
	}
	return nil
}

// deleteHostVeth removes the host end of the pair (which removes both ends) from the namespace
// whose inode is hostNetns: the current one, or the one the supervisor (pid) lives in. A
// missing link is not an error; when neither namespace is at hand, removing the sandbox's
// namespace removes the pair too.
func deleteHostVeth(hostVeth string, hostNetns uint64, supervisorPid int) error {
	return withHostVeth(hostVeth, hostNetns, supervisorPid, func(h *netlink.Handle, l netlink.Link) error {
		if err := h.LinkDel(l); err != nil {
			return fmt.Errorf("delete veth %s: %w", hostVeth, err)
		}
		return nil
	})
}

// releaseHostVeth removes every address of the host end of the pair (in the namespace whose
// inode is hostNetns, as deleteHostVeth) and leaves the link: removing the sandbox's namespace
// unregisters the pair in the kernel's background. A missing link is not an error; when
// neither namespace is at hand, there is nothing to do from here.
func releaseHostVeth(hostVeth string, hostNetns uint64, supervisorPid int) error {
	return withHostVeth(hostVeth, hostNetns, supervisorPid, func(h *netlink.Handle, l netlink.Link) error {
		addrs, err := h.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return fmt.Errorf("addresses of veth %s: %w", hostVeth, err)
		}
		for _, a := range addrs {
			if a.IP.IsLinkLocalUnicast() {
				continue // the kernel's own IPv6 link-local address answers for no subnet
			}
			if err := h.AddrDel(l, &a); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
				return fmt.Errorf("remove address %s from veth %s: %w", a.IPNet, hostVeth, err)
			}
		}
		return nil
	})
}

// withHostVeth runs do on the host end of the pair in the namespace whose inode is hostNetns
// (hostHandle's); a missing link, or neither namespace at hand, does nothing.
func withHostVeth(hostVeth string, hostNetns uint64, supervisorPid int, do func(*netlink.Handle, netlink.Link) error) error {
	h, err := hostHandle(hostNetns, supervisorPid)
	if err != nil || h == nil {
		return err
	}
	defer h.Close()
	l, err := h.LinkByName(hostVeth)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("find veth %s: %w", hostVeth, err)
	}
	return do(h, l)
}

// addrsIn lists the IPv4 addresses of the current namespace's interfaces inside subnet.
func addrsIn(subnet netip.Prefix) ([]netip.Addr, error) {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("list the host's addresses: %w", err)
	}
	var in []netip.Addr
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && subnet.Contains(ip.Unmap()) {
			in = append(in, ip.Unmap())
		}
	}
	return in, nil
}

// hostHandle opens netlink in the host namespace; nil when it is not reachable from here.
func hostHandle(hostNetns uint64, supervisorPid int) (*netlink.Handle, error) {
	cur, err := currentNetnsInode()
	if err != nil {
		return nil, err
	}
	if cur == hostNetns || hostNetns == 0 {
		return netlink.NewHandle()
	}
	if supervisorPid <= 0 {
		return nil, nil
	}
	path := fmt.Sprintf("/proc/%d/ns/net", supervisorPid)
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil || st.Ino != hostNetns {
		return nil, nil
	}
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, nil
	}
	defer ns.Close()
	return netlink.NewHandleAt(ns)
}

func ipnet(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(bits, a.BitLen())}
}

// loopbackUp brings up lo in the named namespace (a --network none sandbox has nothing else).
func loopbackUp(nsName string) error {
	ns, err := netns.GetFromName(nsName)
	if err != nil {
		return fmt.Errorf("open network namespace %s: %w", nsName, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink in %s: %w", nsName, err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("lo in %s: %w", nsName, err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		return fmt.Errorf("bring up lo in %s: %w", nsName, err)
	}
	return nil
}
