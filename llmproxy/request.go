package llmproxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/airlock-dev/airlock/policy"
)

// endpoint is one model-call API of the listener.
type endpoint int

const (
	epChat endpoint = iota
	epCompletions
	epEmbeddings
	epResponses
	epMessages
	epCountTokens
)

// path is the endpoint's API path, the same at airlock and at the provider.
func (e endpoint) path() string {
	return [...]string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses",
		"/v1/messages", "/v1/messages/count_tokens"}[e]
}

// family is the wire format of the endpoint.
func (e endpoint) family() family {
	if e == epMessages || e == epCountTokens {
		return familyAnthropic
	}
	return familyOpenAI
}

// call is one parsed model call.
type call struct {
	ep   endpoint
	body map[string]json.RawMessage

	model  string
	stream bool
	// wantUsage is whether an OpenAI streaming caller asked for the usage chunk itself
	// (stream_options.include_usage); airlock always asks upstream and drops it otherwise.
	wantUsage bool
	// maxOut is the output limit the caller sent (0: none), the largest of its limit fields
	// (limits.go); outField names that field. stdOut is set when one of the endpoint's
	// standard output fields (outputFields) was among them.
	maxOut   int64
	outField string
	stdOut   bool
	// limits are the fields that set the output (limits.go), clamped to the reservation.
	limits []limitRef
	// clamped is set when the budget lowered the output limit below the caller's.
	clamped bool
	// choices is the number of outputs asked for (n, best_of and their kin: limits.go); 0
	// when the caller did not say (one).
	choices int64
	// inputBytes is the request body's size, the input reservation (see reserveTokens).
	inputBytes int64
	// raw is the request body as received.
	raw []byte
	// tr is set on a call translated from the caller's dialect (translation.go).
	tr *translation
}

// parseCall decodes a call's JSON body. Only the fields airlock acts on are interpreted; the
// rest passes through unchanged.
func parseCall(ep endpoint, raw []byte) (*call, *apiError) {
	c := &call{ep: ep, inputBytes: int64(len(raw)), raw: raw}
	if err := json.Unmarshal(raw, &c.body); err != nil || c.body == nil {
		return nil, badRequest("the request body must be a JSON object")
	}
	if m, ok := c.body["model"]; !ok || json.Unmarshal(m, &c.model) != nil || c.model == "" {
		return nil, badRequest("the request must name a model (a string \"model\" field)")
	}
	if s, ok := c.body["stream"]; ok && json.Unmarshal(s, &c.stream) != nil {
		return nil, badRequest("\"stream\" must be true or false")
	}
	if ep == epCountTokens || ep == epEmbeddings {
		c.stream = false
	}
	if so, ok := c.body["stream_options"]; ok && c.stream {
		var opts struct {
			IncludeUsage bool `json:"include_usage"`
		}
		if json.Unmarshal(so, &opts) != nil {
			return nil, badRequest("\"stream_options\" must be an object")
		}
		c.wantUsage = opts.IncludeUsage
	}
	if aerr := c.scanLimits(); aerr != nil {
		return nil, aerr
	}
	return c, nil
}

// outputFields lists the fields that cap a call's output tokens, per endpoint.
func outputFields(ep endpoint) []string {
	switch ep {
	case epChat:
		return []string{"max_completion_tokens", "max_tokens"}
	case epCompletions, epMessages:
		return []string{"max_tokens"}
	case epResponses:
		return []string{"max_output_tokens"}
	}
	return nil
}

// completionsDefaultMaxTokens is the legacy completions API's own default output limit,
// which airlock reserves and sends when the caller sets none.
const completionsDefaultMaxTokens = 16

// outputLimit returns the output tokens to reserve for the call on route r and whether the
// limit must be written into the upstream request (the caller set no standard output field:
// a server that does not know a vendor field the caller used would otherwise apply its own
// default). A caller limit above the model's cap is refused.
func (c *call) outputLimit(r *route) (int64, bool, *apiError) {
	switch {
	case c.ep == epEmbeddings || c.ep == epCountTokens:
		return 0, false, nil
	case c.maxOut > r.maxOut:
		return 0, false, badRequest(fmt.Sprintf("%s %d exceeds the cap of %d output tokens for model %q (llm.models[].maxOutputTokens); lower it",
			c.outField, c.maxOut, r.maxOut, r.name))
	case c.maxOut > 0:
		return c.maxOut, !c.stdOut, nil
	case c.ep == epCompletions:
		return min(completionsDefaultMaxTokens, r.maxOut), true, nil
	}
	return r.maxOut, true, nil
}

// upstreamBody is the body sent to route r: the model renamed, the output limit written in
// when the caller set no standard field, every field that sets the output lowered to limit
// (limits.go), and OpenAI streams asked to report usage.
func (c *call) upstreamBody(r *route, limit int64, inject bool) []byte {
	b := make(map[string]json.RawMessage, len(c.body)+2)
	for k, v := range c.body {
		b[k] = v
	}
	b["model"], _ = json.Marshal(r.upstream)
	if limit > 0 {
		// Every field that sets the output, in any spelling or container, is lowered to what
		// was reserved (the budget may have lowered it below the caller's: c.clamped).
		c.clampLimits(b, limit)
	}
	if inject {
		field := outputFields(c.ep)[0]
		if c.ep == epChat && r.ptype != policy.ProviderOpenAI {
			// OpenAI-compatible servers (vLLM, Ollama) know max_tokens; OpenAI's reasoning
			// models know only max_completion_tokens.
			field = "max_tokens"
		}
		b[field] = json.RawMessage(strconv.FormatInt(limit, 10))
	}
	if c.stream && (c.ep == epChat || c.ep == epCompletions) {
		opts := map[string]json.RawMessage{}
		if so, ok := c.body["stream_options"]; ok {
			_ = json.Unmarshal(so, &opts)
		}
		opts["include_usage"] = json.RawMessage("true")
		b["stream_options"], _ = json.Marshal(opts)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(b)
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// promptText returns the prompt part of the body (messages, prompt, input, system) for an
// audit event, as raw JSON.
func (c *call) promptText() string {
	var buf bytes.Buffer
	for _, k := range []string{"system", "instructions", "messages", "prompt", "input"} {
		if v, ok := c.body[k]; ok {
			if buf.Len() > 0 {
				buf.WriteByte(' ')
			}
			buf.WriteString(k + "=")
			buf.Write(v)
		}
	}
	return buf.String()
}
