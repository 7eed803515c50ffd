package policy

// This file is the reason catalogue: every reason code any part of airlock puts on the wire
// (the "reason" field of the proxy's JSON bodies, the audit "reason" field, the "reason"
// metrics labels), with the HTTP status it goes with, a sentence saying what happened and a
// remedy. The proxy, the DNS filter, the model API, the credential broker and the kernel
// events emit these values and nothing else; the table of reasons in docs/audit.md is
// generated from it (tools/docgen) and checked against it by a test (reasons_test.go). The code strings are a contract: never rename one.

import "net/http"

// Reason is a machine-readable reason code from the fixed set of this catalogue.
// Decision.Detail carries the sentence about the particular request; Reason.Info says what
// the code means in general and what to do about it.
type Reason string

// Reasons of a policy decision (Decide, CheckAddr, DecideName).
const (
	ReasonRuleMatched      Reason = "rule_matched"       // a rule allows the request
	ReasonNoRule           Reason = "no_rule"            // no rule names the host (or address)
	ReasonPortNotAllowed   Reason = "port_not_allowed"   // a rule names the host, not the port
	ReasonMethodNotAllowed Reason = "method_not_allowed" // host and port match, no L7 rule allows the method
	ReasonPathNotAllowed   Reason = "path_not_allowed"   // host, port and method match, the path does not
	ReasonInternalAddress  Reason = "internal_address"   // destination address is internal and no rule names it by CIDR
	ReasonInvalidHost      Reason = "invalid_host"       // the host could not be parsed or normalised
	ReasonInvalidPath      Reason = "invalid_path"       // the path could not be decoded or escapes the root
	ReasonTCPOnly          Reason = "tcp_only"           // only a protocol: tcp rule matches; it is not proxied
	ReasonOffline          Reason = "offline"            // the policy allows no egress at all
	ReasonPublicAddress    Reason = "public_address"     // CheckAddr: the address is public; no rule is involved
	ReasonMethodOverride   Reason = "method_override"    // a rule limits methods and the request carries a method override
	ReasonAmbiguousPath    Reason = "ambiguous_path"     // a rule limits paths and the path could be read as another one
)

// Reasons of the proxy's own checks (denials, status 403 unless noted). No policy decides
// them: they are enforced in every mode, report mode included, because they protect the
// decision itself rather than express the policy.
const (
	ReasonHostMismatch        Reason = "host_mismatch"                 // URL host, Host header, SNI or CONNECT host disagree
	ReasonSelfAddress         Reason = "self_address"                  // the destination is one of the sidecar's own listeners
	ReasonOriginalDstMismatch Reason = "original_destination_mismatch" // a transparent connection's original address is not among the name's
	ReasonOriginalDstUnknown  Reason = "original_destination_unknown"  // a transparent connection's original destination could not be read
	ReasonSNIMissing          Reason = "sni_missing"                   // a TLS ClientHello names no server where no rule allows that
	ReasonBadClientHello      Reason = "bad_client_hello"              // TLS bytes the stream classifier cannot classify
	ReasonUnknownProtocol     Reason = "unknown_protocol"              // a transparent connection speaks neither TLS nor HTTP
	ReasonTunnelHTTP          Reason = "http_in_tunnel"                // cleartext HTTP in a passthrough CONNECT tunnel
	ReasonTunnelLimit         Reason = "tunnel_limit"                  // MaxTunnels tunnels are open already (429)
	ReasonIdentityUnknown     Reason = "identity_unknown"              // the cgroup of the connection or DNS query is not one of the policy's identities
)

