package translate

import "testing"

// Recorded provider answers and what the caller gets.
func TestAnswers(t *testing.T) {
	for _, tc := range []struct {
		name             string
		provider, caller Dialect
		in, want         string
	}{
		{"Anthropic text to chat, cache reads as cached tokens", AnthropicMessages, OpenAIChat,
			`{"id":"msg_01","type":"message","role":"assistant","model":"claude-x","content":[{"type":"text","text":"Hi "},{"type":"text","text":"there"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":3,"cache_creation_input_tokens":2,"cache_read_input_tokens":5}}`,
			`{"id":"chatcmpl-01","object":"chat.completion","created":1700000000,"model":"claude-x","choices":[{"index":0,"message":{"role":"assistant","content":"Hi there","refusal":null},"finish_reason":"stop","logprobs":null}],"usage":{"prompt_tokens":17,"completion_tokens":3,"total_tokens":20,"prompt_tokens_details":{"cached_tokens":5}}}`},
		{"Anthropic tool use to chat tool calls", AnthropicMessages, OpenAIChat,
			`{"id":"msg_02","model":"claude-x","content":[{"type":"tool_use","id":"toolu_1","name":"w","input":{"city":"Paris"}}],"stop_reason":"tool_use","usage":{"input_tokens":10,"output_tokens":3}}`,
			`{"id":"chatcmpl-02","object":"chat.completion","created":1700000000,"model":"claude-x","choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":null,"tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"w","arguments":"{\"city\":\"Paris\"}"}}]},"finish_reason":"tool_calls","logprobs":null}],"usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13,"prompt_tokens_details":{"cached_tokens":0}}}`},
		{"Anthropic max_tokens to length", AnthropicMessages, OpenAIChat,
			`{"id":"msg_03","model":"c","content":[{"type":"text","text":"Hi"}],"stop_reason":"max_tokens","usage":{"input_tokens":1,"output_tokens":1}}`,
			`{"id":"chatcmpl-03","object":"chat.completion","created":1700000000,"model":"c","choices":[{"index":0,"message":{"role":"assistant","content":"Hi","refusal":null},"finish_reason":"length","logprobs":null}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2,"prompt_tokens_details":{"cached_tokens":0}}}`},
		{"Anthropic refusal to content_filter", AnthropicMessages, OpenAIChat,
			`{"id":"msg_04","model":"c","content":[],"stop_reason":"refusal","usage":{"input_tokens":1,"output_tokens":0}}`,
			`{"id":"chatcmpl-04","object":"chat.completion","created":1700000000,"model":"c","choices":[{"index":0,"message":{"role":"assistant","content":"","refusal":null},"finish_reason":"content_filter","logprobs":null}],"usage":{"prompt_tokens":1,"completion_tokens":0,"total_tokens":1,"prompt_tokens_details":{"cached_tokens":0}}}`},
		{"chat text to Anthropic, cached tokens as cache reads", OpenAIChat, AnthropicMessages,
			`{"id":"chatcmpl-9","object":"chat.completion","created":1,"model":"gpt-x","choices":[{"index":0,"message":{"role":"assistant","content":"Hi","refusal":null},"finish_reason":"stop","logprobs":null}],"usage":{"prompt_tokens":17,"completion_tokens":3,"total_tokens":20,"prompt_tokens_details":{"cached_tokens":5}}}`,
			`{"id":"msg_9","type":"message","role":"assistant","model":"gpt-x","content":[{"type":"text","text":"Hi"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":3,"cache_creation_input_tokens":0,"cache_read_input_tokens":5}}`},
		{"chat tool calls to Anthropic tool use", OpenAIChat, AnthropicMessages,
			`{"id":"chatcmpl-8","model":"gpt-x","choices":[{"index":0,"message":{"role":"assistant","content":"Let me check.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"w","arguments":"{\"city\":\"Paris\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":5,"completion_tokens":4,"total_tokens":9}}`,
			`{"id":"msg_8","type":"message","role":"assistant","model":"gpt-x","content":[{"type":"text","text":"Let me check."},{"type":"tool_use","id":"call_1","name":"w","input":{"city":"Paris"}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":5,"output_tokens":4,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`},
		{"chat length to max_tokens", OpenAIChat, AnthropicMessages,
			`{"id":"chatcmpl-7","model":"g","choices":[{"message":{"content":"Hi"},"finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`,
			`{"id":"msg_7","type":"message","role":"assistant","model":"g","content":[{"type":"text","text":"Hi"}],"stop_reason":"max_tokens","stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`},
		{"chat refusal to Anthropic refusal", OpenAIChat, AnthropicMessages,
			`{"id":"chatcmpl-6","model":"g","choices":[{"message":{"content":null,"refusal":"I can't."},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`,
			`{"id":"msg_6","type":"message","role":"assistant","model":"g","content":[{"type":"text","text":"I can't."}],"stop_reason":"refusal","stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}`},
		{"Anthropic text and tool use to a Responses object", AnthropicMessages, OpenAIResponses,
			`{"id":"msg_05","model":"claude-x","content":[{"type":"text","text":"Checking."},{"type":"tool_use","id":"toolu_1","name":"w","input":{"city":"Paris"}}],"stop_reason":"tool_use","usage":{"input_tokens":10,"output_tokens":3,"cache_read_input_tokens":4}}`,
			`{"id":"resp_05","object":"response","created_at":1700000000,"status":"completed","error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":"claude-x",
			  "output":[{"type":"message","id":"msg_05_0","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Checking.","annotations":[],"logprobs":[]}]},
			            {"type":"function_call","id":"fc_toolu_1","call_id":"toolu_1","name":"w","arguments":"{\"city\":\"Paris\"}","status":"completed"}],
			  "parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":false,"temperature":null,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":null,"truncation":"disabled",
			  "usage":{"input_tokens":14,"input_tokens_details":{"cached_tokens":4},"output_tokens":3,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":17},"user":null,"metadata":{}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Answer(tc.provider, tc.caller, []byte(tc.in), 1700000000)
			if err != nil {
				t.Fatal(err)
			}
			jsonEqual(t, got, tc.want)
		})
	}
}

// A Responses answer cut by max_tokens is incomplete.
func TestResponsesIncomplete(t *testing.T) {
	got, err := Answer(AnthropicMessages, OpenAIResponses, []byte(`{"id":"msg_1","model":"c","content":[{"type":"text","text":"Hi"}],"stop_reason":"max_tokens","usage":{"input_tokens":1,"output_tokens":1}}`), 1)
	if err != nil {
		t.Fatal(err)
	}
	o, _ := parseObj(got, "")
	if string(o["status"]) != `"incomplete"` || string(o["incomplete_details"]) != `{"reason":"max_output_tokens"}` {
		t.Errorf("got status %s details %s, want incomplete for max_output_tokens", o["status"], o["incomplete_details"])
	}
}

// Provider errors reach the caller in its own format.
func TestErrorBodies(t *testing.T) {
	for _, tc := range []struct {
		name             string
		provider, caller Dialect
		status           int
		in, want         string
	}{
		{"Anthropic rate limit to OpenAI", AnthropicMessages, OpenAIChat, 429,
			`{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`,
			`{"error":{"message":"slow down","type":"rate_limit_exceeded","param":null,"code":"rate_limit_error"}}`},
		{"Anthropic overloaded to Responses", AnthropicMessages, OpenAIResponses, 529,
			`{"type":"error","error":{"type":"overloaded_error","message":"busy"}}`,
			`{"error":{"message":"busy","type":"server_error","param":null,"code":"overloaded_error"}}`},
		{"Anthropic invalid request to OpenAI", AnthropicMessages, OpenAIChat, 400,
			`{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}`,
			`{"error":{"message":"bad","type":"invalid_request_error","param":null,"code":"invalid_request_error"}}`},
		{"OpenAI auth to Anthropic", OpenAIChat, AnthropicMessages, 401,
			`{"error":{"message":"bad key","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`,
			`{"type":"error","error":{"type":"authentication_error","message":"bad key"}}`},
		{"OpenAI 500 to Anthropic", OpenAIChat, AnthropicMessages, 500,
			`{"error":{"message":"oops","type":"server_error"}}`,
			`{"type":"error","error":{"type":"api_error","message":"oops"}}`},
		{"OpenAI non-JSON to Anthropic", OpenAIChat, AnthropicMessages, 502,
			`<html>bad gateway</html>`,
			`{"type":"error","error":{"type":"api_error","message":"the provider answered 502: <html>bad gateway</html>"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jsonEqual(t, ErrorBody(tc.provider, tc.caller, tc.status, []byte(tc.in)), tc.want)
		})
	}
}
