package translate

import (
	"encoding/json"
	"strings"
)

// block is one Anthropic content block, built as a map so that it encodes exactly the
// fields the API defines.
type block = map[string]any

// anthMessage is one Anthropic message.
type anthMessage struct {
	Role    string  `json:"role"`
	Content []block `json:"content"`
}

// anthTool is one Anthropic client tool.
type anthTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// anthRequest is the Anthropic Messages request airlock builds.
type anthRequest struct {
	Model         string        `json:"model"`
	System        []block       `json:"system,omitempty"`
	Messages      []anthMessage `json:"messages"`
	MaxTokens     int64         `json:"max_tokens,omitempty"`
	Temperature   *float64      `json:"temperature,omitempty"`
	TopP          *float64      `json:"top_p,omitempty"`
	StopSequences []string      `json:"stop_sequences,omitempty"`
	Stream        bool          `json:"stream,omitempty"`
	Tools         []anthTool    `json:"tools,omitempty"`
	ToolChoice    block         `json:"tool_choice,omitempty"`
	Metadata      *anthMetadata `json:"metadata,omitempty"`
}

// anthMetadata is the Anthropic request metadata.
type anthMetadata struct {
	UserID string `json:"user_id"`
}

// chatKnown are the Chat Completions fields chatToMessages maps.
var chatKnown = []string{"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p",
	"stop", "stream", "stream_options", "tools", "tool_choice", "parallel_tool_calls", "user"}

// chatDefaults are fields accepted at their default value only.
var chatDefaults = map[string][]string{
	"n": {"1"}, "presence_penalty": {"0", "0.0"}, "frequency_penalty": {"0", "0.0"}, "logprobs": {"false"},
	"store": {"false"}, "logit_bias": {"{}"}, "service_tier": {`"auto"`}, "top_logprobs": {"0"},
}

// chatWhy explains the refusals that have a better reason than "no equivalent".
var chatWhy = map[string]string{
	"n":               "Anthropic returns one choice per call; send n: 1 or leave it out",
	"logprobs":        "Anthropic does not return log probabilities",
	"top_logprobs":    "Anthropic does not return log probabilities",
	"store":           "stored completions live at OpenAI; leave it out or send false",
	"response_format": "Anthropic has no JSON mode here; ask for JSON in the prompt or use a tool",
	"audio":           "Anthropic has no audio output",
	"modalities":      "Anthropic answers text only",
}

// chatToMessages maps an OpenAI Chat Completions request to an Anthropic Messages request.
func chatToMessages(body []byte) ([]byte, error) {
	o, err := parseObj(body, "")
	if err != nil {
		return nil, fieldErr("(body)", "must be a JSON object")
	}
	if rf, ok := o["response_format"]; ok && isTextFormat(rf) {
		delete(o, "response_format")
	}
	if err := o.rejectUnknown("", chatKnown, chatDefaults, chatWhy); err != nil {
		return nil, err
	}
	var req anthRequest
	req.Model, _ = o.str("model", "")
	if req.System, req.Messages, err = chatMessages(o["messages"]); err != nil {
		return nil, err
	}
	var maxTok, maxComp int64
	if err := o.decode("max_tokens", "", &maxTok, "an integer"); err != nil {
		return nil, err
	}
	if err := o.decode("max_completion_tokens", "", &maxComp, "an integer"); err != nil {
		return nil, err
	}
	req.MaxTokens = max(maxTok, maxComp)
	if err := samplingParams(o, &req); err != nil {
		return nil, err
	}
	if req.StopSequences, err = stopSequences(o); err != nil {
		return nil, err
	}
	if err := o.decode("stream", "", &req.Stream, "true or false"); err != nil {
		return nil, err
	}
	if req.Tools, err = chatTools(o["tools"], o.has("tools")); err != nil {
		return nil, err
	}
	if req.ToolChoice, err = chatToolChoice(o); err != nil {
		return nil, err
	}
	if user, err := o.str("user", ""); err != nil {
		return nil, err
	} else if user != "" {
		req.Metadata = &anthMetadata{UserID: user}
	}
	return marshal(req), nil
}

// isTextFormat reports whether a response_format is {"type":"text"}, the default.
func isTextFormat(raw json.RawMessage) bool {
	var rf struct {
		Type string `json:"type"`
	}
	return json.Unmarshal(raw, &rf) == nil && rf.Type == "text"
}

