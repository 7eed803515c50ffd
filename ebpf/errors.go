package ebpf

import "errors"

// Sentinel errors. Functions say which of them they may return.
var (
	// ErrNotSupported means this kernel or machine cannot run the enforcement: a program or
	// map type, a helper, bpf links, cgroup v2 or bpffs is missing. Probe and Open wrap it.
	ErrNotSupported = errors.New("kernel enforcement not supported")
	// ErrInvalidConfig means the Config cannot be used as given.
	ErrInvalidConfig = errors.New("invalid kernel enforcement config")
	// ErrNoOriginalDst means the kernel recorded no original destination for a connection.
	ErrNoOriginalDst = errors.New("no original destination recorded")
	// ErrNoPeer means the kernel recorded no connecting cgroup for a connection (PeerCgroup),
	// or no sending cgroup it can tell for a DNS query (QueryCgroup).
	ErrNoPeer = errors.New("no connecting cgroup recorded")
	// ErrClosed means the Enforcer was closed.
	ErrClosed = errors.New("kernel enforcer closed")
)
