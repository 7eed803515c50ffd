package translate

import (
	"encoding/json"
	"strings"
)

// RequestOptions tune a translated request for the provider.
type RequestOptions struct {
	// MaxCompletionTokens writes the output limit of an OpenAI Chat request as
	// max_completion_tokens (OpenAI itself; its reasoning models know no other) instead of
	// max_tokens (OpenAI-compatible servers such as vLLM and Ollama).
	MaxCompletionTokens bool
}

// chatMessage is one OpenAI Chat message airlock builds.
type chatMessage struct {
	Role       string         `json:"role"`
	Content    any            `json:"content"`
	ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

// chatToolCall is one OpenAI tool call.
type chatToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function chatFunction `json:"function"`
}

// chatFunction is a tool call's function.
type chatFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// messagesKnown are the Anthropic Messages fields messagesToChat maps.
var messagesKnown = []string{"model", "messages", "system", "max_tokens", "temperature", "top_p", "stop_sequences",
	"stream", "tools", "tool_choice", "metadata"}

// messagesDefaults are fields accepted at their default value only.
var messagesDefaults = map[string][]string{"service_tier": {`"auto"`}, "thinking": {`{"type":"disabled"}`}}

// messagesWhy explains refusals.
var messagesWhy = map[string]string{
	"top_k":       "OpenAI has no top_k; leave it out",
	"thinking":    "extended thinking has no OpenAI Chat equivalent; leave it out",
	"mcp_servers": "MCP servers run at Anthropic; leave them out",
	"container":   "containers live at Anthropic; leave it out",
}

// messagesToChat maps an Anthropic Messages request to an OpenAI Chat Completions request.
// cache_control marks (a caching hint; OpenAI caches prompts on its own) are not carried.
func messagesToChat(body []byte, opts RequestOptions) ([]byte, error) {
	o, err := parseObj(body, "")
	if err != nil {
		return nil, fieldErr("(body)", "must be a JSON object")
	}
	if err := o.rejectUnknown("", messagesKnown, messagesDefaults, messagesWhy); err != nil {
		return nil, err
	}
	out := map[string]any{}
	model, _ := o.str("model", "")
	out["model"] = model
	var msgs []chatMessage
	if o.has("system") {
		text, err := textOf(o["system"], "system", "text")
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, chatMessage{Role: "system", Content: text})
	}
	turns, err := messagesTurns(o["messages"])
	if err != nil {
		return nil, err
	}
	out["messages"] = append(msgs, turns...)
	if err := messagesScalars(o, out, opts); err != nil {
		return nil, err
	}
	if o.has("tools") {
		tools, err := messagesTools(o["tools"])
		if err != nil {
			return nil, err
		}
		out["tools"] = tools
	}
	if err := messagesToolChoice(o, out); err != nil {
		return nil, err
	}
	return marshal(out), nil
}

// messagesScalars copies max_tokens, temperature, top_p, stop_sequences, stream and
// metadata.user_id.
func messagesScalars(o obj, out map[string]any, opts RequestOptions) error {
	var maxTok int64
	if err := o.decode("max_tokens", "", &maxTok, "an integer"); err != nil {
		return err
	}
	if maxTok > 0 {
		field := "max_tokens"
		if opts.MaxCompletionTokens {
			field = "max_completion_tokens"
		}
		out[field] = maxTok
	}
	for _, k := range []string{"temperature", "top_p"} {
		var f float64
		if err := o.decode(k, "", &f, "a number"); err != nil {
			return err
		}
		if o.has(k) {
			out[k] = f
		}
	}
	var stops []string
	if err := o.decode("stop_sequences", "", &stops, "an array of strings"); err != nil {
		return err
	}
	if len(stops) > 4 {
		return fieldErr("stop_sequences", "OpenAI takes at most 4 stop sequences, not %d", len(stops))
	}
	if len(stops) > 0 {
		out["stop"] = stops
	}
	var stream bool
	if err := o.decode("stream", "", &stream, "true or false"); err != nil {
		return err
	}
	if stream {
		out["stream"] = true
	}
	if o.has("metadata") {
		var md obj
		if err := o.decode("metadata", "", &md, "an object"); err != nil {
			return err
		}
		if err := md.rejectUnknown("metadata", []string{"user_id"}, nil, nil); err != nil {
			return err
		}
		if u, err := md.str("user_id", "metadata"); err != nil {
			return err
		} else if u != "" {
			out["user"] = u
		}
	}
	return nil
}

