package translate

import "testing"

// Recorded Messages requests and the Chat Completions requests they become.
func TestMessagesToChatRequest(t *testing.T) {
	runRequestCases(t, AnthropicMessages, OpenAIChat, RequestOptions{}, []reqCase{
		{name: "system string and user string",
			in:   `{"model":"m","max_tokens":10,"system":"Be brief.","messages":[{"role":"user","content":"Hi"}]}`,
			want: `{"model":"m","max_tokens":10,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]}`},
		{name: "system blocks with cache_control (a caching hint, not carried)",
			in:   `{"model":"m","max_tokens":10,"system":[{"type":"text","text":"A. ","cache_control":{"type":"ephemeral"}},{"type":"text","text":"B."}],"messages":[{"role":"user","content":[{"type":"text","text":"Hi","cache_control":{"type":"ephemeral"}}]}]}`,
			want: `{"model":"m","max_tokens":10,"messages":[{"role":"system","content":"A. B."},{"role":"user","content":"Hi"}]}`},
		{name: "images: base64 and url",
			in:   `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":"What?"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBO"}},{"type":"image","source":{"type":"url","url":"https://img.example/a.jpg"}}]}]}`,
			want: `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":"What?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBO"}},{"type":"image_url","image_url":{"url":"https://img.example/a.jpg"}}]}]}`},
		{name: "tool use and results (error flagged), then user text",
			in:   `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"Weather?"},{"role":"assistant","content":[{"type":"text","text":"Checking."},{"type":"tool_use","id":"t1","name":"w","input":{"city":"Paris"}},{"type":"tool_use","id":"t2","name":"w","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"sunny"},{"type":"tool_result","tool_use_id":"t2","content":[{"type":"text","text":"timeout"}],"is_error":true},{"type":"text","text":"And?"}]}]}`,
			want: `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"Weather?"},{"role":"assistant","content":"Checking.","tool_calls":[{"id":"t1","type":"function","function":{"name":"w","arguments":"{\"city\":\"Paris\"}"}},{"id":"t2","type":"function","function":{"name":"w","arguments":"{}"}}]},{"role":"tool","tool_call_id":"t1","content":"sunny"},{"role":"tool","tool_call_id":"t2","content":"Error: timeout"},{"role":"user","content":"And?"}]}`},
		{name: "assistant tool use only has null content",
			in:   `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"w","input":{}}]}]}`,
			want: `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,"tool_calls":[{"id":"t1","type":"function","function":{"name":"w","arguments":"{}"}}]}]}`},
		{name: "tools, forced tool, no parallel calls",
			in:   `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"x"}],"tools":[{"name":"w","description":"Weather","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral"}},{"type":"custom","name":"now","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"w","disable_parallel_tool_use":true}}`,
			want: `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"w","description":"Weather","parameters":{"type":"object"}}},{"type":"function","function":{"name":"now","parameters":{"type":"object"}}}],"tool_choice":{"type":"function","function":{"name":"w"}},"parallel_tool_calls":false}`},
		{name: "tool_choice any", in: `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"any"}}`,
			want: `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"x"}],"tool_choice":"required"}`},
		{name: "tool_choice auto", in: `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"auto"}}`,
			want: `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"x"}],"tool_choice":"auto"}`},
		{name: "tool_choice none", in: `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"none"}}`,
			want: `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"x"}],"tool_choice":"none"}`},
		{name: "sampling, stop, stream, user",
			in:   `{"model":"m","max_tokens":10,"temperature":0.2,"top_p":0.5,"stop_sequences":["END","STOP"],"stream":true,"metadata":{"user_id":"u1"},"service_tier":"auto","thinking":{"type":"disabled"},"messages":[{"role":"user","content":"x"}]}`,
			want: `{"model":"m","max_tokens":10,"temperature":0.2,"top_p":0.5,"stop":["END","STOP"],"stream":true,"user":"u1","messages":[{"role":"user","content":"x"}]}`},
		{name: "top_k", in: `{"model":"m","max_tokens":10,"top_k":5,"messages":[{"role":"user","content":"x"}]}`, field: "top_k"},
		{name: "thinking", in: `{"model":"m","max_tokens":10,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"x"}]}`, field: "thinking"},
		{name: "mcp servers", in: `{"model":"m","max_tokens":10,"mcp_servers":[{"type":"url","url":"https://m","name":"m"}],"messages":[{"role":"user","content":"x"}]}`, field: "mcp_servers"},
		{name: "Anthropic-defined tool", in: `{"model":"m","max_tokens":10,"tools":[{"type":"bash_20250124","name":"bash"}],"messages":[{"role":"user","content":"x"}]}`, field: "tools[0].type"},
		{name: "document block", in: `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","media_type":"text/plain","data":"x"}}]}]}`, field: "messages[0].content[0].type"},
		{name: "image from the Files API", in: `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"file","file_id":"f1"}}]}]}`, field: "messages[0].content[0].source.type"},
		{name: "image in a tool result", in: `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image","source":{"type":"url","url":"https://a"}}]}]}]}`, field: "messages[0].content[0].content[0].type"},
		{name: "thinking block in history", in: `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"s"}]}]}`, field: "messages[1].content[0].type"},
		{name: "five stop sequences", in: `{"model":"m","max_tokens":10,"stop_sequences":["a","b","c","d","e"],"messages":[{"role":"user","content":"x"}]}`, field: "stop_sequences"},
		{name: "unknown metadata", in: `{"model":"m","max_tokens":10,"metadata":{"team":"x"},"messages":[{"role":"user","content":"x"}]}`, field: "metadata.team"},
		{name: "role other than user and assistant", in: `{"model":"m","max_tokens":10,"messages":[{"role":"system","content":"x"}]}`, field: "messages[0].role"},
	})
}

// OpenAI itself gets max_completion_tokens (its reasoning models know no other).
func TestMessagesToChatMaxCompletionTokens(t *testing.T) {
	runRequestCases(t, AnthropicMessages, OpenAIChat, RequestOptions{MaxCompletionTokens: true}, []reqCase{
		{name: "max_completion_tokens", in: `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"x"}]}`,
			want: `{"model":"m","max_completion_tokens":10,"messages":[{"role":"user","content":"x"}]}`},
	})
}
