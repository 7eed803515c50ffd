package llmproxy

import (
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/openai/openai-go/v3"
)

// The official Go SDKs call a model of the other provider, plain and streamed, with tool
// calls accumulated from the translated stream.
func TestGoSDKsTranslated(t *testing.T) {
	e := newTranslateEnv(t)
	tool := openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "get_weather",
		Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}})
	params := openai.ChatCompletionNewParams{Model: "claude-tr", Tools: []openai.ChatCompletionToolUnionParam{tool},
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather in Paris?")}}
	stream := e.oc().Chat.Completions.NewStreaming(ctxT(t), params)
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil || len(acc.Choices) != 1 || len(acc.Choices[0].Message.ToolCalls) != 1 {
		t.Fatalf("OpenAI stream to an Anthropic model: %v %+v", err, acc.ChatCompletion)
	}
	call := acc.Choices[0].Message.ToolCalls[0]
	if call.Function.Name != "get_weather" || call.Function.Arguments != `{"city": "Paris"}` || acc.Choices[0].FinishReason != "tool_calls" {
		t.Errorf("tool call %+v finish %q", call, acc.Choices[0].FinishReason)
	}
	params.Messages = append(params.Messages, acc.Choices[0].Message.ToParam(), openai.ToolMessage("sunny", call.ID))
	got, err := e.oc().Chat.Completions.New(ctxT(t), params)
	if err != nil || got.Choices[0].Message.Content != "The tool said: sunny" || got.Choices[0].FinishReason != "stop" {
		t.Errorf("tool answer: %v %+v", err, got)
	}

	ap := anthropic.MessageNewParams{Model: "gpt-tr", MaxTokens: 50,
		Tools:    []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "get_weather", InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}}}}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Weather in Paris?"))}}
	as := e.ac().Messages.NewStreaming(ctxT(t), ap)
	var msg anthropic.Message
	for as.Next() {
		if err := msg.Accumulate(as.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := as.Err(); err != nil || len(msg.Content) != 1 || msg.Content[0].Name != "get_weather" || string(msg.Content[0].Input) != `{"city":"Paris"}` ||
		msg.StopReason != "tool_use" || msg.Usage.InputTokens != fakeIn || msg.Usage.OutputTokens != fakeOut {
		t.Errorf("Anthropic stream to an OpenAI model: %v %+v", err, msg)
	}
}