// messagesTurns maps the messages. A user turn's tool_result blocks become tool messages,
// which OpenAI wants right after the assistant's tool calls; the turn's other blocks follow
// as a user message.
func messagesTurns(raw json.RawMessage) ([]chatMessage, error) {
	var msgs []obj
	if json.Unmarshal(raw, &msgs) != nil || len(msgs) == 0 {
		return nil, fieldErr("messages", "must be a non-empty array of messages")
	}
	var out []chatMessage
	for i, m := range msgs {
		path := idx("messages", i)
		if err := m.rejectUnknown(path, []string{"role", "content"}, nil, nil); err != nil {
			return nil, err
		}
		role, _ := m.str("role", path)
		blocks, err := contentBlocks(m["content"], path+".content")
		if err != nil {
			return nil, err
		}
		var turn []chatMessage
		switch role {
		case "user":
			turn, err = userTurn(blocks, path+".content")
		case "assistant":
			turn, err = assistantTurn(blocks, path+".content")
		default:
			return nil, fieldErr(path+".role", "must be user or assistant, not %q", role)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, turn...)
	}
	return out, nil
}

// contentBlocks reads content given as a string or as an array of blocks.
func contentBlocks(raw json.RawMessage, path string) ([]obj, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []obj{{"type": json.RawMessage(`"text"`), "text": raw}}, nil
	}
	var blocks []obj
	if json.Unmarshal(raw, &blocks) != nil {
		return nil, fieldErr(path, "must be a string or an array of content blocks")
	}
	return blocks, nil
}

// userTurn maps a user turn's blocks: text, images and tool results.
func userTurn(blocks []obj, path string) ([]chatMessage, error) {
	var tools []chatMessage
	var parts []any
	for i, b := range blocks {
		bp := idx(path, i)
		t, _ := b.str("type", bp)
		switch t {
		case "text":
			text, err := b.str("text", bp)
			if err != nil {
				return nil, err
			}
			parts = append(parts, map[string]any{"type": "text", "text": text})
		case "image":
			url, err := imageURL(b, bp)
			if err != nil {
				return nil, err
			}
			parts = append(parts, map[string]any{"type": "image_url", "image_url": map[string]any{"url": url}})
		case "tool_result":
			m, err := toolResult(b, bp)
			if err != nil {
				return nil, err
			}
			tools = append(tools, m)
		default:
			return nil, fieldErr(bp+".type", "a %q block has no OpenAI Chat equivalent", t)
		}
	}
	if len(parts) == 0 {
		return tools, nil
	}
	if len(parts) == 1 {
		if p := parts[0].(map[string]any); p["type"] == "text" {
			return append(tools, chatMessage{Role: "user", Content: p["text"]}), nil
		}
	}
	return append(tools, chatMessage{Role: "user", Content: parts}), nil
}

// imageURL maps an image block's source to a URL: base64 data becomes a data: URL.
func imageURL(b obj, path string) (string, error) {
	var src struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
		URL       string `json:"url"`
	}
	if err := b.decode("source", path, &src, "an object"); err != nil {
		return "", err
	}
	switch src.Type {
	case "base64":
		return "data:" + src.MediaType + ";base64," + src.Data, nil
	case "url":
		return src.URL, nil
	}
	return "", fieldErr(path+".source.type", "an image source of type %q (a file at Anthropic) cannot be sent to OpenAI", src.Type)
}

