// Package nodeagent is `airlock node`: the node agent that holds every privilege kernel
// enforcement needs, so that the sidecar injected into a sandbox pod runs without any.
//
// For each labelled pod on its node (fed by the caller: Resync, Upsert, Delete; cmd/airlock
// wires sandbox/kube's pod watch to it) the agent finds the pod's cgroup and its sidecar
// container's cgroup in the node's cgroup v2 hierarchy, binds the protocol's abstract unix
// socket (internal/nodeproto) inside the pod's network namespace, and accepts on it only the
// pod's sidecar container (SO_PEERCRED/SO_PEERPIDFD: the caller must be a process of the
// sidecar container's cgroup, as the API server names the container). On the sidecar's hello
// it attaches and pins the eBPF programs (package ebpf) on the pod's cgroup with the sidecar's
// container cgroup exempt, and then serves the map operations the sidecar asks for (allow
// addresses, CIDR rules, report mode, counters) and sends it the kernel's deny events. When
// the pod goes it removes the pins; when the agent stops the pins stay (fail closed) and a new
// agent adopts them.
//
// It owns the agent's behaviour, not the Kubernetes client (sandbox/kube) nor the eBPF
// programs (ebpf). Only cmd/airlock imports it.
package nodeagent
