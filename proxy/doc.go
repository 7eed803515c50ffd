// Package proxy owns airlock's HTTP and HTTPS egress proxy: the explicit listener
// (absolute-form HTTP and CONNECT, built on github.com/elazarl/goproxy), the transparent
// listener for connections the kernel redirects, TLS interception with a per-sidecar CA, the
// anti-fronting checks (URL host, Host header, CONNECT host and TLS SNI must agree), the limits,
// and the proxy's audit events and metrics. Every upstream is reached through the sidecar's
// one SSRF guard (egress.Guard, Config.Guard), which resolves each name once and dials only
// addresses it checked against the request's policy.
//
// It does not decide: every verdict comes from a *policy.Policy (Decide for names, CheckAddr
// for addresses). It does not hold secrets: credentials are added by an Injector that cmd
// passes in. It does not find the original destination of a redirected connection: an
// OriginalDestination does (the ebpf package, through an adapter in cmd).
//
// Only internal/sidecar, cmd/airlock (the CA for ca export and sandbox, flag defaults) and
// tests import this package. It imports policy, audit and egress, and is the only package
// that imports goproxy.
package proxy
