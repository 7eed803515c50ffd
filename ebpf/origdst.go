package ebpf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/cilium/ebpf"
)

// OriginalDst returns where a connection accepted by the transparent listener was going
// before connect4/connect6 redirected it, and forgets the record (it is read once).
//
// How the record gets here: connect4/6 store the original destination under the client
// socket's cookie when they rewrite the address; when the client's handshake completes
// (sockops, BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB, before the client's final ACK is sent, so
// before accept returns) the record moves to a key made of the client's local address and
// port, which is exactly c.RemoteAddr() here. The sidecar shares the sandbox's network
// namespace, so that pair is unique while the connection lives.
//
// It returns an error wrapping ErrNoOriginalDst when there is no record (the connection was
// not redirected, e.g. a sandbox process connected to the listener directly).
func (e *Enforcer) OriginalDst(c net.Conn) (netip.AddrPort, error) {
	ta, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("original destination of %v: not a TCP connection: %w", c.RemoteAddr(), ErrNoOriginalDst)
	}
	return e.OriginalDstOf(ta.AddrPort())
}

// OriginalDstOf is OriginalDst for the accepted connection whose peer (the client's local
// address and port) is peer: what a node agent looks up for a sidecar that holds the
// connection itself. Same errors as OriginalDst.
func (e *Enforcer) OriginalDstOf(peer netip.AddrPort) (netip.AddrPort, error) {
	k := airlockTupleKey{Addr: addr16(peer.Addr()), Port: peer.Port()}
	var o airlockOrigDst
	err := e.objs.OrigTuple.LookupAndDelete(k, &o)
	if errors.Is(err, ebpf.ErrNotSupported) {
		if err = e.objs.OrigTuple.Lookup(k, &o); err == nil {
			_ = e.objs.OrigTuple.Delete(k)
		}
	}
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return netip.AddrPort{}, fmt.Errorf("original destination of %v: %w", peer, ErrNoOriginalDst)
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination of %v: %w", peer, err)
	}
	return netip.AddrPortFrom(netip.AddrFrom16(o.Addr).Unmap(), o.Port), nil
}
