// Package ebpf is the Go side of airlock's kernel enforcement: it loads the programs built
// from bpf/airlock.c (bpf2go output committed beside gen.go), attaches them as bpf links to
// one sandbox's cgroup v2 directory, pins links and maps under
// /sys/fs/bpf/airlock/<sandbox>/, keeps the maps (allow entries from DNS answers, the
// sidecar's listeners, policy CIDRs, transparent mode) up to date, turns deny events from
// the ring buffer into callbacks, and exports the per-sandbox counters as metrics.
//
// Enforcement outlives the sidecar: Close releases the sidecar's handles but leaves the
// pinned links attached, so a dead sidecar fails closed, and Open adopts what is pinned
// (same map schema) or replaces it (new schema) while the cgroup stays under a deny-by-default
// program throughout. Remove detaches and unpins a sandbox for good.
//
// In a Kubernetes pod the sidecar is one of the pod's containers: FindPodCgroup finds the
// pod's cgroup and the sidecar's own, and Config.ExemptCgroup exempts the latter (and every
// cgroup below it) from the programs attached to the former.
//
// It is the only package that imports github.com/cilium/ebpf, and it imports nothing of
// airlock's: internal/sidecar adapts it to its kernel Enforcer interface and wires that to
// the DNS filter (AllowMap), the proxy's transparent listener (OriginalDst) and the audit log.
// Linux only.
package ebpf
