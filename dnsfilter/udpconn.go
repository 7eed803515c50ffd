package dnsfilter

import "net"

// boundUDPConn is a UDP socket bound to one address, handed to miekg/dns as a plain
// net.PacketConn. Given a *net.UDPConn, miekg/dns asks the kernel for each packet's
// destination address (IP_PKTINFO) and parses it out of a control message on every read, to
// answer from the address the query was sent to; a socket bound to one address can only
// answer from that address, so it is served with plain recvfrom and sendto instead, without
// that work. A socket bound to the unspecified address keeps miekg/dns's handling.
type boundUDPConn struct {
	*net.UDPConn
}

// plainIfBound returns pc as a boundUDPConn when it is a UDP socket bound to a specific
// address, and pc otherwise.
func plainIfBound(pc net.PacketConn) net.PacketConn {
	u, ok := pc.(*net.UDPConn)
	if !ok {
		return pc
	}
	la, ok := u.LocalAddr().(*net.UDPAddr)
	if !ok || la.IP == nil || la.IP.IsUnspecified() {
		return pc
	}
	return boundUDPConn{u}
}
