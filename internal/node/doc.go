// Package node is the node agent (`airlock node`), its protocol and the sidecar's client of
// it, in one package (as Tailscale keeps derp's protocol, server and client together). The
// agent holds every privilege kernel enforcement needs, so that the sidecar injected into a
// sandbox pod runs without any.
//
// The agent (Agent; agent.go, pod.go, session.go, cgroups.go, netns.go): for each labelled
// pod on its node (fed by the caller: Resync, Upsert, Delete; cmd wires sandbox/kube's pod
// watch to it) it finds the pod's cgroup and its sidecar container's cgroup in the node's
// cgroup v2 hierarchy, binds the protocol's abstract unix socket (SocketName) inside the
// pod's network namespace, and accepts on it only the pod's sidecar container
// (SO_PEERCRED/SO_PEERPIDFD: the caller must be a process of the sidecar container's cgroup,
// as the API server names the container). On the sidecar's hello it attaches and pins the
// eBPF programs (package ebpf) on the pod's cgroup with the sidecar's container cgroup
// exempt, and then serves the map operations the sidecar asks for (allow addresses, CIDR
// rules, report mode, counters, original destinations, which container connected, the CPU
// time and memory of the pod's own containers: usage.go) and sends it the kernel's deny
// events. When the pod goes it removes the pins; when the agent stops the pins stay (fail
// closed) and a new agent adopts them.
//
// The protocol (Request, Reply, Hello, Welcome, Conn...; proto.go): versioned
// (ProtocolVersion), one JSON object per line; its bytes on the wire are golden
// (testdata/wire), so agents and sidecars of different builds keep understanding each other.
//
// The client (Client, Dial; client.go, client_io.go): the sidecar's connection to the agent
// of its node: it refuses a socket not held by root, says hello, redials a lost agent in the
// background with the current tables, and fails every call with ErrUnreachable meanwhile.
//
// It speaks only its own types: the sidecar's adapter (internal/sidecar's AttachNodeAgent)
// converts its kernel spec, counters and deny events at the edge, and keeps the metrics.
// It does not own the Kubernetes client nor the pod watch (sandbox/kube: k8s.io is imported
// only there) nor the eBPF programs (ebpf); it imports ebpf and nothing else of ours.
// Importers: cmd (airlock node) and internal/sidecar (the client).
package node
