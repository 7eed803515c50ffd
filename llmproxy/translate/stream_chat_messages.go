package translate

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// chatToMessagesStream turns OpenAI chat.completion.chunk events into Anthropic Messages
// events: the first chunk → message_start; content deltas → a text block's text_delta
// events; a tool call → a tool_use block, its arguments as input_json_delta events; [DONE]
// → content_block_stop, message_delta (stop reason and usage, which OpenAI reports in its
// last chunk) and message_stop; an error chunk → an Anthropic error event.
type chatToMessagesStream struct {
	started, done bool
	id, model     string
	// open is the Anthropic index of the open content block, -1 (or unset before the first
	// block: started with next 0) when none is; openText says whether it is a text block.
	open     int
	openText bool
	next     int
	// tools maps an OpenAI tool call index to its Anthropic block index; ids to the call ID
	// it started with (some OpenAI-compatible servers send every call at index 0).
	tools  map[int]int
	ids    map[int]string
	finish string
	usage  chatUsage
}

// chatChunk holds what airlock reads of an OpenAI chat.completion.chunk.
type chatChunk struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		Delta struct {
			Content   string `json:"content"`
			Refusal   string `json:"refusal"`
			ToolCalls []struct {
				Index    int    `json:"index"`
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *chatUsage      `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// Event implements Stream.
func (s *chatToMessagesStream) Event(_ string, data []byte) []byte {
	if s.done {
		return nil
	}
	if bytes.Equal(bytes.TrimSpace(data), []byte("[DONE]")) {
		s.done = true
		out := s.start()
		out = append(out, s.closeBlock()...)
		delta := map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stopReason(s.finish), "stop_sequence": nil},
			"usage": s.usage.toAnthUsage()}
		out = append(out, sse("message_delta", marshal(delta))...)
		return append(out, sse("message_stop", []byte(`{"type":"message_stop"}`))...)
	}
	var c chatChunk
	if json.Unmarshal(data, &c) != nil {
		return nil
	}
	if len(c.Error) > 0 && string(c.Error) != "null" {
		s.done = true
		return sse("error", anthropicErrorFromChat(c.Error, 0))
	}
	if s.id == "" {
		s.id, s.model = msgID(c.ID), c.Model
	}
	out := s.start()
	if c.Usage != nil {
		s.usage = *c.Usage
	}
	for _, ch := range c.Choices {
		if text := ch.Delta.Content + ch.Delta.Refusal; text != "" {
			if !s.openText {
				out = append(out, s.closeBlock()...)
				out = append(out, s.startBlock(block{"type": "text", "text": ""})...)
				s.openText = true
			}
			out = append(out, s.blockDelta(s.open, block{"type": "text_delta", "text": text})...)
		}
		for _, tc := range ch.Delta.ToolCalls {
			i, ok := s.tools[tc.Index]
			if !ok || (tc.ID != "" && tc.ID != s.ids[tc.Index]) {
				out = append(out, s.closeBlock()...)
				id := tc.ID
				if id == "" {
					id = fmt.Sprintf("toolu_airlock_%d", tc.Index)
				}
				i = s.next
				s.tools[tc.Index], s.ids[tc.Index] = i, id
				out = append(out, s.startBlock(block{"type": "tool_use", "id": id, "name": tc.Function.Name, "input": block{}})...)
			}
			if tc.Function.Arguments != "" {
				out = append(out, s.blockDelta(i, block{"type": "input_json_delta", "partial_json": tc.Function.Arguments})...)
			}
		}
		if ch.FinishReason != "" {
			s.finish = ch.FinishReason
		}
	}
	return out
}

// start returns message_start the first time.
func (s *chatToMessagesStream) start() []byte {
	if s.started {
		return nil
	}
	s.started, s.open = true, -1
	if s.id == "" {
		s.id = "msg_airlock"
	}
	msg := map[string]any{"id": s.id, "type": "message", "role": "assistant", "model": s.model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]int64{"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}
	return sse("message_start", marshal(map[string]any{"type": "message_start", "message": msg}))
}

// startBlock opens the next content block.
func (s *chatToMessagesStream) startBlock(b block) []byte {
	s.open = s.next
	s.next++
	return sse("content_block_start", marshal(map[string]any{"type": "content_block_start", "index": s.open, "content_block": b}))
}

// blockDelta is a content_block_delta of block i.
func (s *chatToMessagesStream) blockDelta(i int, d block) []byte {
	return sse("content_block_delta", marshal(map[string]any{"type": "content_block_delta", "index": i, "delta": d}))
}

// closeBlock closes the open block, if any.
func (s *chatToMessagesStream) closeBlock() []byte {
	if s.open < 0 {
		return nil
	}
	i := s.open
	s.open, s.openText = -1, false
	return sse("content_block_stop", marshal(map[string]any{"type": "content_block_stop", "index": i}))
}
