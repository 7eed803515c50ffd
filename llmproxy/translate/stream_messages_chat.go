package translate

import (
	"bytes"
	"encoding/json"
)

// messagesToChatStream turns Anthropic Messages events into OpenAI chat.completion.chunk
// events: message_start → a chunk with the assistant role; text deltas → content deltas;
// a tool_use block → a tool call (id and name first, then its arguments as input_json
// deltas arrive); message_delta → the finish reason; message_stop → the usage chunk
// (when asked for) and [DONE]; error → an OpenAI error chunk.
type messagesToChatStream struct {
	opts      StreamOptions
	id, model string
	// tools maps a content block index to its tool call index.
	tools map[int]int
	usage anthUsage
	done  bool
}

// anthEvent holds the fields of every Anthropic stream event airlock reads.
type anthEvent struct {
	Type         string     `json:"type"`
	Index        int        `json:"index"`
	Message      anthAnswer `json:"message"`
	ContentBlock anthBlock  `json:"content_block"`
	Delta        struct {
		Type        string  `json:"type"`
		Text        string  `json:"text"`
		PartialJSON string  `json:"partial_json"`
		StopReason  string  `json:"stop_reason"`
		StopSeq     *string `json:"stop_sequence"`
	} `json:"delta"`
	Usage *struct {
		InputTokens              *int64 `json:"input_tokens"`
		OutputTokens             *int64 `json:"output_tokens"`
		CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
		CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// mergeUsage applies a message_delta's cumulative usage.
func (e *anthEvent) mergeUsage(u *anthUsage) {
	if e.Usage == nil {
		return
	}
	for _, f := range []struct {
		src *int64
		dst *int64
	}{{e.Usage.InputTokens, &u.InputTokens}, {e.Usage.OutputTokens, &u.OutputTokens},
		{e.Usage.CacheCreationInputTokens, &u.CacheCreationInputTokens}, {e.Usage.CacheReadInputTokens, &u.CacheReadInputTokens}} {
		if f.src != nil {
			*f.dst = *f.src
		}
	}
}

// Event implements Stream.
func (s *messagesToChatStream) Event(name string, data []byte) []byte {
	if s.done {
		return nil
	}
	var e anthEvent
	if json.Unmarshal(data, &e) != nil {
		return nil // not JSON: nothing an OpenAI caller could read
	}
	if name == "" {
		name = e.Type
	}
	switch name {
	case "message_start":
		s.id, s.model, s.usage = chatID(e.Message.ID), e.Message.Model, e.Message.Usage
		return s.chunk(map[string]any{"role": "assistant", "content": ""}, nil)
	case "content_block_start":
		if e.ContentBlock.Type == "tool_use" {
			n := len(s.tools)
			s.tools[e.Index] = n
			return s.chunk(map[string]any{"tool_calls": []any{map[string]any{"index": n, "id": e.ContentBlock.ID, "type": "function",
				"function": map[string]any{"name": e.ContentBlock.Name, "arguments": e.ContentBlock.startInput()}}}}, nil)
		}
		if e.ContentBlock.Type == "text" && e.ContentBlock.Text != "" {
			return s.chunk(map[string]any{"content": e.ContentBlock.Text}, nil)
		}
	case "content_block_delta":
		return s.delta(&e)
	case "message_delta":
		e.mergeUsage(&s.usage)
		if e.Delta.StopReason != "" {
			fr := finishReason(e.Delta.StopReason)
			return s.chunk(map[string]any{}, &fr)
		}
	case "message_stop":
		s.done = true
		var out []byte
		if s.opts.IncludeUsage {
			out = sse("", marshal(map[string]any{"id": s.id, "object": "chat.completion.chunk", "created": s.opts.Created,
				"model": s.model, "choices": []any{}, "usage": s.usage.toChatUsage()}))
		}
		return append(out, sse("", []byte("[DONE]"))...)
	case "error":
		s.done = true
		return sse("", chatErrorFromAnthropic(data))
	}
	return nil
}

// delta maps a content_block_delta.
func (s *messagesToChatStream) delta(e *anthEvent) []byte {
	switch e.Delta.Type {
	case "text_delta":
		return s.chunk(map[string]any{"content": e.Delta.Text}, nil)
	case "input_json_delta":
		n, ok := s.tools[e.Index]
		if !ok || e.Delta.PartialJSON == "" {
			return nil
		}
		return s.chunk(map[string]any{"tool_calls": []any{map[string]any{"index": n,
			"function": map[string]any{"arguments": e.Delta.PartialJSON}}}}, nil)
	}
	return nil
}

// chunk is one chat.completion.chunk event with delta and finish reason.
func (s *messagesToChatStream) chunk(delta map[string]any, finish *string) []byte {
	ch := map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}
	c := map[string]any{"id": s.id, "object": "chat.completion.chunk", "created": s.opts.Created, "model": s.model,
		"choices": []any{ch}}
	if s.opts.IncludeUsage {
		c["usage"] = nil
	}
	return sse("", marshal(c))
}

// chatErrorFromAnthropic maps an Anthropic error event's data to an OpenAI error chunk.
func chatErrorFromAnthropic(data []byte) []byte {
	var e struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal(data, &e)
	if e.Error.Message == "" {
		e.Error.Message = string(bytes.TrimSpace(data))
	}
	return marshal(map[string]any{"error": map[string]any{"message": e.Error.Message, "type": openaiErrorType(e.Error.Type),
		"param": nil, "code": e.Error.Type}})
}

// startInput is the input a tool_use block starts with: "" for the empty object Anthropic
// sends before streaming the input as input_json deltas, else the input itself (a server
// that sends it whole).
func (b *anthBlock) startInput() string {
	in := string(bytes.TrimSpace(b.Input))
	if in == "" || in == "{}" || in == "null" {
		return ""
	}
	return in
}
