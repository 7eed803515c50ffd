package llmproxy

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/airlock-dev/airlock/llmproxy/translate"
	"github.com/airlock-dev/airlock/policy"
)

// Sentinel errors. Functions document which of them they may return; test with errors.Is.
var (
	// ErrLedgerCorrupt is returned by OpenLedger and ReadLedger when a ledger line other
	// than the last fails its checksum: the file was changed, and no budget can be trusted.
	ErrLedgerCorrupt = errors.New("usage ledger corrupt")
	// ErrBudgetExhausted is returned by Budget.Reserve when a lifetime cap (tokens, usd)
	// cannot cover the call's input even with its output limit lowered to one token.
	ErrBudgetExhausted = errors.New("budget exhausted")
	// ErrRateLimited is returned by Budget.Reserve when a per-minute bucket cannot hold the
	// call, or calls in flight hold what is left of a lifetime cap; the *BudgetError says
	// when to retry.
	ErrRateLimited = errors.New("rate limit reached")
	// ErrInternalAddress is returned by the provider dialer when the provider's name resolves
	// only to internal addresses and the provider does not set allowInternal.
	ErrInternalAddress = errors.New("provider resolves to an internal address")
)

// BudgetError is a refused reservation: it unwraps to ErrBudgetExhausted or ErrRateLimited.
type BudgetError struct {
	Err error
	// Cap names the cap that refused: "tokens", "usd", "requestsPerMinute", "tokensPerMinute".
	Cap string
	// Message says what was asked and what is left, for the caller.
	Message string
	// RetryAfter is when a rate-limited call may succeed; zero for a lifetime cap.
	RetryAfter time.Duration
}

func (e *BudgetError) Error() string { return e.Message }

// Unwrap returns Err.
func (e *BudgetError) Unwrap() error { return e.Err }

// family is the error and wire format a caller expects: the OpenAI one or the Anthropic one.
type family int

const (
	familyOpenAI family = iota
	familyAnthropic
)

// apiError is an error answered by airlock itself (not passed through from a provider).
type apiError struct {
	status int
	// code is the OpenAI "code" and the X-Airlock-Error header value.
	code string
	// openaiType is the OpenAI error "type"; Anthropic's is derived from status.
	openaiType string
	// param is the OpenAI "param": the request field at fault, when there is one.
	param      string
	message    string
	retryAfter time.Duration
	// deny marks a policy decision (model, budget): X-Airlock-Decision: deny.
	deny bool
	// final tells SDKs not to retry (x-should-retry: false; both official SDKs honour it).
	final bool
}

// write answers e in the family's format: OpenAI {"error":{message,type,param,code}},
// Anthropic {"type":"error","error":{type,message}}.
func (e *apiError) write(w http.ResponseWriter, f family) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Airlock-Error", e.code)
	if e.deny {
		h.Set("X-Airlock-Decision", "deny")
	}
	if e.final {
		h.Set("X-Should-Retry", "false")
	}
	if e.retryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(int64((e.retryAfter+time.Second-1)/time.Second), 10))
	}
	w.WriteHeader(e.status)
	_, _ = w.Write(e.body(f))
}

// body is the JSON error body in the family's format.
func (e *apiError) body(f family) []byte {
	var v any
	if f == familyAnthropic {
		v = map[string]any{"type": "error", "error": map[string]any{"type": translate.AnthropicErrorType(e.status), "message": e.message}}
	} else {
		var param any
		if e.param != "" {
			param = e.param
		}
		v = map[string]any{"error": map[string]any{"message": e.message, "type": e.openaiType, "param": param, "code": e.code}}
	}
	b, _ := json.Marshal(v)
	return b
}

// badRequest is a 400 (the status of policy.ReasonInvalidRequest, ReasonWrongAPI and
// ReasonOutputCap) with message msg.
func badRequest(msg string) *apiError {
	return &apiError{status: policy.ReasonInvalidRequest.HTTPStatus(), code: "invalid_request", openaiType: "invalid_request_error", message: msg}
}

// budgetAPIError maps a refused reservation to its answer and reason code: a per-minute cap
// (or a lifetime cap held by calls in flight) to 429 with Retry-After, an exhausted lifetime
// cap to 403 insufficient_quota with x-should-retry: false (a 429 would make the SDKs retry
// a budget that will not come back).
func budgetAPIError(be *BudgetError) (*apiError, policy.Reason) {
	if errors.Is(be, ErrRateLimited) {
		e := &apiError{status: policy.ReasonRateLimited.HTTPStatus(), message: be.Message, retryAfter: be.RetryAfter, deny: true,
			code: "rate_limit_exceeded", openaiType: "requests"}
		if be.Cap == "tokensPerMinute" {
			e.openaiType = "tokens"
		}
		return e, policy.ReasonRateLimited
	}
	return &apiError{status: policy.ReasonBudgetExhausted.HTTPStatus(), message: be.Message, deny: true, final: true,
		code: "insufficient_quota", openaiType: "insufficient_quota"}, policy.ReasonBudgetExhausted
}
