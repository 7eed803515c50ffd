package llmproxy

import (
	"encoding/json"
	"strings"

	"github.com/airlock-dev/airlock/policy"
)

// A call's reservation must be an upper bound of what the provider will bill for it, or a
// budget is a wish. costBound walks the request and adds up every part that costs: the
// text of messages, system prompts and instructions (bounded by its UTF-8 bytes, or counted
// with the model's tokenizer when the bytes do not fit), per-message overheads, tool
// definitions, images (by the provider's published sizing rules), files, documents and audio,
// and every field airlock does not know, by its JSON bytes. Output is bounded by the output
// limit times the number of choices.

// Per-message and per-call overheads in tokens. OpenAI documents 3 tokens per message plus
// the role, and 3 priming the reply; the values here add margin. Neither Anthropic nor the
// OpenAI-compatible servers publish theirs: measured Claude calls add 7–10 tokens to one short
// message, chat templates of open models 5–30 per message plus a default system prompt.
const (
	openaiCallOverhead       = 8
	openaiMessageOverhead    = 6
	compatibleCallOverhead   = 64
	compatibleMessageOverhed = 16
	anthropicCallOverhead    = 32
	anthropicMessageOverhead = 12
	// partOverhead is added per content part or tool: the separators around it.
	partOverhead = 4
	// anthropicToolsOverhead covers the tool-use system prompt Anthropic adds when tools are
	// present (its pricing page lists 264–530 tokens by model and tool_choice).
	anthropicToolsOverhead = 600
	// anthropicTypedToolOverhead covers a client tool Anthropic defines itself (bash, text
	// editor, computer use: 245, 700 and 735 tokens plus a 466–499-token system prompt).
	anthropicTypedToolOverhead = 1300
	// openaiToolsOverhead covers the namespace OpenAI wraps function definitions in.
	openaiToolsOverhead = 32
	// pdfPageTokens bounds one PDF page: Anthropic documents 1,500–3,000 text tokens per page
	// plus the page as an image (at most about 1,600 tokens); OpenAI also sends both.
	pdfPageTokens = 3000
)

// costBound is the worst case of one call.
type costBound struct {
	// text is every string billed as input text, bounded by bytes or counted.
	text []string
	// fixed is input known without counting text: overheads, images, files, unknown fields.
	fixed int64
	// fixedOut is output billed whatever the output limit (OpenAI predicted outputs).
	fixedOut int64
	// choices is how many outputs the call produces (n, best_of); 0 for embeddings.
	choices int64
	// unboundable says why the cost cannot be bounded; "" when it can.
	unboundable string
}

// bytes is the input bound by bytes.
func (b *costBound) bytes() int64 {
	n := b.fixed
	for _, s := range b.text {
		n += byteBound(s)
	}
	return n
}

// counted is the input bound with text counted by count: a text's tokens, plus one for the
// boundary its piece may share with the next, never more than its bytes.
func (b *costBound) counted(count func(string) int64) int64 {
	n := b.fixed
	for _, s := range b.text {
		n += min(byteBound(s), count(s)+1)
	}
	return n
}

// addText adds a text to the bound.
func (b *costBound) addText(s string) {
	if s != "" {
		b.text = append(b.text, s)
	}
}

// addRaw adds a JSON value by its bytes.
func (b *costBound) addRaw(v json.RawMessage) { b.fixed += int64(len(v)) }

// refuse records why the call cannot be bounded (the first reason found).
func (b *costBound) refuse(why string) {
	if b.unboundable == "" {
		b.unboundable = why
	}
}

// freeFields are request fields that cost no tokens (sampling and output settings, labels).
var freeFields = map[string]bool{
	"model": true, "stream": true, "stream_options": true, "temperature": true, "top_p": true, "top_k": true,
	"n": true, "best_of": true, "max_tokens": true, "max_completion_tokens": true, "max_output_tokens": true,
	"presence_penalty": true, "frequency_penalty": true, "logit_bias": true, "user": true, "seed": true,
	"stop": true, "stop_sequences": true, "logprobs": true, "top_logprobs": true, "parallel_tool_calls": true,
	"service_tier": true, "metadata": true, "reasoning_effort": true, "reasoning": true, "modalities": true,
	"safety_identifier": true, "prompt_cache_key": true, "prompt_cache_retention": true, "encoding_format": true,
	"dimensions": true, "echo": true, "truncation": true, "verbosity": true, "background": true,
	"include": true, "thinking": true, "audio": true, "store": true,
}

