//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/airlock-dev/airlock/test/fakellm"
	"github.com/airlock-dev/airlock/test/privtest"
	"github.com/airlock-dev/airlock/test/testnet"
)

// The fake providers' keys: in the sidecar's environment only, never in the sandbox.
const (
	e2eOpenAIKey    = "sk-proj-E2EPROVIDERKEY-openai-00000000000"
	e2eAnthropicKey = "sk-ant-api03-E2EPROVIDERKEY-anthropic-0000"
	e2eCallerKey    = "sk-sandbox-has-no-real-key"
	llmAddr         = "127.0.0.1:4000" // the contract default of --llm-addr
)

const llmPolicy = `apiVersion: airlock/v1
kind: EgressPolicy
metadata: {name: llm-e2e}
spec:
  secrets:
    openai-key: {env: E2E_OPENAI_KEY}
    anthropic-key: {env: E2E_ANTHROPIC_KEY}
  llm:
    providers:
      openai: {baseURL: "http://openai.llm.test:8080", apiKey: {secret: openai-key}}
      anthropic: {baseURL: "http://anthropic.llm.test:8081", apiKey: {secret: anthropic-key}}
    models:
      - {name: gpt-e2e, provider: openai, upstreamModel: gpt-4o-mini, price: {inputPerMTok: 0.15, outputPerMTok: 0.6}}
      - {name: claude-e2e, provider: anthropic, upstreamModel: claude-sonnet-4-5, price: {inputPerMTok: 3, outputPerMTok: 15}}
    budget: {tokens: 1000000, usd: 5}
`

// llmWorld is a World with two fake providers in the upstream namespace, found by name
// through the world's DNS server like real providers.
type llmWorld struct {
	*testnet.World
	openai, anthropic *fakellm.Server
}

func newLLMWorld(t *testing.T) *llmWorld {
	t.Helper()
	privtest.Require(t)
	parallelWorld(t)
	lw := &llmWorld{World: testnet.NewWorld(t),
		openai:    fakellm.New(fakellm.Config{Flavor: fakellm.OpenAI, Key: e2eOpenAIKey}),
		anthropic: fakellm.New(fakellm.Config{Flavor: fakellm.Anthropic, Key: e2eAnthropicKey})}
	addr := netip.MustParseAddr("198.18.0.40")
	lw.AddUpstreamAddr(t, addr)
	lw.DNS.Set("openai.llm.test", testnet.DefaultTTL, addr)
	lw.DNS.Set("anthropic.llm.test", testnet.DefaultTTL, addr)
	for port, h := range map[int]http.Handler{8080: lw.openai, 8081: lw.anthropic} {
		ln, err := lw.Upstream.Listen("tcp", fmt.Sprintf("%s:%d", addr, port))
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: h}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { srv.Close() })
	}
	return lw
}

func (lw *llmWorld) start(t *testing.T, stateDir string) *testnet.Airlock {
	cfg := testnet.AirlockConfig{Binary: airlockBinary(t), Policy: llmPolicy, Sandbox: sandboxName,
		Env: []string{"E2E_OPENAI_KEY=" + e2eOpenAIKey, "E2E_ANTHROPIC_KEY=" + e2eAnthropicKey}}
	if stateDir != "" {
		cfg.Args = []string{"--state-dir", stateDir}
	}
	return lw.StartAirlock(t, cfg)
}

// usage fetches /v1/usage from the admin listener.
func usage(t *testing.T, a *testnet.Airlock) map[string]any {
	t.Helper()
	status, body := a.AdminGet(t, "/v1/usage")
	var u map[string]any
	if status != http.StatusOK || json.Unmarshal([]byte(body), &u) != nil {
		t.Fatalf("/v1/usage: %d %s", status, body)
	}
	return u
}

