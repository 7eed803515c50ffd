package translate

import (
	"encoding/json"
	"strings"
)

// responsesKnown are the Responses fields responsesToMessages maps.
var responsesKnown = []string{"model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "stream",
	"tools", "tool_choice", "parallel_tool_calls", "user", "text"}

// responsesDefaults are fields accepted at their default value only.
var responsesDefaults = map[string][]string{
	"store": {"false"}, "background": {"false"}, "include": {"[]"}, "truncation": {`"disabled"`},
	"service_tier": {`"auto"`}, "metadata": {"{}"},
}

// responsesWhy explains refusals of what needs provider state or provider tools.
var responsesWhy = map[string]string{
	"previous_response_id": "it needs the conversation state OpenAI keeps, which Anthropic does not have; send the whole conversation in input",
	"conversation":         "it needs the conversation state OpenAI keeps; send the whole conversation in input",
	"store":                "stored responses live at OpenAI; leave it out or send false",
	"background":           "background responses run at OpenAI; leave it out or send false",
	"prompt":               "prompt templates live at OpenAI; send the prompt in input",
	"include":              "the extra output it asks for has no Anthropic equivalent; leave it out",
	"reasoning":            "reasoning settings have no translation to Anthropic here; leave it out",
	"top_logprobs":         "Anthropic does not return log probabilities",
	"metadata":             "metadata is stored with the response at OpenAI; leave it out",
	"max_tool_calls":       "Anthropic has no cap on built-in tool calls; leave it out",
}

// responsesToMessages maps the stateless subset of an OpenAI Responses request to an
// Anthropic Messages request.
func responsesToMessages(body []byte) ([]byte, error) {
	o, err := parseObj(body, "")
	if err != nil {
		return nil, fieldErr("(body)", "must be a JSON object")
	}
	if err := o.rejectUnknown("", responsesKnown, responsesDefaults, responsesWhy); err != nil {
		return nil, err
	}
	if err := responsesText(o); err != nil {
		return nil, err
	}
	var req anthRequest
	req.Model, _ = o.str("model", "")
	if instr, err := o.str("instructions", ""); err != nil {
		return nil, err
	} else if instr != "" {
		req.System = append(req.System, block{"type": "text", "text": instr})
	}
	system, msgs, err := responsesInput(o["input"])
	if err != nil {
		return nil, err
	}
	req.System, req.Messages = append(req.System, system...), msgs
	if err := o.decode("max_output_tokens", "", &req.MaxTokens, "an integer"); err != nil {
		return nil, err
	}
	if err := samplingParams(o, &req); err != nil {
		return nil, err
	}
	if err := o.decode("stream", "", &req.Stream, "true or false"); err != nil {
		return nil, err
	}
	if req.Tools, err = responsesTools(o); err != nil {
		return nil, err
	}
	if req.ToolChoice, err = responsesToolChoice(o); err != nil {
		return nil, err
	}
	if user, err := o.str("user", ""); err != nil {
		return nil, err
	} else if user != "" {
		req.Metadata = &anthMetadata{UserID: user}
	}
	return marshal(req), nil
}

// responsesText accepts only the default text output format.
func responsesText(o obj) error {
	if !o.has("text") {
		return nil
	}
	var t struct {
		Format *struct {
			Type string `json:"type"`
		} `json:"format"`
		Verbosity *string `json:"verbosity"`
	}
	if err := o.decode("text", "", &t, "an object"); err != nil {
		return err
	}
	if t.Format != nil && t.Format.Type != "text" {
		return fieldErr("text.format", "structured output (%q) has no translation to Anthropic here; ask for JSON in the prompt or use a tool", t.Format.Type)
	}
	if t.Verbosity != nil && *t.Verbosity != "medium" {
		return fieldErr("text.verbosity", "Anthropic has no verbosity setting; leave it out")
	}
	return nil
}

// responsesItemKnown are the fields of each input item type that are mapped (id and status
// are the provider's bookkeeping of an item passed back, not content).
var responsesItemKnown = map[string][]string{
	"":                     {"type", "role", "content", "id", "status"},
	"message":              {"type", "role", "content", "id", "status"},
	"function_call":        {"type", "id", "call_id", "name", "arguments", "status"},
	"function_call_output": {"type", "id", "call_id", "output", "status"},
}

// responsesInput maps input: a string, or an array of items (messages, function calls
// and function call outputs). Leading system and developer messages join the system prompt.
func responsesInput(raw json.RawMessage) ([]block, []anthMessage, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return nil, []anthMessage{{Role: "user", Content: []block{{"type": "text", "text": s}}}}, nil
	}
	var items []obj
	if json.Unmarshal(raw, &items) != nil || len(items) == 0 {
		return nil, nil, fieldErr("input", "must be a string or a non-empty array of input items")
	}
	var system []block
	var out []anthMessage
	for i, it := range items {
		path := idx("input", i)
		typ, _ := it.str("type", path)
		role, _ := it.str("role", path)
		if known, ok := responsesItemKnown[typ]; ok {
			if err := it.rejectUnknown(path, known, nil, nil); err != nil {
				return nil, nil, err
			}
		}
		var b block
		var err error
		switch {
		case (typ == "" || typ == "message") && (role == "system" || role == "developer"):
			if len(out) > 0 {
				return nil, nil, fieldErr(path+".role", "a %s message after the conversation started has no place in Anthropic's one system prompt; put it first", role)
			}
			text, err := textOf(it["content"], path+".content", "input_text")
			if err != nil {
				return nil, nil, err
			}
			system = append(system, block{"type": "text", "text": text})
			continue
		case typ == "" || typ == "message":
			var blocks []block
			if blocks, err = responsesContent(it, path, role); err == nil {
				out = appendTurn(out, role, blocks)
			}
		case typ == "function_call":
			if b, err = responsesCall(it, path); err == nil {
				out = appendTurn(out, "assistant", []block{b})
			}
		case typ == "function_call_output":
			if b, err = responsesCallOutput(it, path); err == nil {
				out = appendTurn(out, "user", []block{b})
			}
		default:
			err = fieldErr(path+".type", "a %q item needs state or tools at OpenAI and has no Anthropic equivalent", typ)
		}
		if err != nil {
			return nil, nil, err
		}
	}
	return system, out, nil
}