// boundFor computes the cost bound of call c sent to route r (its upstream model decides
// the image rules and overheads).
func boundFor(c *call, r *route) *costBound {
	b := &costBound{choices: 1}
	m := newModelRules(r)
	handled := map[string]bool{}
	switch c.ep {
	case epChat:
		handled = chatBound(b, c, m)
	case epCompletions:
		handled = completionsBound(b, c)
	case epEmbeddings:
		b.choices = 0
		handled = map[string]bool{"input": true}
		promptBound(b, c.body["input"])
	case epResponses:
		handled = responsesBound(b, c, m)
	case epMessages:
		handled = messagesBound(b, c, m)
	case epCountTokens:
		b.choices = 0
		return b
	}
	for k, v := range c.body {
		if !freeFields[k] && !handled[k] {
			b.addRaw(v)
		}
	}
	if s, ok := c.body["store"]; ok && string(s) == "true" {
		b.refuse(`"store": true keeps the answer at the provider, where later calls and evaluations can spend on it outside this call; leave "store" out or send false`)
	}
	return b
}

// modelRules are the per-model facts the bound needs.
type modelRules struct {
	ptype                 policy.ProviderType
	model                 string
	callOver, messageOver int64
}

func newModelRules(r *route) modelRules {
	m := modelRules{ptype: r.ptype, model: r.upstream}
	switch r.ptype {
	case policy.ProviderOpenAI:
		m.callOver, m.messageOver = openaiCallOverhead, openaiMessageOverhead
	case policy.ProviderAnthropic:
		m.callOver, m.messageOver = anthropicCallOverhead, anthropicMessageOverhead
	default:
		m.callOver, m.messageOver = compatibleCallOverhead, compatibleMessageOverhed
	}
	return m
}

// chatBound bounds a chat completion: messages, tools, choices, predictions.
func chatBound(b *costBound, c *call, m modelRules) map[string]bool {
	b.fixed += m.callOver
	b.choices = max(1, c.choices)
	var msgs []map[string]json.RawMessage
	if json.Unmarshal(c.body["messages"], &msgs) != nil {
		b.addRaw(c.body["messages"])
	}
	for _, msg := range msgs {
		b.fixed += m.messageOver
		for k, v := range msg {
			switch k {
			case "role", "name", "tool_call_id":
				b.addText(jsonString(v))
			case "content":
				contentBound(b, v, m)
			case "audio":
				b.refuse("a message refers to an earlier audio answer by id, whose tokens airlock cannot see")
			default: // tool_calls, function_call, refusal ...
				b.addRaw(v)
			}
		}
	}
	toolsBound(b, c.body["tools"], m)
	toolsBound(b, c.body["functions"], m)
	if _, ok := c.body["web_search_options"]; ok {
		b.refuse("web search runs at the provider and bills search results airlock cannot bound")
	}
	if p, ok := c.body["prediction"]; ok {
		// Rejected prediction tokens are billed as output, beyond max_completion_tokens.
		b.fixedOut += int64(len(p))
	}
	return map[string]bool{"messages": true, "tools": true, "functions": true, "prediction": true}
}

// contentBound bounds an OpenAI message content: a string or an array of parts.
func contentBound(b *costBound, v json.RawMessage, m modelRules) {
	if s, ok := asString(v); ok {
		b.addText(s)
		return
	}
	var parts []map[string]json.RawMessage
	if json.Unmarshal(v, &parts) != nil {
		b.addRaw(v)
		return
	}
	for _, p := range parts {
		b.fixed += partOverhead
		switch jsonString(p["type"]) {
		case "text", "input_text", "output_text", "refusal":
			b.addText(jsonString(p["text"]) + jsonString(p["refusal"]))
		case "image_url":
			var img struct {
				URL    string `json:"url"`
				Detail string `json:"detail"`
			}
			_ = json.Unmarshal(p["image_url"], &img)
			b.fixed += openaiImageTokens(m.model, img.URL, img.Detail)
		case "input_image":
			if _, ok := p["file_id"]; ok && string(p["file_id"]) != "null" {
				b.refuse("an image given by file_id is stored at the provider; airlock cannot see its size")
				continue
			}
			b.fixed += openaiImageTokens(m.model, jsonString(p["image_url"]), jsonString(p["detail"]))
		case "input_audio":
			var a struct {
				Data string `json:"data"`
			}
			_ = json.Unmarshal(p["input_audio"], &a)
			// Audio is billed by duration (about 10 tokens a second); no codec carries a
			// second in fewer than 10 bytes of base64, so one token per byte bounds it.
			b.fixed += int64(len(a.Data))
		case "file", "input_file":
			fileBound(b, p, m)
		default:
			b.addRaw(mustJSON(p))
		}
	}
}

