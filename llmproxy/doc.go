// Package llmproxy owns the sandbox's local model API: OpenAI-compatible (/v1/chat/completions,
// /v1/completions, /v1/embeddings, /v1/responses, /v1/models) and Anthropic-compatible
// (/v1/messages, /v1/messages/count_tokens) endpoints that route each call by its model to the
// provider the policy names, with the provider key added outside the sandbox, the model
// allowlist and the sandbox's budget enforced before anything is sent, streams passed through
// event by event, and every call's real usage settled in an append-only ledger.
//
// What it does not own: where keys come from (the Keys interface; internal/sidecar passes the
// credential broker or a development source), the policy (policy.Store), listeners other
// than its own, the audit log's sink. It imports policy, audit, egress and its own translate
// subpackage, and nothing else of ours;
// internal/sidecar wires it (cmd/airlock reads its ledger for airlock usage). proxy and
// dnsfilter never import it, nor it them.
//
// The path of one call (handler.go): parse the request (request.go) → find the model's route
// (routes.go) → bound its cost (cost.go, images.go, tokens.go) and reserve that in the budget
// (budget.go), lowering the output limit to what is left, and in the ledger (ledger.go)
// → fetch the provider key → dispatch with retries and fallbacks before the first byte
// (upstream.go) → pass the answer through, counting usage (stream.go, usage.go) → settle the
// reservation to the real usage → one audit event and metrics.
//
// A call in one provider's dialect to a model routed to the other provider (OpenAI Chat
// Completions or Responses to Anthropic, Anthropic Messages to OpenAI) is translated right
// after routing (translation.go, with the mapping itself in the translate subpackage): every
// later stage, the budget and the ledger included, sees the provider's side of the call, and
// the answer, stream and errors are mapped back to the caller's dialect on the way out.
package llmproxy
