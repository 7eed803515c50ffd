package translate

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// The stream translators read whatever a provider sends. The fuzz targets feed them any
// sequence of events (the input is split into events at blank lines, each "name\ndata") and
// hold them to their contract: no panic, the output is well-formed events with JSON data
// (or [DONE]) in the caller's dialect, nothing after the caller's last event, and, towards
// Anthropic, content blocks started and stopped in order; towards Responses, sequence
// numbers counting up from 0.

// fuzzEvents splits fuzz input into events.
func fuzzEvents(in []byte) []pev {
	var evs []pev
	for _, part := range bytes.Split(in, []byte("\n\n")) {
		name, data, found := bytes.Cut(part, []byte("\n"))
		if !found {
			name, data = nil, part
		}
		evs = append(evs, pev{string(name), string(data)})
	}
	return evs
}

// seedStream joins recorded events into a seed.
func seedStream(evs []pev) []byte {
	var b []byte
	for _, e := range evs {
		b = append(b, e.name+"\n"+e.data+"\n\n"...)
	}
	return b
}

// lastEvent reports whether e ends the caller's stream.
func lastEvent(e pev) bool {
	return e.data == "[DONE]" || e.name == "message_stop" || e.name == "error" || e.name == "response.completed" ||
		e.name == "response.incomplete" || strings.HasPrefix(e.data, `{"error"`)
}

// checkStream runs the stream and checks the common contract; it returns every output event.
func checkStream(t *testing.T, s Stream, in []byte) []pev {
	var all []pev
	ended := false
	for _, e := range fuzzEvents(in) {
		out := parseSSE(t, s.Event(e.name, []byte(e.data)))
		if ended && len(out) > 0 {
			t.Fatalf("events after the last one: %v", out)
		}
		for _, o := range out {
			ended = ended || lastEvent(o)
		}
		all = append(all, out...)
	}
	return all
}

func FuzzMessagesToChatStream(f *testing.F) {
	f.Add(seedStream(anthropicToolStream))
	f.Add([]byte("message_start\n{\"message\":{\"id\":\"x\"}}\n\nerror\n{\"error\":{}}"))
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, e := range checkStream(t, NewStream(AnthropicMessages, OpenAIChat, StreamOptions{IncludeUsage: true}), in) {
			if e.name != "" {
				t.Fatalf("an OpenAI chat stream has no event names: %q", e.name)
			}
		}
	})
}

func FuzzChatToMessagesStream(f *testing.F) {
	f.Add(seedStream(openaiToolStream))
	f.Add([]byte("\n{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":3,\"function\":{\"arguments\":\"{\"}}]}}]}\n\n\n{\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n\n[DONE]"))
	f.Fuzz(func(t *testing.T, in []byte) {
		open, next := -1, 0
		for _, e := range checkStream(t, NewStream(OpenAIChat, AnthropicMessages, StreamOptions{}), in) {
			var v struct {
				Index int `json:"index"`
			}
			_ = json.Unmarshal([]byte(e.data), &v)
			switch e.name {
			case "content_block_start":
				if open != -1 || v.Index != next {
					t.Fatalf("block %d started with %d open, next %d", v.Index, open, next)
				}
				open, next = v.Index, next+1
			case "content_block_stop":
				if v.Index != open {
					t.Fatalf("block %d stopped, %d open", v.Index, open)
				}
				open = -1
			case "content_block_delta":
				if v.Index >= next {
					t.Fatalf("delta for block %d never started", v.Index)
				}
			case "message_stop", "message_delta":
				if open != -1 {
					t.Fatalf("%s with block %d open", e.name, open)
				}
			}
		}
	})
}

func FuzzMessagesToResponsesStream(f *testing.F) {
	f.Add(seedStream(anthropicToolStream))
	f.Add([]byte("content_block_start\n{\"index\":0,\"content_block\":{\"type\":\"text\"}}\n\ncontent_block_start\n{\"index\":0,\"content_block\":{\"type\":\"tool_use\"}}\n\nmessage_stop\n{}"))
	f.Fuzz(func(t *testing.T, in []byte) {
		for i, e := range checkStream(t, NewStream(AnthropicMessages, OpenAIResponses, StreamOptions{}), in) {
			var v struct {
				Type string `json:"type"`
				Seq  *int   `json:"sequence_number"`
			}
			if err := json.Unmarshal([]byte(e.data), &v); err != nil || v.Type != e.name || v.Seq == nil || *v.Seq != i {
				t.Fatalf("event %d %q: type %q sequence_number %v", i, e.name, v.Type, v.Seq)
			}
		}
	})
}

// FuzzRequest holds the request translators to: no panic, and either a *FieldError or a
// JSON object.
func FuzzRequest(f *testing.F) {
	f.Add(0, []byte(`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"w"}}]}`))
	f.Add(1, []byte(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"x"}]}]}`))
	f.Add(2, []byte(`{"model":"m","input":[{"type":"function_call","call_id":"c","name":"w","arguments":"{}"}]}`))
	f.Fuzz(func(t *testing.T, pair int, body []byte) {
		pairs := [][2]Dialect{{OpenAIChat, AnthropicMessages}, {AnthropicMessages, OpenAIChat}, {OpenAIResponses, AnthropicMessages}}
		p := pairs[(pair%3+3)%3]
		out, err := Request(p[0], p[1], body, RequestOptions{})
		if err != nil {
			if _, ok := err.(*FieldError); !ok {
				t.Fatalf("error %T %v, want *FieldError", err, err)
			}
			return
		}
		if _, err := parseObj(out, ""); err != nil {
			t.Fatalf("output is not a JSON object: %s", out)
		}
	})
}
