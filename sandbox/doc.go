// Package sandbox is airlock's thin sandbox lifecycle manager for one machine: it creates,
// wires, supervises, enters and removes sandboxes, each a network namespace joined to the host
// by a veth pair, a cgroup v2 directory, and its own supervised `airlock run` sidecar that
// enforces the policy on that cgroup. The sidecar does the enforcing; this package only builds
// what it needs and tears it down again.
//
// Every sandbox has one JSON state file, written atomically before each step under a lock, so a
// crash at any step leaves something Reap can clean. Create is a table of named steps, each
// with its undo (create.go); every change to the machine goes through the small hostOps seam,
// and what it needs of the kernel enforcement through the Kernel interface, which the wiring
// supplies (internal/sidecar adapts package ebpf, which this package does not import). The
// Kubernetes backend lives in sandbox/kube.
package sandbox