// responsesContent maps a message item's content.
func responsesContent(it obj, path, role string) ([]block, error) {
	if role != "user" && role != "assistant" {
		return nil, fieldErr(path+".role", "must be user, assistant, system or developer, not %q", role)
	}
	var s string
	if json.Unmarshal(it["content"], &s) == nil {
		return []block{{"type": "text", "text": s}}, nil
	}
	var parts []obj
	if json.Unmarshal(it["content"], &parts) != nil {
		return nil, fieldErr(path+".content", "must be a string or an array of content parts")
	}
	var blocks []block
	for i, p := range parts {
		pp := idx(path+".content", i)
		t, _ := p.str("type", pp)
		switch {
		case t == "input_text" || t == "output_text" || t == "refusal":
			key := "text"
			if t == "refusal" {
				key = "refusal"
			}
			text, err := p.str(key, pp)
			if err != nil {
				return nil, err
			}
			if text != "" {
				blocks = append(blocks, block{"type": "text", "text": text})
			}
		case t == "input_image" && role == "user":
			b, err := responsesImage(p, pp)
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

// responsesImage maps an input_image part; an uploaded file (file_id) lives at OpenAI.
func responsesImage(p obj, path string) (block, error) {
	if p.has("file_id") {
		return nil, fieldErr(path+".file_id", "the file lives at OpenAI; send the image as a data: URL or an https URL in image_url")
	}
	detail, _ := p.str("detail", path)
	if detail != "" && detail != "auto" {
		return nil, fieldErr(path+".detail", "Anthropic has no image detail setting; leave it out or send \"auto\"")
	}
	u, err := p.str("image_url", path)
	if err != nil {
		return nil, err
	}
	if mt, data, ok := dataURL(u); ok {
		return block{"type": "image", "source": block{"type": "base64", "media_type": mt, "data": data}}, nil
	}
	if strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://") {
		return block{"type": "image", "source": block{"type": "url", "url": u}}, nil
	}
	return nil, fieldErr(path+".image_url", "must be a base64 data: URL or an http(s) URL")
}

// responsesCall maps a function_call item to a tool_use block.
func responsesCall(it obj, path string) (block, error) {
	callID, _ := it.str("call_id", path)
	name, _ := it.str("name", path)
	args, err := it.str("arguments", path)
	if err != nil || callID == "" {
		return nil, fieldErr(path+".call_id", "a function_call item needs call_id, name and arguments")
	}
	input := json.RawMessage("{}")
	if strings.TrimSpace(args) != "" {
		var a obj
		if json.Unmarshal([]byte(args), &a) != nil {
			return nil, fieldErr(path+".arguments", "must be a JSON object (Anthropic tool input is an object)")
		}
		input = json.RawMessage(args)
	}
	return block{"type": "tool_use", "id": callID, "name": name, "input": input}, nil
}

// responsesCallOutput maps a function_call_output item to a tool_result block.
func responsesCallOutput(it obj, path string) (block, error) {
	callID, _ := it.str("call_id", path)
	if callID == "" {
		return nil, fieldErr(path+".call_id", "a function_call_output item must name its call_id")
	}
	text, err := textOf(it["output"], path+".output", "input_text", "output_text")
	if err != nil {
		return nil, err
	}
	return block{"type": "tool_result", "tool_use_id": callID, "content": text}, nil
}

// responsesTools maps function tools; built-in tools run at OpenAI.
func responsesTools(o obj) ([]anthTool, error) {
	if !o.has("tools") {
		return nil, nil
	}
	var tools []obj
	if json.Unmarshal(o["tools"], &tools) != nil {
		return nil, fieldErr("tools", "must be an array of tools")
	}
	out := make([]anthTool, 0, len(tools))
	for i, t := range tools {
		path := idx("tools", i)
		if typ, _ := t.str("type", path); typ != "function" {
			return nil, fieldErr(path+".type", "the built-in tool %q runs at OpenAI and has no Anthropic equivalent; only function tools are translated", typ)
		}
		if t.has("strict") && string(t["strict"]) != "false" {
			return nil, fieldErr(path+".strict", "Anthropic does not enforce a tool's schema strictly here; send false")
		}
		name, _ := t.str("name", path)
		desc, _ := t.str("description", path)
		params := t["parameters"]
		if !t.has("parameters") {
			params = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		out = append(out, anthTool{Name: name, Description: desc, InputSchema: params})
	}
	return out, nil
}

// responsesToolChoice maps tool_choice and parallel_tool_calls.
func responsesToolChoice(o obj) (block, error) {
	if o.has("tool_choice") {
		var fn struct {
			Type string `json:"type"`
			Name string `json:"name"`
		}
		var s string
		if json.Unmarshal(o["tool_choice"], &s) != nil {
			if err := o.decode("tool_choice", "", &fn, "a string or an object"); err != nil {
				return nil, err
			}
			if fn.Type != "function" {
				return nil, fieldErr("tool_choice.type", "only a function can be forced, not %q", fn.Type)
			}
			o["tool_choice"] = rawJSON(map[string]any{"type": "function", "function": map[string]any{"name": fn.Name}})
		}
	}
	return chatToolChoice(o)
}
