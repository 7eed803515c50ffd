package llmproxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// The fakes of this file play providers for translated calls. Unlike test/fakellm they
// decode each request strictly in their own API's schema (an unknown field, a field of the
// other dialect, a malformed turn order is a 400 and a test error), and they play a tool
// round trip: with tools and no tool result yet they ask for get_weather(city: Paris); with
// a tool result they answer with a text that quotes it.

// dialectFake is a strict fake provider.
type dialectFake struct {
	t   testing.TB
	key string

	// mu guards bodies and errs.
	mu     sync.Mutex
	bodies [][]byte
	errs   []string
}

// fail answers 400 and records why: the provider did not receive its own dialect.
func (f *dialectFake) fail(w http.ResponseWriter, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	f.mu.Lock()
	f.errs = append(f.errs, msg)
	f.mu.Unlock()
	f.t.Errorf("fake provider: %s", msg)
	http.Error(w, msg, http.StatusBadRequest)
}

// record keeps a request body and decodes it strictly into v.
func (f *dialectFake) record(w http.ResponseWriter, r *http.Request, v any) bool {
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(r.Body)
	f.mu.Lock()
	f.bodies = append(f.bodies, buf.Bytes())
	f.mu.Unlock()
	dec := json.NewDecoder(bytes.NewReader(buf.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		f.fail(w, "request is not in this provider's dialect: %v: %s", err, buf.String())
		return false
	}
	return true
}

// Bodies returns the request bodies received.
func (f *dialectFake) Bodies() [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]byte(nil), f.bodies...)
}

// sseWriter writes server-sent events, flushing each.
type sseWriter struct{ w http.ResponseWriter }

func startStream(w http.ResponseWriter) sseWriter {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	return sseWriter{w}
}

func (s sseWriter) send(name string, v any) {
	var b []byte
	if name != "" {
		b = append(b, "event: "+name+"\n"...)
	}
	data, ok := v.([]byte)
	if !ok {
		data, _ = json.Marshal(v)
	}
	b = append(b, "data: "...)
	b = append(b, data...)
	b = append(b, "\n\n"...)
	_, _ = s.w.Write(b)
	http.NewResponseController(s.w).Flush()
}

// anthropicFake is a strict Anthropic Messages provider.
type anthropicFake struct{ dialectFake }

// anthReq is the Anthropic Messages request schema the fake accepts.
type anthReq struct {
	Model         string            `json:"model"`
	System        []anthSystemBlock `json:"system"`
	Messages      []anthReqMessage  `json:"messages"`
	MaxTokens     int64             `json:"max_tokens"`
	Temperature   *float64          `json:"temperature"`
	TopP          *float64          `json:"top_p"`
	StopSequences []string          `json:"stop_sequences"`
	Stream        bool              `json:"stream"`
	Tools         []struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
	} `json:"tools"`
	ToolChoice *struct {
		Type                   string `json:"type"`
		Name                   string `json:"name"`
		DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
	} `json:"tool_choice"`
	Metadata *struct {
		UserID string `json:"user_id"`
	} `json:"metadata"`
}

type anthSystemBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type anthReqMessage struct {
	Role    string `json:"role"`
	Content []struct {
		Type   string `json:"type"`
		Text   string `json:"text"`
		Source *struct {
			Type      string `json:"type"`
			MediaType string `json:"media_type"`
			Data      string `json:"data"`
			URL       string `json:"url"`
		} `json:"source"`
		ID        string          `json:"id"`
		Name      string          `json:"name"`
		Input     json.RawMessage `json:"input"`
		ToolUseID string          `json:"tool_use_id"`
		Content   string          `json:"content"`
	} `json:"content"`
}

