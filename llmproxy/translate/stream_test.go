package translate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// pev is one server-sent event: its name ("" for none) and its data.
type pev struct{ name, data string }

// parseSSE splits translator output into events; it fails t on anything but well-formed
// events whose data is JSON or [DONE].
func parseSSE(t testing.TB, out []byte) []pev {
	t.Helper()
	var evs []pev
	for _, raw := range strings.Split(string(out), "\n\n") {
		if raw == "" {
			continue
		}
		var e pev
		for _, line := range strings.Split(raw, "\n") {
			switch {
			case strings.HasPrefix(line, "event: "):
				e.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				e.data = strings.TrimPrefix(line, "data: ")
			default:
				t.Fatalf("malformed event line %q in %q", line, out)
			}
		}
		if e.data != "[DONE]" && !json.Valid([]byte(e.data)) {
			t.Fatalf("event data is not JSON: %q", e.data)
		}
		evs = append(evs, e)
	}
	if len(out) > 0 && !bytes.HasSuffix(out, []byte("\n\n")) {
		t.Fatalf("output does not end an event: %q", out)
	}
	return evs
}

// feed runs events through s and returns what each one produced.
func feed(t testing.TB, s Stream, in []pev) [][]pev {
	t.Helper()
	var outs [][]pev
	for _, e := range in {
		outs = append(outs, parseSSE(t, s.Event(e.name, []byte(e.data))))
	}
	return outs
}

// compact is an event as "name data" with the data's keys sorted, for comparison.
func compact(t testing.TB, e pev) string {
	if e.data == "[DONE]" {
		return e.name + " [DONE]"
	}
	var v any
	_ = json.Unmarshal([]byte(e.data), &v)
	b, _ := json.Marshal(v)
	return strings.TrimSpace(e.name + " " + string(b))
}

// anthropicToolStream is a recorded Anthropic stream: text, then a tool call.
var anthropicToolStream = []pev{
	{"message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-x","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":1,"cache_read_input_tokens":2}}}`},
	{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
	{"ping", `{"type":"ping"}`},
	{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Let me "}}`},
	{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"check."}}`},
	{"content_block_stop", `{"type":"content_block_stop","index":0}`},
	{"content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"w","input":{}}}`},
	{"content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\":"}}`},
	{"content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"Paris\"}"}}`},
	{"content_block_stop", `{"type":"content_block_stop","index":1}`},
	{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":9}}`},
	{"message_stop", `{"type":"message_stop"}`},
}

func chatChunkJSON(delta, finish string, usage bool) string {
	u := ""
	if usage {
		u = `,"usage":null`
	}
	return fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"claude-x","choices":[{"index":0,"delta":%s,"finish_reason":%s,"logprobs":null}]%s}`, delta, finish, u)
}

func TestMessagesToChatStream(t *testing.T) {
	s := NewStream(AnthropicMessages, OpenAIChat, StreamOptions{IncludeUsage: true, Created: 7})
	got := feed(t, s, anthropicToolStream)
	want := [][]string{
		{chatChunkJSON(`{"role":"assistant","content":""}`, "null", true)},
		nil, nil,
		{chatChunkJSON(`{"content":"Let me "}`, "null", true)},
		{chatChunkJSON(`{"content":"check."}`, "null", true)},
		nil,
		{chatChunkJSON(`{"tool_calls":[{"index":0,"id":"toolu_1","type":"function","function":{"name":"w","arguments":""}}]}`, "null", true)},
		{chatChunkJSON(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}`, "null", true)},
		{chatChunkJSON(`{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]}`, "null", true)},
		nil,
		{chatChunkJSON(`{}`, `"tool_calls"`, true)},
		{`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"claude-x","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":9,"total_tokens":21,"prompt_tokens_details":{"cached_tokens":2}}}`, "[DONE]"},
	}
	compareStreams(t, got, want, "")
	if out := s.Event("message_stop", []byte(`{"type":"message_stop"}`)); out != nil {
		t.Errorf("after the end: %q, want nothing", out)
	}
}

// compareStreams compares per-event outputs; want holds data strings (names are name).
func compareStreams(t *testing.T, got [][]pev, want [][]string, name string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d outputs, want %d", len(got), len(want))
	}
	for i := range want {
		var g, w []string
		for _, e := range got[i] {
			g = append(g, compact(t, e))
		}
		for _, d := range want[i] {
			w = append(w, compact(t, pev{name, d}))
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("event %d:\n got %q\nwant %q", i, g, w)
		}
	}
}

func TestMessagesToChatStreamWithoutUsageAndError(t *testing.T) {
	s := NewStream(AnthropicMessages, OpenAIChat, StreamOptions{})
	got := feed(t, s, []pev{anthropicToolStream[0],
		{"error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`}})
	if len(got[1]) != 1 || compact(t, got[1][0]) != `{"error":{"code":"overloaded_error","message":"Overloaded","param":null,"type":"server_error"}}` {
		t.Errorf("error: got %v", got[1])
	}
	if strings.Contains(got[0][0].data, "usage") {
		t.Errorf("usage sent unasked: %s", got[0][0].data)
	}
}

// A tool_use block that starts with its whole input passes it as the call's arguments.
func TestMessagesToChatStreamWholeToolInput(t *testing.T) {
	s := NewStream(AnthropicMessages, OpenAIChat, StreamOptions{Created: 7})
	got := feed(t, s, []pev{anthropicToolStream[0],
		{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"w","input":{"a":1}}}`}})
	want := `{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"{\"a\":1}","name":"w"},"id":"t","index":0,"type":"function"}]},"finish_reason":null,"index":0,"logprobs":null}],"created":7,"id":"chatcmpl-1","model":"claude-x","object":"chat.completion.chunk"}`
	if len(got[1]) != 1 || compact(t, got[1][0]) != want {
		t.Errorf("got %v, want %s", got[1], want)
	}
}