func TestLLMProxyWithSDKsAndRestart(t *testing.T) {
	lw := newLLMWorld(t)
	a := lw.start(t, "")
	hc := lw.Sidecar.HTTPClient(t, nil)
	oc := openai.NewClient(option.WithBaseURL("http://"+llmAddr+"/v1/"), option.WithAPIKey(e2eCallerKey),
		option.WithHTTPClient(hc), option.WithMaxRetries(0))
	ac := anthropic.NewClient(aoption.WithBaseURL("http://"+llmAddr+"/"), aoption.WithAPIKey(e2eCallerKey),
		aoption.WithHTTPClient(hc), aoption.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	chat, err := oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-e2e",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}})
	if err != nil || chat.Choices[0].Message.Content != "Hello from the fake provider" {
		t.Fatalf("openai chat: %v %+v", err, chat)
	}
	stream := oc.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "gpt-e2e",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}})
	var text strings.Builder
	for stream.Next() {
		if ch := stream.Current(); len(ch.Choices) > 0 {
			text.WriteString(ch.Choices[0].Delta.Content)
		}
	}
	if err := stream.Err(); err != nil || text.String() != "Hello from the fake provider" {
		t.Fatalf("openai stream: %v %q", err, text.String())
	}
	as := ac.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: "claude-e2e", MaxTokens: 64,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))}})
	var msg anthropic.Message
	for as.Next() {
		_ = msg.Accumulate(as.Current())
	}
	if err := as.Err(); err != nil || msg.Usage.OutputTokens != 5 {
		t.Fatalf("anthropic stream: %v %+v", err, msg.Usage)
	}
	_, err = oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-5-unlisted",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}})
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.StatusCode != http.StatusNotFound || !strings.Contains(oe.Message, "gpt-e2e, claude-e2e") {
		t.Errorf("unlisted model: %v", err)
	}

	// Keys: the providers saw their own key only; the caller's never left the sidecar.
	for _, f := range []*fakellm.Server{lw.openai, lw.anthropic} {
		for _, h := range f.Headers() {
			if strings.Contains(fmt.Sprint(h), e2eCallerKey) {
				t.Errorf("a provider received the caller's key: %v", h)
			}
		}
	}
	ev := a.WaitEvent(t, "llm audit event for claude-e2e", func(e testnet.AuditEvent) bool {
		return e.Kind == "llm" && e.Fields["model"] == "claude-e2e"
	})
	if ev.Fields["output_tokens"] != float64(5) || ev.Fields["provider"] != "anthropic" || strings.Contains(ev.Line, "hello") {
		t.Errorf("audit event %s", ev.Line)
	}
	if strings.Contains(a.Stderr.String(), e2eOpenAIKey) || strings.Contains(a.Stderr.String(), e2eAnthropicKey) {
		t.Errorf("a provider key is in airlock's log")
	}
	if v, ok := a.MetricSum(t, "airlock_llm_tokens_total"); !ok || v == 0 {
		t.Errorf("airlock_llm_tokens_total %v %v", v, ok)
	}

	provider := lw.openai.TotalUsage()
	pa := lw.anthropic.TotalUsage()
	before := usage(t, a)
	total := before["total"].(map[string]any)
	if total["input_tokens"] != float64(provider.Input+pa.Input) || total["output_tokens"] != float64(provider.Output+pa.Output) {
		t.Errorf("/v1/usage total %v, providers %+v %+v", total, provider, pa)
	}

	// Restart on the same state directory: the ledger and the budget left are unchanged.
	a.Stop(t)
	b := lw.start(t, a.StateDir)
	after := usage(t, b)
	if fmt.Sprint(before["total"]) != fmt.Sprint(after["total"]) || fmt.Sprint(before["budget"]) != fmt.Sprint(after["budget"]) {
		t.Errorf("after restart:\n%v\nbefore:\n%v", after, before)
	}
	// airlock usage reads the same ledger.
	out, err := lw.Sidecar.Command(ctx, airlockBinary(t), "usage", "--state-dir", a.StateDir, "--policy", b.PolicyFile).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "gpt-e2e") || !strings.Contains(string(out), "tokens:") {
		t.Errorf("airlock usage: %v\n%s", err, out)
	}
}

// The model API is one of the sidecar's own listeners: even a rule naming loopback by CIDR
// does not make it a destination the sandbox can reach through the proxy.
func TestLLMEndpointIsNotAProxyDestination(t *testing.T) {
	lw := newLLMWorld(t)
	pol := llmPolicy + `  egress:
    - name: loopback
      cidrs: ["127.0.0.0/8"]
      ports: [4000, 4001]
`
	a := lw.StartAirlock(t, testnet.AirlockConfig{Binary: airlockBinary(t), Policy: pol, Sandbox: sandboxName,
		Env: []string{"E2E_OPENAI_KEY=" + e2eOpenAIKey, "E2E_ANTHROPIC_KEY=" + e2eAnthropicKey}})
	resp, err := a.Client(t, nil).Get("http://" + llmAddr + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), `"reason":"self_address"`) {
		t.Fatalf("GET the model API through the proxy: %d %s, want 403 self_address", resp.StatusCode, body)
	}
}
