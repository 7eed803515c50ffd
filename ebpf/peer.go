package ebpf

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
)

// PeerCgroup returns the id of the cgroup (v2) whose task connected the TCP connection the
// sidecar accepted from peer (the client's local address and port), to one of the listeners
// or through the transparent redirect.
//
// How the record gets here: connect4/6 store bpf_get_current_cgroup_id() of the task
// calling connect(2) under the socket's cookie; when the client's handshake completes
// (sockops, before its final ACK, so before accept returns) the record moves to a key of the
// client's local address and port. So the identity is the connecting task's, taken at
// connect, whoever created the socket; a connected socket handed to another process keeps
// the identity it was connected with. A connection that completes its handshake without a
// record (or whose record was evicted) removes the record of its address and port, so a
// lookup never returns an earlier connection's cgroup.
//
// It returns an error wrapping ErrNoPeer when there is no record.
func (e *Enforcer) PeerCgroup(peer netip.AddrPort) (uint64, error) {
	k := airlockTupleKey{Addr: addr16(peer.Addr()), Port: peer.Port()}
	var v airlockPeerVal
	err := e.objs.PeerCg.Lookup(k, &v)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return 0, fmt.Errorf("cgroup of the connection from %v: %w", peer, ErrNoPeer)
	}
	if err != nil {
		return 0, fmt.Errorf("cgroup of the connection from %v: %w", peer, err)
	}
	return v.Cgid, nil
}

// CgroupID returns the id of the cgroup v2 directory path (its inode number), which is what
// PeerCgroup returns for its tasks.
func CgroupID(path string) (uint64, error) { return cgroupID(path) }