func (f *anthropicFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path != "/v1/messages":
		f.fail(w, "Anthropic has no %s", r.URL.Path)
		return
	case r.Header.Get("X-Api-Key") != f.key || r.Header.Get("Authorization") != "" || r.Header.Get("Anthropic-Version") == "":
		f.fail(w, "not Anthropic authentication: x-api-key %q authorization %q", r.Header.Get("X-Api-Key"), r.Header.Get("Authorization"))
		return
	}
	for k := range r.Header {
		if strings.HasPrefix(k, "Openai-") || strings.HasPrefix(k, "X-Stainless-Helper") {
			f.fail(w, "an OpenAI header reached Anthropic: %s", k)
			return
		}
	}
	var req anthReq
	if !f.record(w, r, &req) {
		return
	}
	if req.MaxTokens <= 0 || req.Model == "" || len(req.Messages) == 0 || req.Messages[0].Role != "user" {
		f.fail(w, "max_tokens, model and a first user message are required")
		return
	}
	toolIDs := map[string]bool{}
	var result string
	for i, m := range req.Messages {
		if i > 0 && m.Role == req.Messages[i-1].Role {
			f.fail(w, "messages[%d]: roles must alternate", i)
			return
		}
		for _, b := range m.Content {
			switch {
			case b.Type == "tool_use" && m.Role == "assistant":
				toolIDs[b.ID] = true
			case b.Type == "tool_result" && m.Role == "user" && toolIDs[b.ToolUseID]:
				result = b.Content
			case (b.Type == "text" && b.Text != "") || (b.Type == "image" && b.Source != nil):
			default:
				f.fail(w, "messages[%d]: bad block %+v", i, b)
				return
			}
		}
	}
	last := req.Messages[len(req.Messages)-1]
	ans := fakeAnswer{model: req.Model, text: "Hello from Anthropic"}
	switch {
	case last.Role == "user" && result != "":
		ans.text = "The tool said: " + result
	case len(req.Tools) > 0:
		ans.tool = req.Tools[0].Name
	}
	if req.Stream {
		ans.anthropicStream(startStream(w))
		return
	}
	ans.anthropicJSON(w)
}

// fakeAnswer is what a fake replies: text, or a call of tool.
type fakeAnswer struct {
	model, text, tool string
}

// Fixed usage of every fake answer.
const fakeIn, fakeOut = 21, 7

func (a fakeAnswer) anthropicContent() (any, string) {
	if a.tool != "" {
		return map[string]any{"type": "tool_use", "id": "toolu_fake1", "name": a.tool, "input": map[string]any{"city": "Paris"}}, "tool_use"
	}
	return map[string]any{"type": "text", "text": a.text}, "end_turn"
}

func (a fakeAnswer) anthropicJSON(w http.ResponseWriter) {
	block, stop := a.anthropicContent()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"id": "msg_fake1", "type": "message", "role": "assistant", "model": a.model,
		"content": []any{block}, "stop_reason": stop, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": fakeIn, "output_tokens": fakeOut, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}})
}

func (a fakeAnswer) anthropicStream(s sseWriter) {
	s.send("message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": "msg_fake1", "type": "message",
		"role": "assistant", "model": a.model, "content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": fakeIn, "output_tokens": 1}}})
	stop := "end_turn"
	if a.tool != "" {
		stop = "tool_use"
		s.send("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
			"content_block": map[string]any{"type": "tool_use", "id": "toolu_fake1", "name": a.tool, "input": map[string]any{}}})
		for _, part := range []string{`{"city": `, `"Paris"}`} {
			s.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
				"delta": map[string]any{"type": "input_json_delta", "partial_json": part}})
		}
	} else {
		s.send("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
			"content_block": map[string]any{"type": "text", "text": ""}})
		s.send("ping", map[string]any{"type": "ping"})
		for _, word := range strings.SplitAfter(a.text, " ") {
			s.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
				"delta": map[string]any{"type": "text_delta", "text": word}})
		}
	}
	s.send("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	s.send("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": fakeOut}})
	s.send("message_stop", map[string]any{"type": "message_stop"})
}
