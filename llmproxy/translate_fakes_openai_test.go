package llmproxy

import (
	"encoding/json"
	"net/http"
	"strings"
)

// openaiFake is a strict OpenAI Chat Completions provider.
type openaiFake struct{ dialectFake }

// chatReq is the Chat Completions request schema the fake accepts.
type chatReq struct {
	Model               string           `json:"model"`
	Messages            []chatReqMessage `json:"messages"`
	MaxTokens           int64            `json:"max_tokens"`
	MaxCompletionTokens int64            `json:"max_completion_tokens"`
	Temperature         *float64         `json:"temperature"`
	TopP                *float64         `json:"top_p"`
	Stop                []string         `json:"stop"`
	Stream              bool             `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Tools []struct {
		Type     string `json:"type"`
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`
	User              string          `json:"user"`
}

type chatReqMessage struct {
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	ToolCalls []struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
	ToolCallID string `json:"tool_call_id"`
}

func (f *openaiFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path != "/v1/chat/completions":
		f.fail(w, "this fake serves only /v1/chat/completions, not %s", r.URL.Path)
		return
	case r.Header.Get("Authorization") != "Bearer "+f.key || r.Header.Get("X-Api-Key") != "":
		f.fail(w, "not OpenAI authentication")
		return
	}
	for k := range r.Header {
		if strings.HasPrefix(k, "Anthropic-") {
			f.fail(w, "an Anthropic header reached OpenAI: %s", k)
			return
		}
	}
	var req chatReq
	if !f.record(w, r, &req) {
		return
	}
	if req.Model == "" || len(req.Messages) == 0 {
		f.fail(w, "model and messages are required")
		return
	}
	ans := fakeAnswer{model: req.Model, text: "Hello from OpenAI"}
	calls := map[string]bool{}
	for i, m := range req.Messages {
		switch m.Role {
		case "system", "user":
		case "assistant":
			for _, c := range m.ToolCalls {
				calls[c.ID] = c.Type == "function" && json.Valid([]byte(c.Function.Arguments))
			}
		case "tool":
			if !calls[m.ToolCallID] || req.Messages[i-1].Role != "assistant" && req.Messages[i-1].Role != "tool" {
				f.fail(w, "messages[%d]: a tool message must answer the assistant's tool call", i)
				return
			}
			var s string
			_ = json.Unmarshal(m.Content, &s)
			ans.text = "The tool said: " + s
		default:
			f.fail(w, "messages[%d]: role %q", i, m.Role)
			return
		}
	}
	if req.Messages[len(req.Messages)-1].Role != "tool" && len(req.Tools) > 0 {
		ans.tool = req.Tools[0].Function.Name
	}
	if req.Stream {
		ans.chatStream(startStream(w), req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
		return
	}
	ans.chatJSON(w)
}

func (a fakeAnswer) chatMessage() (map[string]any, string) {
	if a.tool != "" {
		return map[string]any{"role": "assistant", "content": nil, "refusal": nil, "tool_calls": []any{map[string]any{
			"id": "call_fake1", "type": "function", "function": map[string]any{"name": a.tool, "arguments": `{"city":"Paris"}`}}}}, "tool_calls"
	}
	return map[string]any{"role": "assistant", "content": a.text, "refusal": nil}, "stop"
}

func chatUsageJSON() map[string]any {
	return map[string]any{"prompt_tokens": fakeIn, "completion_tokens": fakeOut, "total_tokens": fakeIn + fakeOut,
		"prompt_tokens_details": map[string]any{"cached_tokens": 0}}
}

func (a fakeAnswer) chatJSON(w http.ResponseWriter) {
	msg, finish := a.chatMessage()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"id": "chatcmpl-fake1", "object": "chat.completion", "created": 1700000000,
		"model": a.model, "choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish, "logprobs": nil}},
		"usage": chatUsageJSON()})
}

func (a fakeAnswer) chatStream(s sseWriter, includeUsage bool) {
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": "chatcmpl-fake1", "object": "chat.completion.chunk", "created": 1700000000, "model": a.model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}}}
	}
	s.send("", chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	finish := "stop"
	if a.tool != "" {
		finish = "tool_calls"
		s.send("", chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "id": "call_fake1", "type": "function",
			"function": map[string]any{"name": a.tool, "arguments": ""}}}}, nil))
		for _, part := range []string{`{"city":`, `"Paris"}`} {
			s.send("", chunk(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]any{"arguments": part}}}}, nil))
		}
	} else {
		for _, word := range strings.SplitAfter(a.text, " ") {
			s.send("", chunk(map[string]any{"content": word}, nil))
		}
	}
	s.send("", chunk(map[string]any{}, finish))
	if includeUsage {
		s.send("", map[string]any{"id": "chatcmpl-fake1", "object": "chat.completion.chunk", "created": 1700000000, "model": a.model,
			"choices": []any{}, "usage": chatUsageJSON()})
	}
	s.send("", []byte("[DONE]"))
}
