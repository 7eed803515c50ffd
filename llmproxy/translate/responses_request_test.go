package translate

import "testing"

// Recorded Responses requests (the stateless subset) and the Messages requests they become.
func TestResponsesToMessagesRequest(t *testing.T) {
	runRequestCases(t, OpenAIResponses, AnthropicMessages, RequestOptions{}, []reqCase{
		{name: "string input and instructions",
			in:   `{"model":"m","instructions":"Be brief.","input":"Hi","max_output_tokens":10,"temperature":0.3,"top_p":0.8,"stream":true,"user":"u1","store":false,"text":{"format":{"type":"text"}}}`,
			want: `{"model":"m","system":[{"type":"text","text":"Be brief."}],"messages":[{"role":"user","content":[{"type":"text","text":"Hi"}]}],"max_tokens":10,"temperature":0.3,"top_p":0.8,"stream":true,"metadata":{"user_id":"u1"}}`},
		{name: "message items with text and images, developer message",
			in:   `{"model":"m","input":[{"role":"developer","content":"No emoji."},{"type":"message","role":"user","content":[{"type":"input_text","text":"What?"},{"type":"input_image","image_url":"data:image/jpeg;base64,/9j/","detail":"auto"},{"type":"input_image","image_url":"https://img.example/a.png"}]},{"role":"assistant","content":[{"type":"output_text","text":"A cat."}]}]}`,
			want: `{"model":"m","system":[{"type":"text","text":"No emoji."}],"messages":[{"role":"user","content":[{"type":"text","text":"What?"},{"type":"image","source":{"type":"base64","media_type":"image/jpeg","data":"/9j/"}},{"type":"image","source":{"type":"url","url":"https://img.example/a.png"}}]},{"role":"assistant","content":[{"type":"text","text":"A cat."}]}]}`},
		{name: "function call round trip, tools, forced function",
			in:   `{"model":"m","input":[{"role":"user","content":"Weather?"},{"type":"function_call","id":"fc_1","call_id":"call_1","name":"w","arguments":"{\"city\":\"Paris\"}","status":"completed"},{"type":"function_call_output","call_id":"call_1","output":"sunny"}],"tools":[{"type":"function","name":"w","description":"Weather","parameters":{"type":"object"},"strict":false}],"tool_choice":{"type":"function","name":"w"},"parallel_tool_calls":false}`,
			want: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"Weather?"}]},{"role":"assistant","content":[{"type":"tool_use","id":"call_1","name":"w","input":{"city":"Paris"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":"sunny"}]}],"tools":[{"name":"w","description":"Weather","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"w","disable_parallel_tool_use":true}}`},
		{name: "tool_choice required", in: `{"model":"m","input":"x","tools":[{"type":"function","name":"w"}],"tool_choice":"required"}`,
			want: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"x"}]}],"tools":[{"name":"w","input_schema":{"type":"object","properties":{}}}],"tool_choice":{"type":"any"}}`},
		{name: "output items passed back as input",
			in:   `{"model":"m","input":[{"role":"user","content":"Weather?"},{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Checking.","annotations":[],"logprobs":[]}]},{"type":"function_call","id":"fc_1","call_id":"call_1","name":"w","arguments":"{}","status":"completed"},{"type":"function_call_output","call_id":"call_1","output":"sunny"}]}`,
			want: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"Weather?"}]},{"role":"assistant","content":[{"type":"text","text":"Checking."},{"type":"tool_use","id":"call_1","name":"w","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":"sunny"}]}]}`},
		{name: "unknown item field", in: `{"model":"m","input":[{"role":"user","content":"x","phase":"final"}]}`, field: "input[0].phase"},
		{name: "previous_response_id", in: `{"model":"m","input":"x","previous_response_id":"resp_1"}`, field: "previous_response_id"},
		{name: "store", in: `{"model":"m","input":"x","store":true}`, field: "store"},
		{name: "conversation", in: `{"model":"m","input":"x","conversation":"conv_1"}`, field: "conversation"},
		{name: "background", in: `{"model":"m","input":"x","background":true}`, field: "background"},
		{name: "include", in: `{"model":"m","input":"x","include":["reasoning.encrypted_content"]}`, field: "include"},
		{name: "reasoning", in: `{"model":"m","input":"x","reasoning":{"effort":"high"}}`, field: "reasoning"},
		{name: "top_logprobs", in: `{"model":"m","input":"x","top_logprobs":3}`, field: "top_logprobs"},
		{name: "built-in tool", in: `{"model":"m","input":"x","tools":[{"type":"web_search_preview"}]}`, field: "tools[0].type"},
		{name: "strict function", in: `{"model":"m","input":"x","tools":[{"type":"function","name":"w","strict":true}]}`, field: "tools[0].strict"},
		{name: "built-in tool choice", in: `{"model":"m","input":"x","tool_choice":{"type":"file_search"}}`, field: "tool_choice.type"},
		{name: "image file_id", in: `{"model":"m","input":[{"role":"user","content":[{"type":"input_image","file_id":"file-1"}]}]}`, field: "input[0].content[0].file_id"},
		{name: "input file", in: `{"model":"m","input":[{"role":"user","content":[{"type":"input_file","file_id":"file-1"}]}]}`, field: "input[0].content[0].type"},
		{name: "reasoning item", in: `{"model":"m","input":[{"type":"reasoning","id":"rs_1","summary":[]}]}`, field: "input[0].type"},
		{name: "item reference", in: `{"model":"m","input":[{"type":"item_reference","id":"msg_1"}]}`, field: "input[0].type"},
		{name: "structured output", in: `{"model":"m","input":"x","text":{"format":{"type":"json_schema","name":"s","schema":{}}}}`, field: "text.format"},
		{name: "temperature above 1", in: `{"model":"m","input":"x","temperature":2}`, field: "temperature"},
		{name: "metadata", in: `{"model":"m","input":"x","metadata":{"k":"v"}}`, field: "metadata"},
		{name: "prompt template", in: `{"model":"m","prompt":{"id":"pmpt_1"}}`, field: "prompt"},
	})
}
