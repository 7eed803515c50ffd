package llmproxy

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/airlock-dev/airlock/policy"
)

func (e *env) openaiClient() openai.Client {
	return openai.NewClient(option.WithBaseURL(e.URL+"/v1/"), option.WithAPIKey(callerKey), option.WithMaxRetries(0))
}

func (e *env) anthropicClient() anthropic.Client {
	return anthropic.NewClient(aoption.WithBaseURL(e.URL+"/"), aoption.WithAPIKey(callerKey), aoption.WithMaxRetries(0))
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestOpenAISDKChat(t *testing.T) {
	e := newEnv(t, setup{})
	c := e.openaiClient()
	params := openai.ChatCompletionNewParams{Model: "gpt-test",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
	got, err := c.Chat.Completions.New(ctxT(t), params)
	if err != nil {
		t.Fatalf("chat: %v", err)
	}
	if got.Choices[0].Message.Content != "Hello from the fake provider" {
		t.Errorf("content %q", got.Choices[0].Message.Content)
	}
	if got.Usage.PromptTokens != 12 || got.Usage.CompletionTokens != 5 {
		t.Errorf("usage %+v, want 12/5", got.Usage)
	}
	if u := e.openai.Usage()["gpt-upstream"]; u.Calls != 1 {
		t.Errorf("provider saw %+v for gpt-upstream: the model must be rewritten", e.openai.Usage())
	}

	stream := c.Chat.Completions.NewStreaming(ctxT(t), params)
	var text strings.Builder
	var chunks int
	for stream.Next() {
		ch := stream.Current()
		chunks++
		if len(ch.Choices) > 0 {
			text.WriteString(ch.Choices[0].Delta.Content)
		}
		if ch.Usage.TotalTokens != 0 {
			t.Errorf("usage chunk reached a caller that did not ask for it")
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if text.String() != "Hello from the fake provider" || chunks != 7 {
		t.Errorf("stream text %q in %d chunks, want the reply in 7", text.String(), chunks)
	}

	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream = c.Chat.Completions.NewStreaming(ctxT(t), params)
	var usage openai.CompletionUsage
	for stream.Next() {
		if u := stream.Current().Usage; u.TotalTokens != 0 {
			usage = u
		}
	}
	if err := stream.Err(); err != nil || usage.PromptTokens != 12 || usage.CompletionTokens != 5 {
		t.Errorf("asked-for usage chunk: %+v, err %v", usage, err)
	}
	e.settled(t, 3)
	tot := e.ledger.Totals().Total
	pu := e.openai.TotalUsage()
	if tot.Requests != 3 || tot.Input != pu.Input || tot.Output != pu.Output {
		t.Errorf("ledger %+v, provider %+v: want equal usage", tot, pu)
	}
	if want := costNano(policy.Price{InputPerMTok: 1, OutputPerMTok: 2}, pu.Input, 0); tot.CostNano < want {
		t.Errorf("cost %d below input cost %d", tot.CostNano, want)
	}
	for _, h := range e.openai.Headers() {
		if h.Get("Authorization") != "Bearer "+openaiKey {
			t.Errorf("provider got Authorization %q, want the provider key", h.Get("Authorization"))
		}
	}
	e.assertKeysSeparated()
}

func TestOpenAISDKCompletionsEmbeddingsResponses(t *testing.T) {
	e := newEnv(t, setup{})
	c := e.openaiClient()
	ctx := ctxT(t)
	comp, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: "gpt-test",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("say")}})
	if err != nil || comp.Usage.PromptTokens != 12 || comp.Usage.CompletionTokens != 5 {
		t.Fatalf("completions: %v, %+v", err, comp)
	}
	emb, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "gpt-test",
		Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("x")}})
	if err != nil || len(emb.Data) != 1 || emb.Usage.PromptTokens != 12 {
		t.Fatalf("embeddings: %v, %+v", err, emb)
	}
	resp, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-test",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	if err != nil || resp.OutputText() != "Hello from the fake provider" || resp.Usage.OutputTokens != 5 {
		t.Fatalf("responses: %v, %+v", err, resp)
	}
	stream := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "gpt-test",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	var completed bool
	var text strings.Builder
	for stream.Next() {
		ev := stream.Current()
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.completed":
			completed = ev.Response.Usage.InputTokens == 12 && ev.Response.Usage.OutputTokens == 5
		}
	}
	if err := stream.Err(); err != nil || !completed || text.String() != "Hello from the fake provider" {
		t.Fatalf("responses stream: err %v, completed with usage %v, text %q", err, completed, text.String())
	}
	e.settled(t, 4)
	tot, pu := e.ledger.Totals().Total, e.openai.TotalUsage()
	if tot.Requests != 4 || tot.Input != pu.Input || tot.Output != pu.Output || tot.Estimated != 0 {
		t.Errorf("ledger %+v, provider %+v", tot, pu)
	}
	e.assertKeysSeparated()
}