// samplingParams copies temperature and top_p. OpenAI's temperature runs to 2, Anthropic's
// to 1; above 1 there is no faithful value.
func samplingParams(o obj, req *anthRequest) error {
	if o.has("temperature") {
		var t float64
		if err := o.decode("temperature", "", &t, "a number"); err != nil {
			return err
		}
		if t > 1 {
			return fieldErr("temperature", "Anthropic's temperature runs from 0 to 1; %v has no equivalent", t)
		}
		req.Temperature = &t
	}
	if o.has("top_p") {
		var p float64
		if err := o.decode("top_p", "", &p, "a number"); err != nil {
			return err
		}
		req.TopP = &p
	}
	return nil
}

// stopSequences reads "stop": a string or an array of strings.
func stopSequences(o obj) ([]string, error) {
	if !o.has("stop") {
		return nil, nil
	}
	var one string
	if json.Unmarshal(o["stop"], &one) == nil {
		return []string{one}, nil
	}
	var many []string
	if err := o.decode("stop", "", &many, "a string or an array of strings"); err != nil {
		return nil, err
	}
	return many, nil
}

// chatMessages maps the messages: leading system and developer messages become the system
// prompt, tool messages become tool_result blocks of a user turn, and consecutive turns of
// one role are merged (Anthropic alternates user and assistant).
func chatMessages(raw json.RawMessage) ([]block, []anthMessage, error) {
	var msgs []obj
	if json.Unmarshal(raw, &msgs) != nil || len(msgs) == 0 {
		return nil, nil, fieldErr("messages", "must be a non-empty array of messages")
	}
	var system []block
	var out []anthMessage
	for i, m := range msgs {
		path := idx("messages", i)
		if err := m.rejectUnknown(path, []string{"role", "content", "tool_calls", "tool_call_id", "refusal"}, nil,
			map[string]string{"name": "Anthropic messages carry no participant name", "function_call": "the legacy function_call is not translated; use tool_calls"}); err != nil {
			return nil, nil, err
		}
		role, err := m.str("role", path)
		if err != nil {
			return nil, nil, err
		}
		var blocks []block
		switch role {
		case "system", "developer":
			if len(out) > 0 {
				return nil, nil, fieldErr(path+".role", "a %s message after the first user or assistant message has no place in Anthropic's one system prompt; put system messages first", role)
			}
			text, err := textOf(m["content"], path+".content", "text")
			if err != nil {
				return nil, nil, err
			}
			system = append(system, block{"type": "text", "text": text})
			continue
		case "user":
			blocks, err = chatUserContent(m["content"], path+".content")
		case "assistant":
			blocks, err = chatAssistant(m, path)
		case "tool":
			blocks, err = chatToolResult(m, path)
			role = "user"
		default:
			return nil, nil, fieldErr(path+".role", "role %q has no Anthropic equivalent", role)
		}
		if err != nil {
			return nil, nil, err
		}
		out = appendTurn(out, role, blocks)
	}
	return system, out, nil
}

// appendTurn adds blocks as a turn of role, merged into the last turn when it has the
// same role.
func appendTurn(out []anthMessage, role string, blocks []block) []anthMessage {
	if n := len(out); n > 0 && out[n-1].Role == role {
		out[n-1].Content = append(out[n-1].Content, blocks...)
		return out
	}
	return append(out, anthMessage{Role: role, Content: blocks})
}

// chatUserContent maps a user message's content: text and images.
func chatUserContent(raw json.RawMessage, path string) ([]block, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []block{{"type": "text", "text": s}}, nil
	}
	var parts []obj
	if json.Unmarshal(raw, &parts) != nil {
		return nil, fieldErr(path, "must be a string or an array of content parts")
	}
	var blocks []block
	for i, p := range parts {
		pp := idx(path, i)
		t, _ := p.str("type", pp)
		switch t {
		case "text":
			text, err := p.str("text", pp)
			if err != nil {
				return nil, err
			}
			blocks = append(blocks, block{"type": "text", "text": text})
		case "image_url":
			b, err := chatImage(p, pp)
			if err != nil {
				return nil, err
			}
			blocks = append(blocks, b)
		default:
			return nil, fieldErr(pp+".type", "a %q part has no Anthropic equivalent here", t)
		}
	}
	return blocks, nil
}

// chatImage maps an image_url part: a base64 data URL or an http(s) URL.
func chatImage(p obj, path string) (block, error) {
	var img struct {
		URL    string `json:"url"`
		Detail string `json:"detail"`
	}
	if err := p.decode("image_url", path, &img, `an object {"url": ...}`); err != nil {
		return nil, err
	}
	if img.Detail != "" && img.Detail != "auto" {
		return nil, fieldErr(path+".image_url.detail", "Anthropic has no image detail setting; leave it out or send \"auto\"")
	}
	if mt, data, ok := dataURL(img.URL); ok {
		return block{"type": "image", "source": block{"type": "base64", "media_type": mt, "data": data}}, nil
	}
	if strings.HasPrefix(img.URL, "https://") || strings.HasPrefix(img.URL, "http://") {
		return block{"type": "image", "source": block{"type": "url", "url": img.URL}}, nil
	}
	return nil, fieldErr(path+".image_url.url", "must be a base64 data: URL or an http(s) URL")
}

