// Package sandbox is airlock's thin sandbox lifecycle manager for one machine: it creates,
// wires, supervises, enters and removes sandboxes, each a network namespace joined to the host
// by a veth pair, a cgroup v2 directory, and its own supervised `airlock run` sidecar that
// enforces the policy on that cgroup. The sidecar does the enforcing; this package only builds
// what it needs and tears it down again.
//
// Every sandbox has one JSON state file, written atomically before each step under a lock, so a
// crash at any step leaves something Reap can clean. The Kubernetes backend lives in
// sandbox/kube.
package sandbox
