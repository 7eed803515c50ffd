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

// QueryCgroup returns the id of the cgroup (v2) whose task sent the UDP DNS query with
// message ID id from client (its source address and port, as the DNS filter's socket received
// it). A TCP query is its connection's: PeerCgroup.
//
// How the record gets here: connect4/6 (a UDP socket connected to a DNS listener) and
// sendmsg4/6 (a datagram sent to one with its address) note on the socket the cgroup of the
// task doing it; the egress program copies it under the packet's source address and port and
// the query's ID. So the identity of a query sent with the filter's address is its sender's
// (per query); one sent on a connected socket is the connecting task's (taken at connect,
// like a TCP connection's). A socket that tasks of two cgroups sent on or connected is no
// one's for good, and two queries with one key from different cgroups (sockets sharing a
// port) make the key no one's: the lookup then fails rather than guess.
//
// It returns an error wrapping ErrNoPeer when there is no record, or when it cannot be told.
func (e *Enforcer) QueryCgroup(client netip.AddrPort, id uint16) (uint64, error) {
	k := airlockDnsKey{Addr: addr16(client.Addr()), Port: client.Port(), Id: id}
	var v airlockPeerVal
	err := e.objs.DnsCg.Lookup(k, &v)
	switch {
	case errors.Is(err, ebpf.ErrKeyNotExist):
		return 0, fmt.Errorf("cgroup of DNS query %d from %v: %w", id, client, ErrNoPeer)
	case err != nil:
		return 0, fmt.Errorf("cgroup of DNS query %d from %v: %w", id, client, err)
	case v.Cgid == 0:
		return 0, fmt.Errorf("cgroup of DNS query %d from %v: sent from a socket of two cgroups, or with the key of another cgroup's query: %w", id, client, ErrNoPeer)
	}
	return v.Cgid, nil
}
