// Package meter keeps the sandbox's bill beside its model spend (issue 35): it samples the
// sandbox's cgroup (CPU time, memory in use and its peak) and the kernel's per-sandbox
// counters (bytes sent and received, connections), adds them up over the sandbox's life in
// the usage ledger of the state directory (usage-ledger.jsonl), prices them with
// spec.usage.prices, and freezes the sandbox's cgroup when spec.usage.caps is reached (thawing
// it when a reload raises the cap or the operator asks).
//
// It reads cgroups on pure cgroup v2 hosts and on hybrid ones (memory on v1, the sandbox's v2
// cgroup holding only the core files), and knows nothing of eBPF or of the model API: the
// sidecar (internal/sidecar) passes it the kernel counters and the model spend as functions.
// cmd/airlock reads the ledgers it writes (airlock usage, sandbox list, sandbox thaw).
//
// Every figure is keyed by sandbox and identity; the identity is "" (the whole sandbox) until
// identities exist (issue 34), when each identity's child cgroup gets a key of its own.
package meter