// fileBound bounds a file part: chat {"file":{file_data|file_id}}, Responses input_file.
func fileBound(b *costBound, p map[string]json.RawMessage, m modelRules) {
	f := p
	if inner, ok := p["file"]; ok {
		_ = json.Unmarshal(inner, &f)
	}
	if id, ok := f["file_id"]; ok && string(id) != "null" {
		b.refuse("a file given by file_id is stored at the provider; airlock cannot see what it costs")
		return
	}
	if _, ok := f["file_url"]; ok {
		b.refuse("a file given by URL is fetched by the provider; airlock cannot see what it costs")
		return
	}
	data := jsonString(f["file_data"])
	pages, ok := pdfPages(data)
	if !ok {
		b.refuse("the attached file is not a PDF whose pages airlock can count")
		return
	}
	b.fixed += pages * (pdfPageTokens + openaiImageTokens(m.model, "", "high"))
}

// toolsBound bounds tool definitions by their JSON bytes, refusing server-side tools.
func toolsBound(b *costBound, v json.RawMessage, m modelRules) {
	if len(v) == 0 || string(v) == "null" {
		return
	}
	var tools []map[string]json.RawMessage
	if json.Unmarshal(v, &tools) != nil {
		b.addRaw(v)
		return
	}
	if m.ptype == policy.ProviderAnthropic {
		b.fixed += anthropicToolsOverhead
	} else {
		b.fixed += openaiToolsOverhead
	}
	for _, t := range tools {
		b.fixed += partOverhead + int64(len(mustJSON(t)))
		typ := jsonString(t["type"])
		switch {
		case typ == "" || typ == "function" || typ == "custom":
		case m.ptype == policy.ProviderAnthropic && anthropicClientTool(typ):
			b.fixed += anthropicTypedToolOverhead
		case m.ptype != policy.ProviderAnthropic && (typ == "local_shell" || typ == "apply_patch"):
		default:
			b.refuse("tool type " + typ + " runs at the provider (searches, code, files, MCP) and bills work airlock cannot bound")
		}
	}
}

// anthropicClientTool reports whether an Anthropic versioned tool type runs on the client
// (the caller executes it; its definition is a fixed-size prompt).
func anthropicClientTool(typ string) bool {
	for _, p := range []string{"bash_", "text_editor_", "computer_", "memory_"} {
		if strings.HasPrefix(typ, p) {
			return true
		}
	}
	return false
}

// completionsBound bounds a legacy completion: prompt, suffix, n × best_of.
func completionsBound(b *costBound, c *call) map[string]bool {
	b.fixed += openaiCallOverhead
	b.choices = max(1, c.choices)
	promptBound(b, c.body["prompt"])
	b.addText(jsonString(c.body["suffix"]))
	if e, ok := c.body["echo"]; ok && string(e) == "true" {
		// An echoed prompt is returned, and billed, as output too.
		promptBound(b, c.body["prompt"])
	}
	return map[string]bool{"prompt": true, "suffix": true}
}

// promptBound bounds a prompt or embeddings input: a string, strings, or token arrays.
func promptBound(b *costBound, v json.RawMessage) {
	if len(v) == 0 {
		return
	}
	if s, ok := asString(v); ok {
		b.addText(s)
		return
	}
	var ss []string
	if json.Unmarshal(v, &ss) == nil {
		for _, s := range ss {
			b.addText(s)
		}
		return
	}
	var toks []int64
	if json.Unmarshal(v, &toks) == nil {
		b.fixed += int64(len(toks))
		return
	}
	var many [][]int64
	if json.Unmarshal(v, &many) == nil {
		for _, t := range many {
			b.fixed += int64(len(t))
		}
		return
	}
	b.addRaw(v)
}

// responsesBound bounds a Responses call: instructions, input items, tools.
func responsesBound(b *costBound, c *call, m modelRules) map[string]bool {
	b.fixed += m.callOver
	for _, k := range []string{"previous_response_id", "conversation", "prompt"} {
		if v, ok := c.body[k]; ok && string(v) != "null" {
			b.refuse(`"` + k + `" makes the provider add stored context airlock cannot see or bound`)
		}
	}
	b.addText(jsonString(c.body["instructions"]))
	if s, ok := asString(c.body["input"]); ok {
		b.fixed += m.messageOver
		b.addText(s)
	} else {
		var items []map[string]json.RawMessage
		if json.Unmarshal(c.body["input"], &items) != nil {
			b.addRaw(c.body["input"])
		}
		for _, it := range items {
			b.fixed += m.messageOver
			responseItemBound(b, it, m)
		}
	}
	toolsBound(b, c.body["tools"], m)
	return map[string]bool{"instructions": true, "input": true, "tools": true,
		"previous_response_id": true, "conversation": true, "prompt": true}
}

