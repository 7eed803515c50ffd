// Package sidecar is one running airlock sidecar: the explicit and transparent proxy, the
// DNS filter, kernel enforcement, the credential broker, the local model API and the admin
// endpoints, wired together once.
//
// A Sidecar is an ordered list of components. Each has a constructor with no side effects,
// a Start that opens its sockets and starts serving, and an idempotent Close. Start runs
// them in order and, when one fails, closes the ones already started in reverse order (a
// partial start is unwound); Close stops them in reverse order. The shared inputs (policy
// store, own-address list and SSRF dial guard of package egress, resolver, audit logger,
// metrics registry, logger, interception CA) are built once by the Sidecar and handed to
// every component that needs them.
//
// One goroutine owns policy reloads (SIGHUP and changes of the policy file, including the
// kubelet's ConfigMap symlink swap): it reloads the store and applies the new policy to the
// DNS filter, the credential broker and the kernel enforcer, in that order, tagged with a
// generation number; every component refuses a generation older than the last it applied.
//
// Kernel enforcement is reached through the Enforcer interface; the in-process eBPF
// enforcer (package ebpf) is its first implementation.
//
// The package owns wiring only: decisions live in policy, enforcement in proxy, dnsfilter,
// llmproxy and ebpf. cmd/airlock imports it; nothing else below cmd does.
package sidecar