// Reasons of the proxy's failures: an allowed request that could not be completed.
const (
	ReasonResolveFailed      Reason = "resolve_failed"        // the name did not resolve (502)
	ReasonConnectFailed      Reason = "connect_failed"        // no checked address accepted the connection (502)
	ReasonTimeout            Reason = "timeout"               // connect or response-header timeout (504)
	ReasonUpstreamProxy      Reason = "upstream_proxy_failed" // the operator's upstream proxy refused, failed or did not answer (502)
	ReasonUpgradeUnsupported Reason = "upgrade_unsupported"   // a protocol upgrade the proxy does not relay (502)
	ReasonInjectionFailed    Reason = "injection_failed"      // a credential could not be injected (503)
	ReasonBodyLimit          Reason = "body_limit"            // the request body is over the limit (413)
	ReasonNotProxyRequest    Reason = "not_a_proxy_request"   // origin-form request sent to the proxy port (400)
	ReasonUnsupportedScheme  Reason = "unsupported_scheme"    // a scheme other than http or https (400)
	ReasonAuditUnavailable   Reason = "audit_unavailable"     // the audit log cannot be written: fail closed (503)
)

// ReasonAuditSigningUnavailable is the reason of the audit log's own event saying that
// checkpoint signing (a signing service: --audit-sign vault-transit:) fails, and again that it
// resumed. No request is refused for it.
const ReasonAuditSigningUnavailable Reason = "audit_signing_unavailable"

// Reasons of the credential broker.
const (
	ReasonCredentialMisuse      Reason = "credential_misuse"      // a placeholder went where its rule does not bind it
	ReasonCredentialCleartext   Reason = "credential_cleartext"   // injection into cleartext http:// without allowCleartext
	ReasonCredentialUnavailable Reason = "credential_unavailable" // the secret could not be had; the request is not sent
	ReasonResponseUndecodable   Reason = "response_undecodable"   // a response after an injection cannot be decoded to be scrubbed
)

// Reasons of the DNS filter (besides the policy's).
const (
	ReasonReservedName   Reason = "reserved_name"    // llm.airlock.internal, answered by the filter
	ReasonBadQuery       Reason = "bad_query"        // not one IN question of opcode QUERY, or EDNS version ≠ 0
	ReasonTypeRefused    Reason = "qtype_refused"    // ANY, zone transfers and other meta types
	ReasonLabelTooLong   Reason = "label_too_long"   // exfiltration brake: a label under a wildcard zone is too long
	ReasonUpstreamFailed Reason = "upstream_failed"  // no upstream answered: SERVFAIL
	ReasonAllowMapFailed Reason = "allow_map_failed" // the kernel allow map refused an address: SERVFAIL
)

// Reasons of the approval stage (package approval): a plain miss held while the operator
// is asked (spec.approval).
const (
	ReasonApprovalPending Reason = "approval_pending" // the operator was asked and has not answered yet
	ReasonApprovalDenied  Reason = "approval_denied"  // the operator (or the webhook) denied the ask
)

// Reasons of the usage meter (package meter): spec.usage.caps.
const (
	ReasonUsageCap    Reason = "usage_cap"    // a cap of spec.usage.caps was reached: the sandbox is frozen
	ReasonUsageThawed Reason = "usage_thawed" // a reload raised the cap, or the operator thawed the sandbox
)

// ReasonRateLimited is shared by the DNS filter (too many new names a minute under a
// wildcard) and the model API (requestsPerMinute, tokensPerMinute): one code on the wire for
// both, as it always was.
const ReasonRateLimited Reason = "rate_limited"

// Reasons of the model API (llmproxy) refusing a call.
const (
	ReasonInvalidRequest  Reason = "invalid_request"   // the body is not a valid call (400; 413 when over the size limit)
	ReasonModelNotAllowed Reason = "model_not_allowed" // the model is not in spec.llm.models (404)
	ReasonWrongAPI        Reason = "wrong_api"         // the model is served through the other provider API, untranslated (400)
	ReasonOutputCap       Reason = "output_cap"        // max_tokens over the model's maxOutputTokens (400)
	ReasonBudgetExhausted Reason = "budget_exhausted"  // a lifetime cap cannot cover the call's input (403)
	ReasonUnboundedCost   Reason = "unbounded_cost"    // the call's cost cannot be bounded under a lifetime cap (403)
)

// Reasons of kernel deny events: "kernel_" and the kernel's own deny reason (ebpf.DenyReason).
const (
	ReasonKernelNotAllowed     Reason = "kernel_not_allowed"
	ReasonKernelAllowExpired   Reason = "kernel_allow_expired"
	ReasonKernelProtocol       Reason = "kernel_protocol_not_allowed"
	ReasonKernelUDP            Reason = "kernel_udp_not_allowed"
	ReasonKernelNoTransparent6 Reason = "kernel_no_ipv6_transparent"
	ReasonKernelIdentity       Reason = "kernel_identity_direct"
)

