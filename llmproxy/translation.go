package llmproxy

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/airlock-dev/airlock/llmproxy/translate"
	"github.com/airlock-dev/airlock/policy"
)

// A model is served in its provider's dialect. When a caller uses the other dialect (an
// OpenAI SDK calling a model the policy routes to Anthropic, or the reverse), the call is
// translated (package translate): the request before anything is reserved, so the budget
// bounds and the ledger settles the provider's side of the call, once, in the provider's
// tokens; the answer, the stream (event for event) and the errors on the way back.

// translation is how a translated call maps back to its caller.
type translation struct {
	caller, provider translate.Dialect
	// callerEp is the endpoint the caller called (its error and stream format).
	callerEp endpoint
	// stream translates the provider's events, for a streamed call.
	stream translate.Stream
}

// dialectOf is the translate dialect of an endpoint; ok is false for endpoints that are
// never translated (completions, embeddings, count_tokens).
func dialectOf(ep endpoint) (translate.Dialect, bool) {
	switch ep {
	case epChat:
		return translate.OpenAIChat, true
	case epMessages:
		return translate.AnthropicMessages, true
	case epResponses:
		return translate.OpenAIResponses, true
	}
	return 0, false
}

// translateCall turns c, a call in the caller's dialect, into the same call in the dialect
// of route rt's provider. It refuses with the reason to audit: ReasonWrongAPI for an
// endpoint that has no translation, ReasonInvalidRequest (naming the field) for a field
// that cannot be translated faithfully.
func translateCall(c *call, rt *route, now int64) (*call, *apiError, policy.Reason) {
	caller, ok := dialectOf(c.ep)
	provider, pep := translate.OpenAIChat, epChat
	if rt.family() == familyAnthropic {
		provider, pep = translate.AnthropicMessages, epMessages
	}
	if !ok || !translate.Supported(caller, provider) {
		return nil, wrongAPI(rt, c.ep), policy.ReasonWrongAPI
	}
	body, err := translate.Request(caller, provider, c.raw, translate.RequestOptions{MaxCompletionTokens: rt.ptype == policy.ProviderOpenAI})
	if err != nil {
		var fe *translate.FieldError
		if !errors.As(err, &fe) {
			fe = &translate.FieldError{Field: "(body)", Reason: err.Error()}
		}
		return nil, &apiError{status: http.StatusBadRequest, code: "untranslatable_field", openaiType: "invalid_request_error", param: fe.Field,
			message: fmt.Sprintf("airlock: model %q is served by provider %q in the %s dialect, and this call's %s; nothing was sent",
				rt.name, rt.provider, provider, fe.Error())}, policy.ReasonInvalidRequest
	}
	nc, aerr := parseCall(pep, body)
	if aerr != nil {
		return nil, aerr, policy.ReasonInvalidRequest
	}
	// The translator reads the provider's usage chunk and decides what the caller gets.
	nc.wantUsage = true
	nc.outField = c.outField
	nc.tr = &translation{caller: caller, provider: provider, callerEp: c.ep}
	if nc.stream {
		nc.tr.stream = translate.NewStream(provider, caller, translate.StreamOptions{IncludeUsage: c.wantUsage, Created: now})
	}
	return nc, nil, ""
}

// callerEndpoint is the endpoint the caller called: its dialect for errors and streams.
func (c *call) callerEndpoint() endpoint {
	if c.tr != nil {
		return c.tr.callerEp
	}
	return c.ep
}

// callerBody maps a provider's non-streamed answer into the caller's dialect: an error
// body (already redacted) always, a successful answer or a 502 when it cannot be read.
func (c *call) callerBody(status int, body []byte, now int64) ([]byte, *apiError) {
	if c.tr == nil {
		return body, nil
	}
	if status >= 300 {
		return translate.ErrorBody(c.tr.provider, c.tr.caller, status, body), nil
	}
	out, err := translate.Answer(c.tr.provider, c.tr.caller, body, now)
	if err != nil {
		return nil, &apiError{status: http.StatusBadGateway, code: "upstream_error", openaiType: "server_error",
			message: "airlock: the provider's answer could not be translated: " + err.Error()}
	}
	return out, nil
}

// outgoing is what the caller gets for one provider event: the event as received, or its
// translation (nothing, one or several events). data is the event's data, redacted when it
// is an error.
func (c *call) outgoing(ev event, redacted bool, redact func([]byte) []byte) []byte {
	if c.tr == nil || c.tr.stream == nil {
		if redacted {
			return redact(ev.raw)
		}
		return ev.raw
	}
	data := ev.data
	if redacted {
		data = redact(data)
	}
	return c.tr.stream.Event(ev.name, data)
}
