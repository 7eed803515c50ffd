package translate

import (
	"reflect"
	"testing"
)

// openaiToolStream is a recorded OpenAI chat stream: text, a tool call, usage, [DONE].
var openaiToolStream = []pev{
	{"", `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-x","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`},
	{"", `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-x","choices":[{"index":0,"delta":{"content":"Let me "},"finish_reason":null}]}`},
	{"", `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-x","choices":[{"index":0,"delta":{"content":"check."},"finish_reason":null}]}`},
	{"", `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-x","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"w","arguments":""}}]},"finish_reason":null}]}`},
	{"", `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-x","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]},"finish_reason":null}]}`},
	{"", `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-x","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]},"finish_reason":null}]}`},
	{"", `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-x","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`},
	{"", `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-x","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":9,"total_tokens":21,"prompt_tokens_details":{"cached_tokens":2}}}`},
	{"", `[DONE]`},
}

// named is a want list of (name, data) events.
type named [][2]string

func compareNamed(t *testing.T, got [][]pev, want []named) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d outputs, want %d", len(got), len(want))
	}
	for i := range want {
		var g, w []string
		for _, e := range got[i] {
			g = append(g, compact(t, e))
		}
		for _, e := range want[i] {
			w = append(w, compact(t, pev{e[0], e[1]}))
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("event %d:\n got %q\nwant %q", i, g, w)
		}
	}
}

func TestChatToMessagesStream(t *testing.T) {
	s := NewStream(OpenAIChat, AnthropicMessages, StreamOptions{})
	got := feed(t, s, openaiToolStream)
	compareNamed(t, got, []named{
		{{"message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"gpt-x","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}}`}},
		{{"content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`},
			{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Let me "}}`}},
		{{"content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"check."}}`}},
		{{"content_block_stop", `{"type":"content_block_stop","index":0}`},
			{"content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"call_1","name":"w","input":{}}}`}},
		{{"content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\":"}}`}},
		{{"content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"Paris\"}"}}`}},
		nil, nil,
		{{"content_block_stop", `{"type":"content_block_stop","index":1}`},
			{"message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"input_tokens":10,"output_tokens":9,"cache_creation_input_tokens":0,"cache_read_input_tokens":2}}`},
			{"message_stop", `{"type":"message_stop"}`}},
	})
}

func TestChatToMessagesStreamError(t *testing.T) {
	s := NewStream(OpenAIChat, AnthropicMessages, StreamOptions{})
	got := feed(t, s, []pev{openaiToolStream[0], {"", `{"error":{"message":"quota","type":"insufficient_quota"}}`}, openaiToolStream[8]})
	compareNamed(t, got, []named{
		{{"message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"gpt-x","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}}`}},
		{{"error", `{"type":"error","error":{"type":"permission_error","message":"quota"}}`}},
		nil,
	})
}

func TestMessagesToResponsesStream(t *testing.T) {
	s := NewStream(AnthropicMessages, OpenAIResponses, StreamOptions{Created: 7})
	got := feed(t, s, anthropicToolStream)
	names := [][]string{
		{"response.created", "response.in_progress"},
		{"response.output_item.added", "response.content_part.added"},
		nil,
		{"response.output_text.delta"}, {"response.output_text.delta"},
		{"response.output_text.done", "response.content_part.done", "response.output_item.done"},
		{"response.output_item.added"},
		{"response.function_call_arguments.delta"}, {"response.function_call_arguments.delta"},
		{"response.function_call_arguments.done", "response.output_item.done"},
		nil,
		{"response.completed"},
	}
	seq := 0
	for i, evs := range got {
		var g []string
		for _, e := range evs {
			g = append(g, e.name)
			o, _ := parseObj([]byte(e.data), "")
			if string(o["type"]) != `"`+e.name+`"` || string(o["sequence_number"]) != itoa(seq) {
				t.Errorf("event %s: type %s sequence_number %s, want %d", e.name, o["type"], o["sequence_number"], seq)
			}
			seq++
		}
		if !reflect.DeepEqual(g, names[i]) {
			t.Errorf("event %d: got %v, want %v", i, g, names[i])
		}
	}
	final := got[11][0].data
	jsonEqual(t, []byte(final), `{"type":"response.completed","sequence_number":14,"response":{"id":"resp_1","object":"response","created_at":7,"status":"completed","error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"claude-x",
	  "output":[{"type":"message","id":"msg_resp_1_0","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Let me check.","annotations":[],"logprobs":[]}]},
	            {"type":"function_call","id":"fc_toolu_1","call_id":"toolu_1","name":"w","arguments":"{\"city\":\"Paris\"}","status":"completed"}],
	  "parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":false,"temperature":null,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":null,"truncation":"disabled",
	  "usage":{"input_tokens":12,"input_tokens_details":{"cached_tokens":2},"output_tokens":9,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":21},"user":null,"metadata":{}}}`)
}

func itoa(n int) string { return string(rawJSON(n)) }

// Some OpenAI-compatible servers send every tool call at index 0: a new call ID starts a
// new tool_use block.
func TestChatToMessagesStreamToolCallsAtOneIndex(t *testing.T) {
	s := NewStream(OpenAIChat, AnthropicMessages, StreamOptions{})
	var starts []string
	for _, e := range feed(t, s, []pev{
		{"", `{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"x","arguments":"{}"}}]}}]}`},
		{"", `{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"b","function":{"name":"y","arguments":"{}"}}]}}]}`},
		{"", `[DONE]`},
	}) {
		for _, ev := range e {
			if ev.name == "content_block_start" {
				starts = append(starts, compact(t, ev))
			}
		}
	}
	want := []string{
		`content_block_start {"content_block":{"id":"a","input":{},"name":"x","type":"tool_use"},"index":0,"type":"content_block_start"}`,
		`content_block_start {"content_block":{"id":"b","input":{},"name":"y","type":"tool_use"},"index":1,"type":"content_block_start"}`,
	}
	if !reflect.DeepEqual(starts, want) {
		t.Errorf("got %q, want %q", starts, want)
	}
}