// KernelReason is the reason code of a kernel deny event whose kernel reason (an
// ebpf.DenyReason value, such as "not_allowed") is deny: "kernel_" + deny.
func KernelReason(deny string) Reason { return Reason("kernel_" + deny) }

// Emitter names the part of airlock that emits a reason.
type Emitter string

// The emitters.
const (
	EmitPolicy      Emitter = "policy"      // a policy decision; every enforcement point passes these on
	EmitProxy       Emitter = "proxy"       // the HTTP(S) proxy's own checks and failures
	EmitCredentials Emitter = "credentials" // the credential broker
	EmitDNS         Emitter = "dns"         // the DNS filter
	EmitLLM         Emitter = "llm"         // the model API
	EmitKernel      Emitter = "kernel"      // a kernel deny event
	EmitApproval    Emitter = "approval"    // the approval stage (spec.approval)
	EmitAudit       Emitter = "audit"       // the audit log itself (an event about the trail)
	EmitUsage       Emitter = "usage"       // the usage meter (spec.usage)
)

// ReasonInfo is one entry of the catalogue.
type ReasonInfo struct {
	// Code is the reason code as it appears on the wire.
	Code Reason
	// Emitter is the part of airlock that emits it.
	Emitter Emitter
	// HTTPStatus is the status of the HTTP response that carries the reason; 0 when none
	// does (an allow, a DNS answer, a kernel event).
	HTTPStatus int
	// Sentence says, in general, what happened.
	Sentence string
	// Remedy is one line an agent or operator can act on.
	Remedy string
}