// responseItemBound bounds one Responses input item.
func responseItemBound(b *costBound, it map[string]json.RawMessage, m modelRules) {
	switch typ := jsonString(it["type"]); {
	case typ == "item_reference":
		b.refuse("an item_reference input names a stored item airlock cannot see")
	case typ == "message" || (typ == "" && it["role"] != nil):
		for k, v := range it {
			switch k {
			case "content":
				contentBound(b, v, m)
			case "role":
				b.addText(jsonString(v))
			case "type", "id", "status":
			default:
				b.addRaw(v)
			}
		}
	default: // function_call, function_call_output, reasoning ...: by bytes
		b.addRaw(mustJSON(it))
	}
}

// messagesBound bounds an Anthropic Messages call: system, messages, tools.
func messagesBound(b *costBound, c *call, m modelRules) map[string]bool {
	b.fixed += m.callOver
	if v, ok := c.body["mcp_servers"]; ok && string(v) != "null" && string(v) != "[]" {
		b.refuse("MCP servers are called by the provider and bill results airlock cannot bound")
	}
	if v, ok := c.body["container"]; ok && string(v) != "null" {
		b.refuse("a reused container carries files and state airlock cannot see")
	}
	if s, ok := asString(c.body["system"]); ok {
		b.addText(s)
	} else if v := c.body["system"]; len(v) > 0 {
		blocksBound(b, v, m)
	}
	var msgs []map[string]json.RawMessage
	if json.Unmarshal(c.body["messages"], &msgs) != nil {
		b.addRaw(c.body["messages"])
	}
	for _, msg := range msgs {
		b.fixed += m.messageOver
		b.addText(jsonString(msg["role"]))
		if s, ok := asString(msg["content"]); ok {
			b.addText(s)
		} else {
			blocksBound(b, msg["content"], m)
		}
	}
	toolsBound(b, c.body["tools"], m)
	return map[string]bool{"system": true, "messages": true, "tools": true, "mcp_servers": true, "container": true}
}

// blocksBound bounds Anthropic content blocks.
func blocksBound(b *costBound, v json.RawMessage, m modelRules) {
	var blocks []map[string]json.RawMessage
	if json.Unmarshal(v, &blocks) != nil {
		b.addRaw(v)
		return
	}
	for _, blk := range blocks {
		b.fixed += partOverhead
		switch jsonString(blk["type"]) {
		case "text":
			b.addText(jsonString(blk["text"]))
			if cit, ok := blk["citations"]; ok {
				b.addRaw(cit)
			}
		case "image":
			var src anthropicSource
			_ = json.Unmarshal(blk["source"], &src)
			switch src.Type {
			case "file":
				b.refuse("an image given by file_id is stored at the provider; airlock cannot see its size")
			default:
				b.fixed += anthropicImageTokens(src.Data)
			}
		case "document":
			documentBound(b, blk)
		case "tool_result":
			if s, ok := asString(blk["content"]); ok {
				b.addText(s)
			} else if c := blk["content"]; len(c) > 0 {
				blocksBound(b, c, m)
			}
		case "container_upload":
			b.refuse("a container upload names a stored file airlock cannot see")
		default: // tool_use, thinking, redacted_thinking, search_result ...: by bytes
			b.addRaw(mustJSON(blk))
		}
	}
}

// anthropicSource is an image or document source.
type anthropicSource struct {
	Type      string          `json:"type"`
	MediaType string          `json:"media_type"`
	Data      string          `json:"data"`
	Content   json.RawMessage `json:"content"`
}

// documentBound bounds an Anthropic document block: text, content blocks, or a PDF.
func documentBound(b *costBound, blk map[string]json.RawMessage) {
	var src anthropicSource
	_ = json.Unmarshal(blk["source"], &src)
	b.addText(jsonString(blk["title"]) + jsonString(blk["context"]))
	switch src.Type {
	case "text":
		b.addText(src.Data)
	case "content":
		blocksBound(b, src.Content, modelRules{ptype: policy.ProviderAnthropic})
	case "base64":
		pages, ok := pdfPages(src.Data)
		if !ok {
			b.refuse("the attached document is not a PDF whose pages airlock can count")
			return
		}
		b.fixed += pages * (pdfPageTokens + anthropicMaxImageTokens)
	default:
		b.refuse("a document given by " + src.Type + " is fetched or stored by the provider; airlock cannot see what it costs")
	}
}

// asString decodes v as a JSON string.
func asString(v json.RawMessage) (string, bool) {
	if len(v) == 0 || v[0] != '"' {
		return "", false
	}
	var s string
	return s, json.Unmarshal(v, &s) == nil
}

// jsonString decodes v as a JSON string, "" when it is not one.
func jsonString(v json.RawMessage) string {
	s, _ := asString(v)
	return s
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}