// chatAssistant maps an assistant message: its text and its tool calls.
func chatAssistant(m obj, path string) ([]block, error) {
	var blocks []block
	if m.has("content") {
		text, err := textOf(m["content"], path+".content", "text", "refusal")
		if err != nil {
			return nil, err
		}
		if text != "" {
			blocks = append(blocks, block{"type": "text", "text": text})
		}
	}
	if r, err := m.str("refusal", path); err != nil {
		return nil, err
	} else if r != "" {
		blocks = append(blocks, block{"type": "text", "text": r})
	}
	var calls []struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	if err := m.decode("tool_calls", path, &calls, "an array of tool calls"); err != nil {
		return nil, err
	}
	for i, c := range calls {
		cp := idx(path+".tool_calls", i)
		if c.Type != "function" {
			return nil, fieldErr(cp+".type", "only function tool calls are translated")
		}
		input := json.RawMessage("{}")
		if strings.TrimSpace(c.Function.Arguments) != "" {
			var args obj
			if json.Unmarshal([]byte(c.Function.Arguments), &args) != nil {
				return nil, fieldErr(cp+".function.arguments", "must be a JSON object (Anthropic tool input is an object)")
			}
			input = json.RawMessage(c.Function.Arguments)
		}
		blocks = append(blocks, block{"type": "tool_use", "id": c.ID, "name": c.Function.Name, "input": input})
	}
	if len(blocks) == 0 {
		return nil, fieldErr(path+".content", "an assistant message needs text or tool calls")
	}
	return blocks, nil
}

// chatToolResult maps a tool message to a tool_result block.
func chatToolResult(m obj, path string) ([]block, error) {
	id, err := m.str("tool_call_id", path)
	if err != nil || id == "" {
		return nil, fieldErr(path+".tool_call_id", "a tool message must name its tool_call_id")
	}
	text, err := textOf(m["content"], path+".content", "text")
	if err != nil {
		return nil, err
	}
	return []block{{"type": "tool_result", "tool_use_id": id, "content": text}}, nil
}

// chatTools maps function tools.
func chatTools(raw json.RawMessage, present bool) ([]anthTool, error) {
	if !present {
		return nil, nil
	}
	var tools []obj
	if json.Unmarshal(raw, &tools) != nil {
		return nil, fieldErr("tools", "must be an array of tools")
	}
	out := make([]anthTool, 0, len(tools))
	for i, t := range tools {
		path := idx("tools", i)
		if typ, _ := t.str("type", path); typ != "function" {
			return nil, fieldErr(path+".type", "only function tools are translated, not %q", typ)
		}
		var fn struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
			Strict      bool            `json:"strict"`
		}
		if err := t.decode("function", path, &fn, "an object"); err != nil {
			return nil, err
		}
		if fn.Strict {
			return nil, fieldErr(path+".function.strict", "Anthropic does not enforce a tool's schema strictly here; leave it out")
		}
		if len(fn.Parameters) == 0 || string(fn.Parameters) == "null" {
			fn.Parameters = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		out = append(out, anthTool{Name: fn.Name, Description: fn.Description, InputSchema: fn.Parameters})
	}
	return out, nil
}

// chatToolChoice maps tool_choice and parallel_tool_calls.
func chatToolChoice(o obj) (block, error) {
	parallel := true
	if err := o.decode("parallel_tool_calls", "", &parallel, "true or false"); err != nil {
		return nil, err
	}
	var choice block
	if o.has("tool_choice") {
		var s string
		var fn struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		switch {
		case json.Unmarshal(o["tool_choice"], &s) == nil:
			m := map[string]string{"auto": "auto", "required": "any", "none": "none"}[s]
			if m == "" {
				return nil, fieldErr("tool_choice", "must be auto, required, none or a function")
			}
			choice = block{"type": m}
		case json.Unmarshal(o["tool_choice"], &fn) == nil && fn.Type == "function" && fn.Function.Name != "":
			choice = block{"type": "tool", "name": fn.Function.Name}
		default:
			return nil, fieldErr("tool_choice", "must be auto, required, none or {\"type\":\"function\",\"function\":{\"name\":...}}")
		}
	}
	if !parallel && o.has("tools") {
		if choice == nil {
			choice = block{"type": "auto"}
		}
		if choice["type"] != "none" {
			choice["disable_parallel_tool_use"] = true
		}
	}
	return choice, nil
}
