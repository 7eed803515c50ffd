package translate

import (
	"encoding/json"
	"fmt"
	"strings"
)

// anthAnswer is an Anthropic Messages answer (non-streamed), or the message of a stream's
// message_start.
type anthAnswer struct {
	ID           string      `json:"id"`
	Model        string      `json:"model"`
	Content      []anthBlock `json:"content"`
	StopReason   string      `json:"stop_reason"`
	StopSequence *string     `json:"stop_sequence"`
	Usage        anthUsage   `json:"usage"`
}

// anthBlock is one content block of an Anthropic answer.
type anthBlock struct {
	Type  string          `json:"type"`
	Text  string          `json:"text"`
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// anthUsage is Anthropic's usage; cache reads and writes are input too.
type anthUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
}

// input is every input token billed.
func (u anthUsage) input() int64 {
	return u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens
}

// chatUsage is OpenAI's usage object.
type chatUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	TotalTokens         int64 `json:"total_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details,omitempty"`
}

// toChatUsage maps Anthropic usage to OpenAI's: cache reads are OpenAI's cached tokens.
func (u anthUsage) toChatUsage() chatUsage {
	in := u.input()
	cu := chatUsage{PromptTokens: in, CompletionTokens: u.OutputTokens, TotalTokens: in + u.OutputTokens}
	cu.PromptTokensDetails = &struct {
		CachedTokens int64 `json:"cached_tokens"`
	}{u.CacheReadInputTokens}
	return cu
}

// toAnthUsage maps OpenAI usage to Anthropic's: cached tokens are cache reads.
func (u chatUsage) toAnthUsage() map[string]int64 {
	cached := int64(0)
	if u.PromptTokensDetails != nil {
		cached = min(u.PromptTokensDetails.CachedTokens, u.PromptTokens)
	}
	return map[string]int64{"input_tokens": u.PromptTokens - cached, "output_tokens": u.CompletionTokens,
		"cache_creation_input_tokens": 0, "cache_read_input_tokens": cached}
}

// finishReason maps an Anthropic stop_reason to an OpenAI finish_reason.
func finishReason(stop string) string {
	switch stop {
	case "max_tokens", "model_context_window_exceeded":
		return "length"
	case "tool_use":
		return "tool_calls"
	case "refusal":
		return "content_filter"
	}
	return "stop" // end_turn, stop_sequence, pause_turn
}

// stopReason maps an OpenAI finish_reason to an Anthropic stop_reason. OpenAI does not say
// which stop sequence ended a call, so "stop" is end_turn.
func stopReason(finish string) string {
	switch finish {
	case "length":
		return "max_tokens"
	case "tool_calls", "function_call":
		return "tool_use"
	case "content_filter":
		return "refusal"
	}
	return "end_turn"
}

// messagesToChatAnswer maps an Anthropic answer to an OpenAI chat.completion; created is
// the Unix time to report.
func messagesToChatAnswer(body []byte, created int64) ([]byte, error) {
	var a anthAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		return nil, fmt.Errorf("decode Anthropic answer: %w", err)
	}
	var text strings.Builder
	var calls []chatToolCall
	for _, b := range a.Content {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "tool_use":
			args := string(b.Input)
			if args == "" || args == "null" {
				args = "{}"
			}
			calls = append(calls, chatToolCall{ID: b.ID, Type: "function", Function: chatFunction{Name: b.Name, Arguments: args}})
		}
	}
	msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil}
	if text.Len() > 0 || len(calls) == 0 {
		msg["content"] = text.String()
	}
	if len(calls) > 0 {
		msg["tool_calls"] = calls
	}
	out := map[string]any{"id": chatID(a.ID), "object": "chat.completion", "created": created, "model": a.Model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finishReason(a.StopReason), "logprobs": nil}},
		"usage":   a.Usage.toChatUsage()}
	return marshal(out), nil
}

// chatID derives an OpenAI-looking completion ID from the provider's message ID.
func chatID(id string) string { return "chatcmpl-" + strings.TrimPrefix(id, "msg_") }

// msgID derives an Anthropic-looking message ID from the provider's completion ID.
func msgID(id string) string { return "msg_" + strings.TrimPrefix(id, "chatcmpl-") }

// chatAnswer is an OpenAI chat.completion.
type chatAnswer struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Content   *string        `json:"content"`
			Refusal   *string        `json:"refusal"`
			ToolCalls []chatToolCall `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage chatUsage `json:"usage"`
}

// chatToMessagesAnswer maps an OpenAI chat.completion to an Anthropic message.
func chatToMessagesAnswer(body []byte) ([]byte, error) {
	var a chatAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		return nil, fmt.Errorf("decode OpenAI answer: %w", err)
	}
	if len(a.Choices) == 0 {
		return nil, fmt.Errorf("decode OpenAI answer: no choices")
	}
	ch := a.Choices[0]
	content := []block{}
	if m := ch.Message; m.Content != nil && *m.Content != "" {
		content = append(content, block{"type": "text", "text": *m.Content})
	} else if m.Refusal != nil && *m.Refusal != "" {
		content = append(content, block{"type": "text", "text": *m.Refusal})
		ch.FinishReason = "content_filter"
	}
	for _, c := range ch.Message.ToolCalls {
		input := json.RawMessage(c.Function.Arguments)
		if !json.Valid(input) || strings.TrimSpace(c.Function.Arguments) == "" {
			input = json.RawMessage("{}")
		}
		content = append(content, block{"type": "tool_use", "id": c.ID, "name": c.Function.Name, "input": input})
	}
	out := map[string]any{"id": msgID(a.ID), "type": "message", "role": "assistant", "model": a.Model,
		"content": content, "stop_reason": stopReason(ch.FinishReason), "stop_sequence": nil, "usage": a.Usage.toAnthUsage()}
	return marshal(out), nil
}
