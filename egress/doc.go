// Package egress owns airlock's one SSRF dial guard: every connection the sidecar opens on a
// sandbox's behalf (the egress proxy's upstreams) or on its own (the model API's providers)
// goes through a Guard. The guard decides on names and enforces on addresses (Smokescreen):
// a name is resolved once; every address of the answer is classified with the one classifier
// (policy.ClassifyAddr, through the caller's Rules); an answer holding any internal address
// that no rule (or, for the model API, the provider's configuration) names is refused whole,
// since a mixed answer is what DNS rebinding looks like; the sidecar's own listeners
// (SelfAddrs) are refused in every form; and only a checked address is ever dialled, never
// the name, so nothing resolves it a second time behind the guard's back.
//
// Two dial paths share that discipline. The sandbox path is the Guard the egress proxy
// holds: the policy has decided the name, the Rules passed with each call name the internal
// ranges. The operator path (Operator, operator.go) is airlock's own connections (Vault,
// model providers, the approval webhook, audit shipping): destinations from the operator's
// configuration, not subject to the sandbox's policy, held by no component that serves the
// sandbox. Both dial through the upstream proxy (Upstream, upstream.go: the corporate proxy,
// spoken to with CONNECT to the checked address) unless its NoProxy list exempts the
// destination, and never fall back to a direct dial. Neither reads HTTP_PROXY, HTTPS_PROXY
// or NO_PROXY: the sidecar's own environment chooses no path.
//
// It does not decide which names may be reached (policy.Decide does, before the guard is
// asked) and it holds no policy: the caller passes the Rules that name internal ranges with
// each call. It does not log or audit: its denials are typed errors (*Denial, errors.go) that
// carry the decision callers turn into their deny responses.
//
// It imports policy and nothing else of ours. proxy, llmproxy and the wiring
// (internal/sidecar) import it; the wiring builds one SelfAddrs and one Guard and passes them
// to every component that dials out.
package egress
