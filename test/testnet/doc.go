//go:build linux

// Package testnet builds the hermetic network world airlock's end-to-end tests run in, and runs
// the real airlock binary inside it. It is for tests only: production code never imports it.
//
// A World (NewWorld) is two network namespaces joined by a veth pair:
//
//	sidecar ns  (lo 127.0.0.1; airlock, curl and Go clients run here)
//	   sc0 198.19.255.254, 2001:db8:ffff::1 ── veth ── up0  upstream ns (the "outside world")
//	   198.18.0.0/15, 2001:db8::/32 via sc0               198.18.0.x, 198.19.0.x, 2001:db8::x
//	   unreachable 198.18.0.0/15, 2001:db8::/32 and default, metric 4000
//
// In-process HTTP and HTTPS upstreams (Upstream) and an authoritative DNS server for "test."
// (DNSServer) listen inside the upstream namespace while being served by the test process;
// their certificates come from a per-world test CA (CA). Clients dial from inside the sidecar
// namespace (Netns.DialContext, Netns.Do). Airlock starts the binary with
// `ip netns exec <sidecar> airlock run ...` and exposes its log and audit events.
//
// Rules this package keeps (DESIGN.md "Testing"): it never adds an address, route or link to the
// machine's own network namespace; namespaces are named "al-<pid>-<n>-..." and deleted in
// t.Cleanup; test hosts use 198.18.0.0/15 and 2001:db8::/32 only; readiness is waited on, never
// slept for. 198.19.255.254 and 2001:db8:ffff::1 are the sidecar's own addresses, and
// 198.18.0.53 is the DNS server; do not give them to an upstream.
//
// miekg/dns lives in dnsfilter in production code (STYLE.md); this test-only package imports it
// too, to play the outside resolver.
package testnet
