package llmproxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/test/fakellm"
)

// A provider's error reaches a translated caller in the caller's own format.
func TestTranslatedProviderErrors(t *testing.T) {
	e := newEnv(t, setup{})
	e.anthropic.FailNext(http.StatusBadRequest)
	status, h, body := e.post("/v1/chat/completions", `{"model":"claude-test","messages":[{"role":"user","content":"hi"}]}`)
	var oe struct {
		Error struct{ Message, Type, Code string } `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &oe); status != 400 || err != nil || oe.Error.Message != "injected failure 400" ||
		oe.Error.Type != "invalid_request_error" || h.Get("Content-Type") != "application/json" {
		t.Errorf("Anthropic 400 to an OpenAI caller: %d %s", status, body)
	}
	e.openai.FailNext(http.StatusNotFound)
	status, _, body = e.post("/v1/messages", `{"model":"gpt-test","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
	var ae struct {
		Type  string
		Error struct{ Type, Message string }
	}
	if err := json.Unmarshal([]byte(body), &ae); status != 404 || err != nil || ae.Type != "error" || ae.Error.Type != "not_found_error" ||
		ae.Error.Message != "injected failure 404" {
		t.Errorf("OpenAI 404 to an Anthropic caller: %d %s", status, body)
	}
}

// A field that cannot be translated is refused before anything is reserved or sent, in
// the caller's format, naming the field.
func TestUntranslatableFieldRefused(t *testing.T) {
	e := newEnv(t, setup{})
	status, h, body := e.post("/v1/responses", `{"model":"claude-test","input":"hi","previous_response_id":"resp_1"}`)
	var oe struct {
		Error struct{ Message, Param, Code string } `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &oe); status != 400 || err != nil || oe.Error.Param != "previous_response_id" ||
		oe.Error.Code != "untranslatable_field" || h.Get("X-Airlock-Error") != "untranslatable_field" {
		t.Errorf("got %d %s", status, body)
	}
	status, _, body = e.post("/v1/messages", `{"model":"gpt-test","max_tokens":5,"top_k":3,"messages":[{"role":"user","content":"hi"}]}`)
	if status != 400 || !strings.Contains(body, `"type":"invalid_request_error"`) || !strings.Contains(body, `field \"top_k\"`) {
		t.Errorf("got %d %s", status, body)
	}
	if n := e.openai.Calls() + e.anthropic.Calls(); n != 0 {
		t.Errorf("%d refused calls reached a provider", n)
	}
	e.stopFn()
	if tot := e.ledger.Totals(); len(tot.Pending) != 0 || tot.Total.Requests != 0 {
		t.Errorf("ledger holds %+v for refused calls", tot)
	}
	if a := e.audit.String(); strings.Count(a, `"reason":"invalid_request"`) != 2 {
		t.Errorf("audit: want two invalid_request denials: %s", a)
	}
}

// The ledger settles a translated call once, in the provider's tokens, and the provider
// got the upstream model in its own dialect.
func TestTranslatedCallSettlesProviderUsage(t *testing.T) {
	e := newEnv(t, setup{anthropic: fakellm.Config{InputTokens: 40}})
	status, _, body := e.post("/v1/chat/completions", `{"model":"claude-test","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`)
	if status != 200 || !strings.Contains(body, `"prompt_tokens":40`) || !strings.Contains(body, `"completion_tokens":3`) {
		t.Fatalf("got %d %s", status, body)
	}
	use := e.anthropic.Usage()["claude-upstream"]
	e.stopFn()
	tot := e.ledger.Totals()
	if use.Calls != 1 || tot.Total.Requests != 1 || tot.Total.Input != use.Input || tot.Total.Output != use.Output || tot.Total.Estimated != 0 {
		t.Errorf("ledger %+v, provider reported %+v", tot.Total, use)
	}
	// 40 input tokens at $3/MTok and 3 output at $15/MTok: the Anthropic model's price.
	if want := int64(40*3000 + 3*15000); tot.Total.CostNano != want {
		t.Errorf("cost %d nano-USD, want %d", tot.Total.CostNano, want)
	}
}

// A provider that ignores the output limit is cut off in the caller's dialect.
func TestTranslatedStreamCutInCallerDialect(t *testing.T) {
	e := newEnv(t, setup{anthropic: fakellm.Config{IgnoreMaxTokens: true, Reply: "one two three four five six seven eight nine ten"}})
	status, _, body := e.post("/v1/chat/completions", `{"model":"claude-test","max_tokens":2,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if status != 200 {
		t.Fatalf("got %d %s", status, body)
	}
	events := strings.Split(strings.TrimSpace(body), "\n\n")
	last := events[len(events)-1]
	if strings.Contains(body, "event:") || !strings.HasPrefix(last, `data: {"error":`) || !strings.Contains(last, "stream cut") {
		t.Errorf("want OpenAI chunks ending in an OpenAI error chunk, got:\n%s", body)
	}
	status, _, body = e.post("/v1/chat/completions", `{"model":"claude-test","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if status != 200 || !strings.HasSuffix(strings.TrimSpace(body), "data: [DONE]") || strings.Contains(body, `"usage":{`) {
		t.Errorf("a whole stream without include_usage: want [DONE] and no usage chunk:\n%s", body)
	}
}

// A translated stream the provider breaks off ends with an error event in the caller's
// dialect (its SDK would otherwise wait for its own last event), and is charged its
// reservation.
func TestTranslatedStreamBrokenByProvider(t *testing.T) {
	broken := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := startStream(w)
		s.send("message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": "msg_b", "type": "message",
			"role": "assistant", "model": "claude-upstream", "content": []any{}, "usage": map[string]any{"input_tokens": 5, "output_tokens": 1}}})
		s.send("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
		s.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": "Hel"}})
		_, _ = w.Write([]byte("event: content_block_delta\ndata: {\"type\":\"content_blo")) // cut mid-event
	})
	srv := httptest.NewServer(broken)
	t.Cleanup(srv.Close)
	pol, err := policy.Parse("translate.yaml", fmt.Appendf(nil, translatePolicy, srv.URL, srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, audit: &auditSink{}, stateDir: t.TempDir(), keys: mapKeys{"openai-key": openaiKey, "anthropic-key": anthropicKey}}
	e.start(pol)
	status, _, body := e.post("/v1/chat/completions", `{"model":"claude-tr","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	events := strings.Split(strings.TrimSpace(body), "\n\n")
	if status != 200 || len(events) != 3 || !strings.Contains(events[1], `"content":"Hel"`) ||
		!strings.HasPrefix(events[2], `data: {"error":`) || !strings.Contains(events[2], "stream broke") {
		t.Errorf("got %d:\n%s", status, body)
	}
	e.stopFn()
	if tot := e.ledger.Totals(); tot.Total.Estimated != 1 || tot.Total.Input+tot.Total.Output < 50 {
		t.Errorf("ledger %+v: want the reservation charged, estimated", tot.Total)
	}
}

// airlock's own refusal of a translated call (here the budget) is in the caller's format.
func TestTranslatedCallRefusedByBudgetInCallerFormat(t *testing.T) {
	e := newEnv(t, setup{llmExtra: "    budget: {tokens: 10}\n"})
	status, h, body := e.post("/v1/chat/completions", `{"model":"claude-test","messages":[{"role":"user","content":"hi"}]}`)
	var oe struct {
		Error struct{ Type, Code string } `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &oe); status != 403 || err != nil || oe.Error.Code != "insufficient_quota" || h.Get("X-Airlock-Decision") != "deny" {
		t.Errorf("OpenAI caller: %d %s", status, body)
	}
	status, _, body = e.post("/v1/messages", `{"model":"gpt-test","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
	if status != 403 || !strings.Contains(body, `"type":"permission_error"`) {
		t.Errorf("Anthropic caller: %d %s", status, body)
	}
	if n := e.openai.Calls() + e.anthropic.Calls(); n != 0 {
		t.Errorf("%d refused calls reached a provider", n)
	}
}

// A translated stream is unbuffered: the provider sends its next event only once the caller
// has received the translation of the previous one (a buffering proxy deadlocks here, and
// the deadline fails the test).
func TestTranslatedStreamEventByEvent(t *testing.T) {
	next := make(chan struct{})
	events := []any{
		map[string]any{"type": "message_start", "message": map[string]any{"id": "msg_s", "type": "message", "role": "assistant",
			"model": "claude-upstream", "content": []any{}, "usage": map[string]any{"input_tokens": 5, "output_tokens": 1}}},
		map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": "one "}},
		map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": "two"}},
		map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn"}, "usage": map[string]any{"output_tokens": 2}},
		map[string]any{"type": "message_stop"},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := startStream(w)
		for i, ev := range events {
			if i > 0 {
				select {
				case <-next:
				case <-r.Context().Done():
					return
				}
			}
			s.send(ev.(map[string]any)["type"].(string), ev)
		}
	}))
	t.Cleanup(srv.Close)
	pol, err := policy.Parse("translate.yaml", fmt.Appendf(nil, translatePolicy, srv.URL, srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, audit: &auditSink{}, stateDir: t.TempDir(), keys: mapKeys{"openai-key": openaiKey, "anthropic-key": anthropicKey}}
	e.start(pol)
	ctx := ctxT(t)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"claude-tr","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	var got []string
	for i := range events {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("event %d: %v (got %q)", i, err, got)
		}
		_, _ = br.ReadString('\n') // the blank line ending the event
		got = append(got, strings.TrimSpace(line))
		if i < len(events)-1 {
			select {
			case next <- struct{}{}:
			case <-ctx.Done():
				t.Fatal("the provider did not ask for the next event")
			}
		}
	}
	if !strings.Contains(got[1], `"content":"one "`) || !strings.Contains(got[3], `"finish_reason":"stop"`) || got[4] != "data: [DONE]" {
		t.Errorf("got %q", got)
	}
}
