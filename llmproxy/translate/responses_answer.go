package translate

import (
	"encoding/json"
	"fmt"
	"strings"
)

// respItem is one output item of a Responses answer being built: a message or a function
// call.
type respItem struct {
	kind   string // "message" or "function_call"
	id     string
	callID string
	name   string
	text   strings.Builder // the message text or the call's arguments
	done   bool
}

// json renders the item as Responses shows it.
func (it *respItem) json() map[string]any {
	status := "in_progress"
	if it.done {
		status = "completed"
	}
	if it.kind == "function_call" {
		return map[string]any{"type": "function_call", "id": it.id, "call_id": it.callID, "name": it.name,
			"arguments": it.text.String(), "status": status}
	}
	content := []any{}
	if it.done {
		content = append(content, outputText(it.text.String()))
	}
	return map[string]any{"type": "message", "id": it.id, "status": status, "role": "assistant", "content": content}
}

// outputText is an output_text content part.
func outputText(text string) map[string]any {
	return map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}
}

// responseObject is a Responses "response" object. stop is the Anthropic stop reason
// ("" while in progress); max_tokens makes the response incomplete.
func responseObject(id, model string, created int64, stop string, items []*respItem, u *anthUsage) map[string]any {
	status := "in_progress"
	var incomplete any
	switch stop {
	case "":
	case "max_tokens", "model_context_window_exceeded":
		status, incomplete = "incomplete", map[string]any{"reason": "max_output_tokens"}
	default:
		status = "completed"
	}
	output := make([]any, 0, len(items))
	for _, it := range items {
		output = append(output, it.json())
	}
	var usage any
	if u != nil {
		in := u.input()
		usage = map[string]any{"input_tokens": in, "input_tokens_details": map[string]any{"cached_tokens": u.CacheReadInputTokens},
			"output_tokens": u.OutputTokens, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": in + u.OutputTokens}
	}
	return map[string]any{"id": id, "object": "response", "created_at": created, "status": status, "error": nil,
		"incomplete_details": incomplete, "instructions": nil, "max_output_tokens": nil, "model": model, "output": output,
		"parallel_tool_calls": true, "previous_response_id": nil, "reasoning": map[string]any{"effort": nil, "summary": nil},
		"store": false, "temperature": nil, "text": map[string]any{"format": map[string]any{"type": "text"}}, "tool_choice": "auto",
		"tools": []any{}, "top_p": nil, "truncation": "disabled", "usage": usage, "user": nil, "metadata": map[string]any{}}
}

// respID derives a Responses ID from the provider's message ID.
func respID(id string) string { return "resp_" + strings.TrimPrefix(id, "msg_") }

// messagesToResponsesAnswer maps an Anthropic answer to a Responses "response" object.
func messagesToResponsesAnswer(body []byte, created int64) ([]byte, error) {
	var a anthAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		return nil, fmt.Errorf("decode Anthropic answer: %w", err)
	}
	var items []*respItem
	var msg *respItem
	for i, b := range a.Content {
		switch b.Type {
		case "text":
			if msg == nil {
				msg = &respItem{kind: "message", id: fmt.Sprintf("msg_%s_%d", strings.TrimPrefix(a.ID, "msg_"), i), done: true}
				items = append(items, msg)
			}
			msg.text.WriteString(b.Text)
		case "tool_use":
			it := &respItem{kind: "function_call", id: "fc_" + b.ID, callID: b.ID, name: b.Name, done: true}
			args := string(b.Input)
			if args == "" || args == "null" {
				args = "{}"
			}
			it.text.WriteString(args)
			items = append(items, it)
		}
	}
	return marshal(responseObject(respID(a.ID), a.Model, created, a.StopReason, items, &a.Usage)), nil
}
