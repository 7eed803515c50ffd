package llmproxy

import (
	"bytes"
	"encoding/json"
)

// usage is what a provider reported for one call.
type usage struct {
	input, output int64
	known         bool
}

// wireUsage holds the usage fields of every API: OpenAI chat, completions and embeddings
// (prompt_tokens, completion_tokens), Responses and Anthropic (input_tokens, output_tokens,
// and Anthropic's prompt-cache counts, which are input too).
type wireUsage struct {
	PromptTokens             *int64 `json:"prompt_tokens"`
	CompletionTokens         *int64 `json:"completion_tokens"`
	InputTokens              *int64 `json:"input_tokens"`
	OutputTokens             *int64 `json:"output_tokens"`
	CacheCreationInputTokens int64  `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64  `json:"cache_read_input_tokens"`
}

// merge applies w over u: fields present in w replace u's.
func (u *usage) merge(w *wireUsage) {
	if w == nil {
		return
	}
	if w.PromptTokens != nil {
		u.input, u.known = *w.PromptTokens, true
	}
	if w.InputTokens != nil {
		u.input, u.known = *w.InputTokens+w.CacheCreationInputTokens+w.CacheReadInputTokens, true
	}
	if w.CompletionTokens != nil {
		u.output, u.known = *w.CompletionTokens, true
	}
	if w.OutputTokens != nil {
		u.output, u.known = *w.OutputTokens, true
	}
}

// bodyUsage reads the usage of a non-streamed answer.
func bodyUsage(body []byte) usage {
	var v struct {
		Usage *wireUsage `json:"usage"`
	}
	var u usage
	if json.Unmarshal(body, &v) == nil {
		u.merge(v.Usage)
	}
	return u
}

// eventAction is what the stream pump does with one event.
type eventAction int

const (
	forward eventAction = iota
	drop                // the usage chunk an OpenAI caller did not ask for
)

// streamMeter counts a stream's usage event by event, in the endpoint's format.
type streamMeter struct {
	ep        endpoint
	wantUsage bool
	// count counts the tokens of output text (the model's tokenizer, or bytes).
	count func(string) int64
	u     usage
	// deltas counts output events (a lower bound of output tokens: a delta carries at least
	// one token).
	deltas int64
	// last is the output tokens counted in the last event observed; pump adds it to what
	// was forwarded once the event is written.
	last int64
	// upstreamError is set when the provider sent an error event.
	upstreamError bool
	done          bool
}

var (
	dataDone = []byte("[DONE]")
	errorKey = []byte(`"error"`)
)

// chatChunk holds what airlock reads of an OpenAI chat or completions chunk.
type chatChunk struct {
	Usage   *wireUsage `json:"usage"`
	Choices []struct {
		Text  string `json:"text"`
		Delta struct {
			Content          string `json:"content"`
			Refusal          string `json:"refusal"`
			ReasoningContent string `json:"reasoning_content"`
			ToolCalls        []struct {
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
	} `json:"choices"`
	Error json.RawMessage `json:"error"`
}

// outputTokens counts one output delta: its text's tokens, at least one.
func (m *streamMeter) outputTokens(text string) int64 {
	m.deltas++
	n := int64(len(text))
	if m.count != nil {
		n = m.count(text)
	}
	return max(1, n)
}

// observe looks at one event (its "event:" name and joined "data:") and says what to do.
func (m *streamMeter) observe(name string, data []byte) eventAction {
	m.last = 0
	switch m.ep {
	case epChat, epCompletions:
		return m.observeChat(data)
	case epMessages:
		m.observeMessages(name, data)
	case epResponses:
		m.observeResponses(name, data)
	}
	if bytes.HasPrefix(data, []byte(`{"error"`)) && bytes.Contains(data, errorKey) {
		m.upstreamError = true
	}
	return forward
}

// observeChat reads an OpenAI chat or completions chunk.
func (m *streamMeter) observeChat(data []byte) eventAction {
	if bytes.Equal(bytes.TrimSpace(data), dataDone) {
		m.done = true
		return forward
	}
	var v chatChunk
	if json.Unmarshal(data, &v) != nil {
		return forward
	}
	if v.Error != nil && string(v.Error) != "null" {
		m.upstreamError = true
	}
	for _, ch := range v.Choices {
		d := ch.Delta
		text := ch.Text + d.Content + d.Refusal + d.ReasoningContent
		for _, tc := range d.ToolCalls {
			text += tc.Function.Name + tc.Function.Arguments
		}
		if text != "" {
			m.last += m.outputTokens(text)
		}
	}
	if v.Usage != nil {
		m.u.merge(v.Usage)
		if len(v.Choices) == 0 && !m.wantUsage {
			return drop
		}
	}
	return forward
}

// observeMessages reads an Anthropic Messages event.
func (m *streamMeter) observeMessages(name string, data []byte) {
	switch name {
	case "content_block_delta":
		var v struct {
			Delta struct {
				Text        string `json:"text"`
				PartialJSON string `json:"partial_json"`
				Thinking    string `json:"thinking"`
			} `json:"delta"`
		}
		_ = json.Unmarshal(data, &v)
		m.last = m.outputTokens(v.Delta.Text + v.Delta.PartialJSON + v.Delta.Thinking)
	case "message_start":
		var v struct {
			Message struct {
				Usage *wireUsage `json:"usage"`
			} `json:"message"`
		}
		if json.Unmarshal(data, &v) == nil {
			m.u.merge(v.Message.Usage)
		}
	case "message_delta":
		var v struct {
			Usage *wireUsage `json:"usage"`
		}
		if json.Unmarshal(data, &v) == nil {
			m.u.merge(v.Usage)
		}
	case "message_stop":
		m.done = true
	case "error":
		m.upstreamError = true
	}
}

// observeResponses reads a Responses event.
func (m *streamMeter) observeResponses(name string, data []byte) {
	switch name {
	case "response.output_text.delta", "response.refusal.delta", "response.function_call_arguments.delta",
		"response.reasoning_summary_text.delta", "response.reasoning_text.delta":
		var v struct {
			Delta string `json:"delta"`
		}
		_ = json.Unmarshal(data, &v)
		m.last = m.outputTokens(v.Delta)
	case "response.completed", "response.incomplete", "response.failed":
		var v struct {
			Response struct {
				Usage *wireUsage `json:"usage"`
			} `json:"response"`
		}
		if json.Unmarshal(data, &v) == nil {
			m.u.merge(v.Response.Usage)
		}
		m.done = true
	case "error":
		m.upstreamError = true
	}
}