func TestAnthropicSDKMessages(t *testing.T) {
	e := newEnv(t, setup{})
	c := e.anthropicClient()
	params := anthropic.MessageNewParams{Model: "claude-test", MaxTokens: 100,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}
	msg, err := c.Messages.New(ctxT(t), params)
	if err != nil {
		t.Fatalf("messages: %v", err)
	}
	if msg.Content[0].Text != "Hello from the fake provider" || msg.Usage.InputTokens != 12 || msg.Usage.OutputTokens != 5 {
		t.Errorf("message %+v", msg)
	}
	stream := c.Messages.NewStreaming(ctxT(t), params)
	var acc anthropic.Message
	var names []string
	for stream.Next() {
		ev := stream.Current()
		names = append(names, string(ev.Type))
		if err := acc.Accumulate(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if acc.Content[0].Text != "Hello from the fake provider" || acc.Usage.OutputTokens != 5 {
		t.Errorf("accumulated %+v", acc)
	}
	if names[0] != "message_start" || names[len(names)-1] != "message_stop" {
		t.Errorf("event order %v", names)
	}
	count, err := c.Messages.CountTokens(ctxT(t), anthropic.MessageCountTokensParams{Model: "claude-test",
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
	if err != nil || count.InputTokens != 12 {
		t.Errorf("count_tokens: %v %+v", err, count)
	}
	e.settled(t, 2)
	tot, pu := e.ledger.Totals().Total, e.anthropic.TotalUsage()
	if tot.Requests != 2 || tot.Input != pu.Input || tot.Output != pu.Output {
		t.Errorf("ledger %+v, provider %+v", tot, pu)
	}
	for _, h := range e.anthropic.Headers() {
		if h.Get("X-Api-Key") != anthropicKey || h.Get("Authorization") != "" {
			t.Errorf("provider got x-api-key %q authorization %q", h.Get("X-Api-Key"), h.Get("Authorization"))
		}
	}
	e.assertKeysSeparated()
}

func TestModelNotAllowed(t *testing.T) {
	e := newEnv(t, setup{})
	_, err := e.oc().Chat.Completions.New(ctxT(t), openai.ChatCompletionNewParams{Model: "gpt-5-secret",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.StatusCode != http.StatusNotFound || oe.Code != "model_not_found" ||
		!strings.Contains(oe.Message, "gpt-test, gpt-backup, claude-test") {
		t.Errorf("openai: %v", err)
	}
	_, err = e.ac().Messages.New(ctxT(t), anthropic.MessageNewParams{Model: "claude-opus-9", MaxTokens: 10,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusNotFound || ae.Type() != "not_found_error" ||
		!strings.Contains(ae.RawJSON(), "allowed models") {
		t.Errorf("anthropic: %v", err)
	}
	// A model of the other API, on an endpoint that has no translation, is refused in the
	// caller's API format.
	_, err = e.ac().Messages.CountTokens(ctxT(t), anthropic.MessageCountTokensParams{Model: "gpt-test",
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadRequest || ae.Type() != "invalid_request_error" {
		t.Errorf("wrong API: %v", err)
	}
	if e.openai.Calls()+e.anthropic.Calls() != 0 {
		t.Errorf("a refused call reached a provider")
	}
	models, err := e.oc().Models.List(ctxT(t))
	if err != nil || len(models.Data) != 3 || models.Data[0].ID != "gpt-test" {
		t.Errorf("models: %v %+v", err, models)
	}
}

func TestStreamEventByEvent(t *testing.T) {
	e := newEnv(t, setup{})
	// The provider sends an event only after the client has received the previous one: a
	// buffering proxy deadlocks here and the context's deadline fails the test.
	e.openai.Step = make(chan struct{})
	e.anthropic.Step = make(chan struct{})
	ctx := ctxT(t)
	stream := e.oc().Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "gpt-test",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	n := 0
	for stream.Next() {
		n++
		steps := 1
		if ch := stream.Current(); len(ch.Choices) > 0 && ch.Choices[0].FinishReason != "" {
			steps = 2 // the usage chunk airlock asked for, and drops, comes next
		}
		for range steps {
			select {
			case e.openai.Step <- struct{}{}:
			case <-ctx.Done():
				t.Fatal("the provider did not ask for the next event")
			}
		}
	}
	if err := stream.Err(); err != nil || n != 7 {
		t.Fatalf("openai stream: %d events, %v", n, err)
	}
	as := e.ac().Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: "claude-test", MaxTokens: 50,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
	n = 0
	step := func() {
		select {
		case e.anthropic.Step <- struct{}{}:
		case <-ctx.Done():
			t.Fatal("the provider did not ask for the next event")
		}
	}
	for as.Next() {
		n++
		if as.Current().Type == "content_block_start" {
			step() // the SDK skips the ping that follows
		}
		if as.Current().Type != "message_stop" {
			step()
		}
	}
	if err := as.Err(); err != nil || n != 10 {
		t.Fatalf("anthropic stream: %d events, %v", n, err)
	}
	e.settled(t, 2)
	if tot := e.ledger.Totals().Total; tot.Output != 10 || tot.Input != 24 {
		t.Errorf("ledger %+v: want the providers' 24 input and 10 output tokens", tot)
	}
}

func TestClientDisconnectCancelsUpstream(t *testing.T) {
	e := newEnv(t, setup{})
	e.openai.Step = make(chan struct{})
	e.openai.Canceled = make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(ctxT(t))
	stream := e.oc().Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "gpt-test",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	if !stream.Next() {
		t.Fatalf("first event: %v", stream.Err())
	}
	cancel()
	stream.Close()
	select {
	case <-e.openai.Canceled:
	case <-time.After(10 * time.Second):
		t.Fatal("the provider's request was not cancelled when the client went away")
	}
}

func (e *env) oc() *openai.Client {
	c := e.openaiClient()
	return &c
}

func (e *env) ac() *anthropic.Client {
	c := e.anthropicClient()
	return &c
}
