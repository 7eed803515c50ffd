package llmproxy

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/openai/openai-go/v3"

	"github.com/airlock-dev/airlock/egress"
)

func TestRetriesThenFallback(t *testing.T) {
	e := newEnv(t, setup{})
	// 429 then 500, then success: retried before the first byte, invisible to the caller.
	e.openai.FailNext(429, 500)
	if s, _, b := e.post("/v1/chat/completions", chatBody); s != 200 {
		t.Fatalf("retried call: %d %s", s, b)
	}
	if got := e.openai.Usage()["gpt-upstream"].Calls; got != 1 || e.openai.Calls() != 3 {
		t.Errorf("provider calls %d (answered %d), want 3 tries and 1 answer", e.openai.Calls(), got)
	}
	// Three failures exhaust retries: 2 → the fallback model (same fake, another model name).
	e.openai.FailNext(503, 503, 503)
	if s, _, b := e.post("/v1/chat/completions", chatBody); s != 200 {
		t.Fatalf("fallback call: %d %s", s, b)
	}
	if got := e.openai.Usage()["gpt-backup"].Calls; got != 1 {
		t.Errorf("fallback answered %d times, want 1 (usage %+v)", got, e.openai.Usage())
	}
	// Everything fails: the provider's own last error passes through, in its format.
	e.openai.FailNext(500, 500, 500, 500, 500, 500)
	s, _, body := e.post("/v1/chat/completions", chatBody)
	if s != 500 || !strings.Contains(body, "injected failure 500") {
		t.Errorf("exhausted: %d %s", s, body)
	}
	e.ledger.Flush()
	if tot := e.ledger.Totals().Total; tot.Requests != 3 || tot.Estimated != 0 || tot.Output != 10 {
		t.Errorf("ledger %+v: two answered calls, one failed call charged nothing", tot)
	}
}

func TestProviderKeyRedactedFromErrors(t *testing.T) {
	e := newEnv(t, setup{openai: fakeConfig("sk-proj-the-other-key-000000000000", true)})
	// airlock sends openaiKey; the fake wants another and echoes what it got.
	_, err := e.oc().Chat.Completions.New(ctxT(t), openai.ChatCompletionNewParams{Model: "gpt-test",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.StatusCode != 401 || oe.Code != "invalid_api_key" {
		t.Fatalf("want the provider's 401 passed through, got %v", err)
	}
	if strings.Contains(oe.RawJSON(), openaiKey) || strings.Contains(oe.RawJSON(), openaiKey[:8]) || !strings.Contains(oe.RawJSON(), "[REDACTED]") {
		t.Errorf("the provider key reached the caller: %s", oe.RawJSON())
	}
	e.assertKeysSeparated()
}

func TestMissingKeyFailsClosed(t *testing.T) {
	e := newEnv(t, setup{})
	delete(e.keys, "anthropic-key")
	_, err := e.ac().Messages.New(ctxT(t), anthropic.MessageNewParams{Model: "claude-test", MaxTokens: 10,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != 503 || !strings.Contains(ae.RawJSON(), "nothing was sent") {
		t.Fatalf("want 503 in the Anthropic format, got %v", err)
	}
	if len(e.anthropic.Headers()) != 0 {
		t.Errorf("a request reached the provider without its key")
	}
	e.ledger.Flush()
	if tot := e.ledger.Totals().Total; tot.Input+tot.Output != 0 {
		t.Errorf("a call that sent nothing was charged: %+v", tot)
	}
}

func TestStreamCutWhenProviderOverspends(t *testing.T) {
	e := newEnv(t, setup{openai: fakellmIgnoreMax(), anthropic: fakellmIgnoreMax()})
	stream := e.oc().Chat.Completions.NewStreaming(ctxT(t), openai.ChatCompletionNewParams{Model: "gpt-test",
		MaxTokens: openai.Int(2), Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	var deltas int
	for stream.Next() {
		if ch := stream.Current(); len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
			deltas++
		}
	}
	if err := stream.Err(); err == nil || !strings.Contains(err.Error(), "stream cut") || deltas > 2 {
		t.Errorf("openai: %d deltas, err %v: want the stream cut after 2 with an error event", deltas, err)
	}
	as := e.ac().Messages.NewStreaming(ctxT(t), anthropic.MessageNewParams{Model: "claude-test", MaxTokens: 2,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
	for as.Next() {
	}
	var ae *anthropic.Error
	if err := as.Err(); err == nil || !(errors.As(err, &ae) || strings.Contains(err.Error(), "stream cut")) {
		t.Errorf("anthropic: %v", err)
	}
	e.ledger.Flush()
	if tot := e.ledger.Totals().Total; tot.Estimated != 2 {
		t.Errorf("ledger %+v: cut streams are charged their reservation", tot)
	}
}

func TestDialerRefusesInternalNames(t *testing.T) {
	op, err := egress.NewOperator(egress.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tr := &transports{op: op}
	dial := tr.dialer(nil, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := dial(ctx, "tcp", "localhost:1"); !errors.Is(err, ErrInternalAddress) {
		t.Errorf("localhost: %v, want ErrInternalAddress", err)
	}
}

func TestPromptsLoggedOnlyWhenAskedAndRedacted(t *testing.T) {
	const body = `{"model":"gpt-test","max_tokens":5,"messages":[{"role":"user","content":"deploy with token=ghp_0123456789abcdefghijABCDEFGHIJ please"}]}`
	for _, tc := range []struct {
		name, extra string
		logged      bool
	}{
		{"off by default", "", false},
		{"opted in", "    logPrompts: true\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, setup{llmExtra: tc.extra})
			if s, _, b := e.post("/v1/chat/completions", body); s != 200 {
				t.Fatalf("%d %s", s, b)
			}
			e.stopFn() // flushes the audit log
			a := e.audit.String()
			if strings.Contains(a, "ghp_0123456789") {
				t.Errorf("a credential in a prompt reached the audit log: %s", a)
			}
			if got := strings.Contains(a, `"prompt":"`) && strings.Contains(a, "deploy with"); got != tc.logged {
				t.Errorf("prompt logged %v, want %v: %s", got, tc.logged, a)
			}
			if !strings.Contains(a, `"kind":"llm"`) || !strings.Contains(a, `"output_tokens":5`) || !strings.Contains(a, `"model":"gpt-test"`) {
				t.Errorf("audit event lacks the call's fields: %s", a)
			}
		})
	}
}
