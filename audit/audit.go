// Package audit owns airlock's audit trail: the Event every enforcement point records (one per
// request, connection, DNS query or model call) and the Logger that writes events as JSON lines.
//
// An Event never carries a secret value: it holds names (rule, secret names), destinations and
// counts only. Every package that decides something (proxy, dnsfilter, llmproxy, ebpf) imports
// this one; audit imports nothing of ours.
//
// Events are encoded by this package (encode.go), not through logrus: an audit line is written
// for every request, so it is on the hot path, and its field names are a contract that must
// not depend on a logging library's conventions. The lines carry "level":"info" and
// "msg":"audit" so that they sit among the sidecar's logrus JSON lines on stderr and can be
// told apart from them. encode.go is the only encoder of an Event: Logger.Recent decodes the
// lines it kept rather than encoding events a second way.
//
// Callers hold a Sink (sink.go), the seam for durability and signing, not a *Logger; those
// that answer a request write its event first with Commit or CommitDenial.
//
// The package also owns the audit trail's integrity: the hash chain every line carries (seq,
// prev), the file's rotation (file.go), the Ed25519-signed checkpoints written to a second
// file (checkpoint.go), the summaries that fold a flood of denials into counted events
// (flood.go), Verify, which checks files and checkpoints and names the first line changed,
// removed, reordered or truncated (verify.go), and evidence packs (pack.go).
package audit

import "time"

// Kind says which enforcement point produced an event.
type Kind string

// The kinds of the contract.
const (
	KindHTTP       Kind = "http"       // one HTTP request (absolute-form, or inside an intercepted tunnel)
	KindConnect    Kind = "connect"    // one CONNECT tunnel or transparent connection
	KindDNS        Kind = "dns"        // one DNS query
	KindLLM        Kind = "llm"        // one model call
	KindCredential Kind = "credential" // a credential injection, failure or misuse
	KindPolicy     Kind = "policy"     // a policy load or reload
	KindAudit      Kind = "audit"      // the audit log's own events (an outage it recovered from)
	KindApproval   Kind = "approval"   // an ask to the operator, a grant, a denial, an expiry or a revocation (package approval)
	KindUsage      Kind = "usage"      // a usage cap froze the sandbox, or a raised cap or the operator thawed it (package meter)
)

// Kinds lists every kind of the contract, for renderings that must place each one.
var Kinds = []Kind{KindHTTP, KindConnect, KindDNS, KindLLM, KindCredential, KindPolicy, KindAudit, KindApproval, KindUsage}

// Decision values of the contract.
const (
	DecisionAllow  = "allow"
	DecisionDeny   = "deny"
	DecisionReport = "report" // report mode: allowed, but enforce would have denied
)

// Event is one audit record. Field names are the contract: scripts and SIEM rules rely on them.
// Zero-valued optional fields are left out of the JSON line.
type Event struct {
	// Time is when the decision was made; Logger.Log fills it when zero.
	Time time.Time
	// Sandbox is the sandbox name (airlock run --sandbox); Logger.Log fills it when empty.
	Sandbox string
	// Kind is the enforcement point.
	Kind Kind
	// Decision is "allow", "deny" or "report".
	Decision string
	// Rule is the policy rule that allowed (or came closest to) the request.
	Rule string
	// Reason is the policy reason code (e.g. "no_rule", "internal_address").
	Reason string
	// Detail is the human-readable reason.
	Detail string
	// Destination is host:port as the client asked for it.
	Destination string
	// Addr is the address actually dialled (ip:port), when one was.
	Addr string
	// Method and Path are set for HTTP events. Path excludes the query string.
	Method string
	Path   string
	// Status is the HTTP status returned to the client, when there is one.
	Status int
	// BytesUp and BytesDown count bytes sent upstream and returned to the client.
	BytesUp   int64
	BytesDown int64
	// Duration is how long the request or connection lasted.
	Duration time.Duration
	// Secrets names (never values) the credentials injected into the request.
	Secrets []string
	// Client is the sandbox-side address of the connection.
	Client string
	// Policy is the policy name in force.
	Policy string
	// Error describes a failure (resolve, dial, timeout) in words without secret values.
	Error string
	// Model and Provider are set for model calls (kind llm): the model the sandbox asked
	// for and the provider that answered.
	Model    string
	Provider string
	// InputTokens and OutputTokens are a model call's usage; CostUSD its cost from the
	// policy's price table.
	InputTokens  int64
	OutputTokens int64
	CostUSD      float64
	// OutputClamped is the output limit per choice a model call was sent with when the
	// budget lowered the caller's to fit (0: not lowered).
	OutputClamped int64
	// Prompt is a model call's prompt text, redacted, only when the policy sets
	// llm.logPrompts.
	Prompt string
	// RequestID identifies one HTTP request: the client's X-Request-Id, else one the proxy
	// made up and echoed back in the response's X-Request-Id header.
	RequestID string
	// Phase is PhaseDecision for the event written before a request is answered or
	// forwarded; "" for the event that records how it ended (the canonical line).
	Phase string
	// Count is how many denials a flood summary stands for (0 and 1: just this one).
	Count int64
}

// PhaseDecision marks the event an HTTP request's decision is recorded in before the
// request goes upstream; the request's canonical event (Phase "") follows when it ends.
const PhaseDecision = "decision"
