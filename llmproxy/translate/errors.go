package translate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
)

// ErrorBody translates a provider's error answer (status and body, in the provider's
// dialect) into the caller's dialect. A body it cannot read becomes a message naming the
// status, so the caller always gets its own error format.
func ErrorBody(provider, caller Dialect, status int, body []byte) []byte {
	switch {
	case provider == AnthropicMessages && (caller == OpenAIChat || caller == OpenAIResponses):
		return chatErrorFromAnthropic(body)
	case provider == OpenAIChat && caller == AnthropicMessages:
		var e struct {
			Error json.RawMessage `json:"error"`
		}
		if json.Unmarshal(body, &e) != nil || len(e.Error) == 0 {
			e.Error = rawJSON(map[string]any{"message": fmt.Sprintf("the provider answered %d: %s", status, bytes.TrimSpace(body))})
		}
		return anthropicErrorFromChat(e.Error, status)
	}
	return body
}

// anthropicErrorFromChat maps an OpenAI error object to an Anthropic error body; the type
// comes from status when there is one, else from the OpenAI type.
func anthropicErrorFromChat(raw json.RawMessage, status int) []byte {
	var e struct {
		Message string `json:"message"`
		Type    string `json:"type"`
	}
	if json.Unmarshal(raw, &e) != nil {
		_ = json.Unmarshal(raw, &e.Message)
	}
	typ := AnthropicErrorType(status)
	if status == 0 {
		typ = map[string]string{"invalid_request_error": "invalid_request_error", "authentication_error": "authentication_error",
			"permission_error": "permission_error", "not_found_error": "not_found_error", "rate_limit_error": "rate_limit_error",
			"requests": "rate_limit_error", "tokens": "rate_limit_error", "insufficient_quota": "permission_error"}[e.Type]
		if typ == "" {
			typ = "api_error"
		}
	}
	return marshal(map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": e.Message}})
}

// AnthropicErrorType maps an HTTP status to Anthropic's error type of that status
// ("rate_limit_error" for 429, "api_error" for a status Anthropic gives no type of its own).
func AnthropicErrorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case 529:
		return "overloaded_error"
	}
	return "api_error"
}

// openaiErrorType maps an Anthropic error type to the OpenAI type SDKs expect.
func openaiErrorType(anthropicType string) string {
	switch anthropicType {
	case "invalid_request_error", "request_too_large", "not_found_error":
		return "invalid_request_error"
	case "authentication_error":
		return "authentication_error"
	case "permission_error":
		return "permission_error"
	case "rate_limit_error":
		return "rate_limit_exceeded"
	}
	return "server_error"
}
