// Package translate owns the mapping between the model APIs' dialects: OpenAI Chat
// Completions ⇄ Anthropic Messages (requests, answers, server-sent event streams and errors),
// and OpenAI Responses → Anthropic Messages for the stateless subset of Responses.
//
// It is pure: bytes in, bytes out, no I/O, no clock, no policy. llmproxy calls it when a
// model the policy routes to one provider is called through the other provider's API; the
// budget, the ledger and the audit stay in llmproxy and count the provider's side of the call.
//
// A request field that cannot be carried over faithfully is never dropped: Request returns a
// *FieldError naming it, which llmproxy answers with a 400 in the caller's dialect. The
// package imports nothing of ours; only llmproxy imports it.
//
// One file per job: chat_request.go and messages_request.go map requests each way,
// responses_request.go maps a Responses request, answer.go and responses_answer.go map the
// answers, stream_*.go translate streams event for event, errors.go maps error bodies.
package translate

import "fmt"

// Dialect is one wire format of a model API.
type Dialect int

// The dialects.
const (
	// OpenAIChat is POST /v1/chat/completions.
	OpenAIChat Dialect = iota
	// AnthropicMessages is POST /v1/messages.
	AnthropicMessages
	// OpenAIResponses is POST /v1/responses (as a caller's dialect only).
	OpenAIResponses
)

// String names the dialect for messages and headers.
func (d Dialect) String() string {
	switch d {
	case OpenAIChat:
		return "openai-chat"
	case AnthropicMessages:
		return "anthropic-messages"
	case OpenAIResponses:
		return "openai-responses"
	}
	return fmt.Sprintf("dialect(%d)", int(d))
}

// Supported reports whether calls in dialect caller can be translated for a provider that
// speaks provider.
func Supported(caller, provider Dialect) bool {
	switch {
	case caller == OpenAIChat && provider == AnthropicMessages,
		caller == AnthropicMessages && provider == OpenAIChat,
		caller == OpenAIResponses && provider == AnthropicMessages:
		return true
	}
	return false
}

// FieldError is a request field that cannot be translated faithfully.
type FieldError struct {
	// Field is the field's path in the caller's request ("messages[2].name", "n").
	Field string
	// Reason says why, and what to send instead where there is a way.
	Reason string
}

// Error names the field and the reason.
func (e *FieldError) Error() string {
	return fmt.Sprintf("field %q cannot be translated: %s", e.Field, e.Reason)
}

// fieldErr builds a *FieldError.
func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