// toolResult maps a tool_result block to a tool message. OpenAI tool messages carry text
// only, and have no error flag: an is_error result is sent with its text prefixed by
// "Error: ", as a tool would report a failure itself.
func toolResult(b obj, path string) (chatMessage, error) {
	id, err := b.str("tool_use_id", path)
	if err != nil || id == "" {
		return chatMessage{}, fieldErr(path+".tool_use_id", "a tool_result must name its tool_use_id")
	}
	text := ""
	if b.has("content") {
		if text, err = textOf(b["content"], path+".content", "text"); err != nil {
			return chatMessage{}, err
		}
	}
	var isErr bool
	if err := b.decode("is_error", path, &isErr, "true or false"); err != nil {
		return chatMessage{}, err
	}
	if isErr {
		text = "Error: " + text
	}
	return chatMessage{Role: "tool", ToolCallID: id, Content: text}, nil
}

// assistantTurn maps an assistant turn's text and tool_use blocks.
func assistantTurn(blocks []obj, path string) ([]chatMessage, error) {
	var text strings.Builder
	var calls []chatToolCall
	for i, b := range blocks {
		bp := idx(path, i)
		t, _ := b.str("type", bp)
		switch t {
		case "text":
			s, err := b.str("text", bp)
			if err != nil {
				return nil, err
			}
			text.WriteString(s)
		case "tool_use":
			var tu struct {
				ID    string          `json:"id"`
				Name  string          `json:"name"`
				Input json.RawMessage `json:"input"`
			}
			if err := json.Unmarshal(mustJSON(b), &tu); err != nil {
				return nil, fieldErr(bp, "must be a tool_use block")
			}
			if len(tu.Input) == 0 {
				tu.Input = json.RawMessage("{}")
			}
			calls = append(calls, chatToolCall{ID: tu.ID, Type: "function", Function: chatFunction{Name: tu.Name, Arguments: string(tu.Input)}})
		default:
			return nil, fieldErr(bp+".type", "a %q block has no OpenAI Chat equivalent", t)
		}
	}
	m := chatMessage{Role: "assistant", ToolCalls: calls}
	if text.Len() > 0 {
		m.Content = text.String()
	}
	return []chatMessage{m}, nil
}

// mustJSON re-encodes an object that was decoded from JSON.
func mustJSON(o obj) []byte { return marshal(o) }

// messagesTools maps client tools; Anthropic-defined tools (bash, text editor, web search,
// computer use) have no OpenAI equivalent.
func messagesTools(raw json.RawMessage) ([]any, error) {
	var tools []obj
	if json.Unmarshal(raw, &tools) != nil {
		return nil, fieldErr("tools", "must be an array of tools")
	}
	out := make([]any, 0, len(tools))
	for i, t := range tools {
		path := idx("tools", i)
		if typ, _ := t.str("type", path); typ != "" && typ != "custom" {
			return nil, fieldErr(path+".type", "the Anthropic-defined tool %q has no OpenAI equivalent", typ)
		}
		if err := t.rejectUnknown(path, []string{"type", "name", "description", "input_schema", "cache_control"}, nil, nil); err != nil {
			return nil, err
		}
		name, _ := t.str("name", path)
		desc, _ := t.str("description", path)
		fn := map[string]any{"name": name, "parameters": t["input_schema"]}
		if desc != "" {
			fn["description"] = desc
		}
		out = append(out, map[string]any{"type": "function", "function": fn})
	}
	return out, nil
}

// messagesToolChoice maps tool_choice, with disable_parallel_tool_use as
// parallel_tool_calls: false.
func messagesToolChoice(o obj, out map[string]any) error {
	if !o.has("tool_choice") {
		return nil
	}
	var tc struct {
		Type                   string `json:"type"`
		Name                   string `json:"name"`
		DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
	}
	if err := o.decode("tool_choice", "", &tc, "an object"); err != nil {
		return err
	}
	switch tc.Type {
	case "auto":
		out["tool_choice"] = "auto"
	case "any":
		out["tool_choice"] = "required"
	case "none":
		out["tool_choice"] = "none"
	case "tool":
		out["tool_choice"] = map[string]any{"type": "function", "function": map[string]any{"name": tc.Name}}
	default:
		return fieldErr("tool_choice.type", "must be auto, any, tool or none")
	}
	if tc.DisableParallelToolUse && o.has("tools") {
		out["parallel_tool_calls"] = false
	}
	return nil
}