// reasonCatalogue holds every reason, in the order docs/audit.md's table lists them.
var reasonCatalogue = []ReasonInfo{
	{ReasonRuleMatched, EmitPolicy, 0, "a rule allows the request", "nothing to do"},
	{ReasonNoRule, EmitPolicy, http.StatusForbidden, "no rule names the host (or address)",
		"ask the policy owner to add the host to a rule's hosts; `airlock policy explain` shows the decision"},
	{ReasonPortNotAllowed, EmitPolicy, http.StatusForbidden, "a rule names the host but not the port",
		"use a port the rule names, or ask the policy owner to add the port (omitted ports means 80 and 443)"},
	{ReasonMethodNotAllowed, EmitPolicy, http.StatusForbidden, "host and port match, but no http rule allows the method",
		"use a method the rule's http entries allow, or ask the policy owner to add it"},
	{ReasonPathNotAllowed, EmitPolicy, http.StatusForbidden, "host, port and method match, but no http rule allows the path",
		"use a path the rule's http entries allow, or ask the policy owner to add it"},
	{ReasonInternalAddress, EmitPolicy, http.StatusForbidden, "the destination is (or resolves to) an internal address no rule names by CIDR",
		"if the destination really is internal, ask the policy owner for a rule with its range in cidrs"},
	{ReasonInvalidHost, EmitPolicy, http.StatusForbidden, "the host could not be parsed or normalised",
		"send a valid DNS name or IP literal"},
	{ReasonInvalidPath, EmitPolicy, http.StatusForbidden, "the path could not be decoded or escapes the root",
		"send a well-formed path without encoded dot-segments above the root"},
	{ReasonTCPOnly, EmitPolicy, http.StatusForbidden, "only a protocol: tcp rule matches; such traffic is not proxied",
		"connect directly (raw TCP, allowed in the kernel) instead of through the proxy"},
	{ReasonOffline, EmitPolicy, http.StatusForbidden, "the policy allows no egress at all",
		"ask the policy owner for a policy with egress rules"},
	{ReasonPublicAddress, EmitPolicy, 0, "the address is public; no rule is involved", "nothing to do"},
	{ReasonMethodOverride, EmitPolicy, http.StatusForbidden, "a rule limits methods and the request carries a method override (X-HTTP-Method-Override and kin, or a _method parameter)",
		"send the method itself, without an override header or _method parameter"},
	{ReasonAmbiguousPath, EmitPolicy, http.StatusForbidden, "a rule limits paths and the path could be read as another one (not UTF-8, a look-alike of . or /, or double-encoded)",
		"send the path in plain UTF-8, percent-encoded once"},

	{ReasonHostMismatch, EmitProxy, http.StatusForbidden, "URL host, Host header, TLS SNI or CONNECT host disagree (domain fronting)",
		"send the same name in the URL, the Host header, SNI and CONNECT"},
	{ReasonSelfAddress, EmitProxy, http.StatusForbidden, "the destination is one of the sidecar's own listeners",
		"call the sidecar's listeners directly, not through the proxy"},
	{ReasonOriginalDstMismatch, EmitProxy, http.StatusForbidden, "a transparent connection's original address is not among the addresses its name resolves to",
		"resolve the name through the sandbox's DNS filter and connect to an address it returned"},
	{ReasonOriginalDstUnknown, EmitProxy, http.StatusForbidden, "the original destination of a transparent connection could not be read",
		"use the explicit proxy (HTTPS_PROXY); see the sidecar log"},
	{ReasonIdentityUnknown, EmitProxy, http.StatusForbidden, "the kernel does not say which identity (spec.identities) made the connection or sent the DNS query (the DNS filter answers REFUSED), or its cgroup maps to none",
		"run the command with airlock sandbox exec --as NAME, NAME an identity of the policy, or without --as for the sandbox's own"},
	{ReasonSNIMissing, EmitProxy, http.StatusForbidden, "a TLS ClientHello names no server where no rule allows that",
		"connect by name with SNI, or ask the policy owner for allowMissingSNI on the rule"},
	{ReasonBadClientHello, EmitProxy, http.StatusForbidden, "TLS bytes the proxy cannot classify: a ClientHello that does not parse, other records before or among it, SSLv2, ECH",
		"use a standard TLS client that sends a plain ClientHello first"},
	{ReasonUnknownProtocol, EmitProxy, http.StatusForbidden, "a transparent connection speaks neither TLS nor HTTP",
		"speak HTTP or TLS on ports 80 and 443, or ask for a protocol: tcp rule"},
	{ReasonTunnelHTTP, EmitProxy, http.StatusForbidden, "cleartext HTTP inside a CONNECT tunnel that is not intercepted",
		"send http:// requests to the proxy in absolute form (HTTP_PROXY), not through CONNECT"},
	{ReasonTunnelLimit, EmitProxy, http.StatusTooManyRequests, "too many tunnels are open",
		"retry after Retry-After, or close idle connections; the limit is --max-tunnels"},
	{ReasonResolveFailed, EmitProxy, http.StatusBadGateway, "the destination's name did not resolve",
		"check the name, and the sidecar's resolver (--upstream-dns, dns.upstreams)"},
	{ReasonConnectFailed, EmitProxy, http.StatusBadGateway, "no checked address of the destination accepted the connection",
		"check that the destination is up and listens on that port"},
	{ReasonTimeout, EmitProxy, http.StatusGatewayTimeout, "the connect or response-header timeout passed",
		"retry later; for slow upstreams raise --response-header-timeout"},
	{ReasonUpstreamProxy, EmitProxy, http.StatusBadGateway, "the upstream (corporate) proxy airlock must go through could not be reached, did not answer in time, or refused the connection (407, 403, 5xx); nothing was sent directly instead",
		"retry later; the operator checks --upstream-proxy, its credentials and its CONNECT rules in the sidecar log"},
	{ReasonUpgradeUnsupported, EmitProxy, http.StatusBadGateway, "a protocol upgrade the proxy does not relay: anything but WebSocket (h2c included; refused with 403), CONNECT inside HTTP/2, or an upstream 101 that is not a valid WebSocket handshake (502)",
		"use plain HTTP/1.1 or HTTP/2 (over TLS), or WebSocket over HTTP/1.1"},
	{ReasonInjectionFailed, EmitProxy, http.StatusServiceUnavailable, "a credential the rule injects could not be had; nothing was sent",
		"retry later; the operator checks the secret source (Vault, env) in the sidecar log"},
	{ReasonBodyLimit, EmitProxy, http.StatusRequestEntityTooLarge, "the request body is over the limit",
		"send a smaller body; the limit is --max-request-body"},
	{ReasonNotProxyRequest, EmitProxy, http.StatusBadRequest, "an origin-form request was sent to the proxy port",
		"send absolute-form requests or CONNECT (set HTTP_PROXY/HTTPS_PROXY)"},
	{ReasonUnsupportedScheme, EmitProxy, http.StatusBadRequest, "the URL's scheme is neither http nor https",
		"use http:// or https://"},
	{ReasonAuditUnavailable, EmitProxy, http.StatusServiceUnavailable, "the audit log cannot be written (disk full, read-only), so nothing is let through unrecorded",
		"retry later; the operator frees space on the audit volume (/readyz says why); service resumes without a restart"},
	{ReasonAuditSigningUnavailable, EmitAudit, 0, "checkpoint signing by a signing service (Vault Transit) fails; the checkpoints wait unsigned and are retried, and requests go on (an event when it starts failing, one when it resumes)",
		"the operator restores Vault or the sidecar's access to the transit key (/readyz and the event say why); nothing is lost while the sidecar runs"},

	{ReasonCredentialMisuse, EmitCredentials, http.StatusForbidden, "a credential placeholder went to a destination or location its rule does not bind it to",
		"send the placeholder only where its rule injects it"},
	{ReasonCredentialCleartext, EmitCredentials, http.StatusForbidden, "a rule would inject a credential into cleartext http://",
		"use https://, or ask the policy owner to set allowCleartext"},
	{ReasonResponseUndecodable, EmitCredentials, http.StatusForbidden, "the response to a request with an injected credential is in an encoding that cannot be decoded to scrub it",
		"ask the upstream for gzip, deflate, br, zstd or identity (Accept-Encoding)"},
	{ReasonCredentialUnavailable, EmitCredentials, http.StatusServiceUnavailable, "a credential the request needs could not be had; the request was not sent",
		"retry later; the operator checks the secret source (Vault, env) in the sidecar log"},

	{ReasonReservedName, EmitDNS, 0, "a reserved name (llm.airlock.internal) answered by the filter itself", "nothing to do"},
	{ReasonBadQuery, EmitDNS, 0, "not one IN question of opcode QUERY, or an EDNS version other than 0",
		"send a standard query with one question"},
	{ReasonTypeRefused, EmitDNS, 0, "ANY, zone transfers and other meta query types are refused",
		"ask for the record type you need (A, AAAA, ...)"},
	{ReasonLabelTooLong, EmitDNS, 0, "a label under a wildcard zone is too long (exfiltration brake)",
		"name the host exactly in a rule, or ask the policy owner to raise dns.maxLabelLength"},
	{ReasonUpstreamFailed, EmitDNS, 0, "no DNS upstream answered; the filter answered SERVFAIL",
		"check --upstream-dns, dns.upstreams and /etc/resolv.conf (never the filter itself)"},
	{ReasonAllowMapFailed, EmitDNS, 0, "the kernel allow map refused an address; the filter answered SERVFAIL",
		"see the sidecar log; the allow map may be full"},

	{ReasonInvalidRequest, EmitLLM, http.StatusBadRequest, "the body is not a valid model call (413 when it is over the size limit)",
		"send a JSON object naming a model, within the body limit"},
	{ReasonModelNotAllowed, EmitLLM, http.StatusNotFound, "the model is not in spec.llm.models",
		"use one of the models the error message lists, or ask the policy owner to add it"},
	{ReasonWrongAPI, EmitLLM, http.StatusBadRequest, "the model is served through the other provider API, on an endpoint airlock does not translate (completions, embeddings, count_tokens)",
		"call the endpoint the error message names"},
	{ReasonOutputCap, EmitLLM, http.StatusBadRequest, "the output limit asked for exceeds the model's maxOutputTokens",
		"lower max_tokens"},
	{ReasonBudgetExhausted, EmitLLM, http.StatusForbidden, "a lifetime budget cap (tokens, usd) cannot cover the call's input (the output limit is lowered before a call is refused)",
		"shorten the input, or ask the operator to raise the cap (airlock usage); do not retry"},
	{ReasonUnboundedCost, EmitLLM, http.StatusForbidden, "under a lifetime budget cap, the call uses something whose cost airlock cannot bound (previous_response_id, store, file_id, server-side tools)",
		"send the context, files and images inline, and run tools on the client"},
	{ReasonRateLimited, EmitLLM, http.StatusTooManyRequests, "a rate limit was reached: new names a minute under a wildcard (DNS), or requestsPerMinute/tokensPerMinute (model API)",
		"wait as Retry-After says; for DNS name the host exactly or raise dns.wildcardQueriesPerMinute"},

	{ReasonApprovalPending, EmitApproval, http.StatusForbidden, "no rule names the host, and the operator was asked; no answer came within spec.approval.hold (DNS: REFUSED, the same in its extended error text)",
		"retry after Retry-After with the same host and port: the ask (its id is in the body's approval field) stays open for askTTL, and an answer serves the retry"},
	{ReasonApprovalDenied, EmitApproval, http.StatusForbidden, "the operator (or the approval webhook) denied the ask, or the webhook could not give a valid answer (fail closed)",
		"do not retry this host; ask the operator or the policy owner, naming the ask id in the body's approval field"},

	{ReasonUsageCap, EmitUsage, 0, "a cap of spec.usage.caps (cpuSeconds, egressBytes, usd) was reached: every process of the sandbox is frozen",
		"ask the operator to raise the cap (a policy reload thaws the sandbox) or to thaw it (airlock sandbox thaw)"},
	{ReasonUsageThawed, EmitUsage, 0, "the frozen sandbox runs again: a reload raised the cap, or the operator thawed it",
		"nothing to do"},

	{ReasonKernelNotAllowed, EmitKernel, 0, "the kernel refused a connect to an address in no allow map",
		"resolve names through the sandbox's DNS filter and connect through the proxy"},
	{ReasonKernelAllowExpired, EmitKernel, 0, "the kernel refused a connect whose allow entry expired",
		"resolve the name again before connecting"},
	{ReasonKernelProtocol, EmitKernel, 0, "the kernel refused a raw, packet, ICMP or SCTP socket",
		"use TCP or UDP sockets"},
	{ReasonKernelUDP, EmitKernel, 0, "the kernel refused UDP to anything but the DNS filter",
		"use the DNS filter for DNS and TCP for everything else (no QUIC)"},
	{ReasonKernelNoTransparent6, EmitKernel, 0, "the kernel refused IPv6 to a redirected port with no IPv6 transparent listener",
		"connect over IPv4, or use the explicit proxy"},
	{ReasonKernelIdentity, EmitKernel, 0, "the kernel refused a process of an identity (spec.identities) a connection around the sidecar: only the sidecar applies an identity's rules",
		"go through the proxy (HTTPS_PROXY) or the transparent ports; protocol: tcp rules are reachable directly"},
}

// reasonIndex maps a code to its entry.
var reasonIndex = func() map[Reason]int {
	m := make(map[Reason]int, len(reasonCatalogue))
	for i, e := range reasonCatalogue {
		m[e.Code] = i
	}
	return m
}()

// Info returns r's catalogue entry, and false when r is not in the catalogue.
func (r Reason) Info() (ReasonInfo, bool) {
	i, ok := reasonIndex[r]
	if !ok {
		return ReasonInfo{}, false
	}
	return reasonCatalogue[i], true
}

// HTTPStatus is the status of the HTTP response that carries r (0 for none, or for a code
// not in the catalogue).
func (r Reason) HTTPStatus() int {
	e, _ := r.Info()
	return e.HTTPStatus
}

// Remedy is the one-line remedy for r ("" for a code not in the catalogue).
func (r Reason) Remedy() string {
	e, _ := r.Info()
	return e.Remedy
}

// Reasons returns every catalogue entry, in catalogue order. The slice is a copy.
func Reasons() []ReasonInfo {
	return append([]ReasonInfo(nil), reasonCatalogue...)
}
