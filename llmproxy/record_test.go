package llmproxy

import (
	"strings"
	"testing"
	"time"
)

// A model call's decision event is written before the call goes to the provider; while the
// audit log cannot be written, calls fail closed with 503 audit_unavailable and nothing is
// sent.
func TestModelCallWritesBeforeSending(t *testing.T) {
	e := newEnv(t, setup{})
	const body = `{"model":"gpt-test","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	if s, _, b := e.post("/v1/chat/completions", body); s != 200 {
		t.Fatalf("healthy: got %d %s", s, b)
	}
	log := e.audit.String()
	if !strings.Contains(log, `"phase":"decision"`) || !strings.Contains(log, `"model":"gpt-test"`) {
		t.Fatalf("no decision event for the call:\n%s", log)
	}
	e.audit.full.Store(true)
	calls := e.openai.Calls()
	var status int
	var resp string
	for range 100 { // the first write that fails may be a queued event's, not a call's
		status, _, resp = e.post("/v1/chat/completions", body)
		if status == 503 {
			break
		}
		time.Sleep(time.Millisecond) // polling the writer's state, not synchronising
	}
	if status != 503 || !strings.Contains(resp, "audit_unavailable") {
		t.Fatalf("full audit disk: got %d %s, want 503 audit_unavailable", status, resp)
	}
	sent := e.openai.Calls() - calls
	if s, _, _ := e.post("/v1/chat/completions", body); s != 503 || e.openai.Calls()-calls != sent {
		t.Errorf("while the log is down: got %d and the provider got a call; want 503 and nothing sent", s)
	}
	e.audit.full.Store(false)
}
