package llmproxy

import (
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
)

// fakeIdentities answers every lookup with who (or err).
type fakeIdentities struct {
	// mu guards who and err.
	mu  sync.Mutex
	who string
	err error
}

func (f *fakeIdentities) Identity(netip.AddrPort) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.who, f.err
}

func (f *fakeIdentities) set(who string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.who, f.err = who, err
}

func TestIdentityModels(t *testing.T) {
	ids := &fakeIdentities{}
	e := newEnv(t, setup{identities: ids, llmExtra: "  identities:\n    reviewer: {llm: {models: [claude-test]}}\n"})
	gpt := `{"model":"gpt-test","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	claude := `{"model":"claude-test","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	tests := []struct {
		name, who string
		err       error
		body      string
		status    int
		code      string
	}{
		{"sandbox calls gpt", "", nil, gpt, 200, ""},
		{"reviewer may not call gpt", "reviewer", nil, gpt, 404, "model_not_found"},
		{"reviewer calls claude", "reviewer", nil, claude, 200, ""},
		{"cgroup not told", "", errors.New("no record"), claude, 403, "identity_unknown"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ids.set(tc.who, tc.err)
			s, _, body := e.post("/v1/chat/completions", tc.body)
			if s != tc.status || (tc.code != "" && !strings.Contains(body, tc.code)) {
				t.Errorf("status %d body %s, want %d %s", s, body, tc.status, tc.code)
			}
		})
	}
	if !strings.Contains(e.audit.String(), `"model":"claude-test"`) || !strings.Contains(e.audit.String(), `"identity":"reviewer"`) {
		t.Errorf("no audit event names identity reviewer:\n%s", e.audit.String())
	}
}

// TestIdentityBudget: an identity's call is charged to its own budget and to the sandbox's;
// its own cap refuses it (naming the identity's field) while the sandbox's other calls go on.
func TestIdentityBudget(t *testing.T) {
	ids := &fakeIdentities{}
	e := newEnv(t, setup{identities: ids, llmExtra: "    budget: {tokens: 100000}\n" +
		"  identities:\n    reviewer: {llm: {budget: {tokens: 150}}}\n    author: {}\n"})
	call := `{"model":"gpt-test","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	ids.set("reviewer", nil)
	if s, _, body := e.post("/v1/chat/completions", call); s != 200 {
		t.Fatalf("reviewer's first call: %d %s", s, body)
	}
	own := e.proxy.idRoutes.budget("reviewer", nil).State()
	sandbox := e.proxy.budget.State()
	if own.UsedTokens == 0 || own.UsedTokens != sandbox.UsedTokens || own.HeldTokens != 0 {
		t.Fatalf("after one reviewer call: reviewer used %d (held %d), sandbox used %d; want the same non-zero charge on both",
			own.UsedTokens, own.HeldTokens, sandbox.UsedTokens)
	}
	// Keep calling until reviewer's 150 tokens run out; the sandbox's 100000 do not.
	var refused string
	for range 20 {
		s, _, body := e.post("/v1/chat/completions", call)
		if s == 403 {
			refused = body
			break
		}
	}
	if !strings.Contains(refused, "spec.identities.reviewer.llm.budget.tokens: 150") {
		t.Fatalf("reviewer was never refused by its own budget; last refusal %q", refused)
	}
	ids.set("author", nil)
	if s, _, body := e.post("/v1/chat/completions", call); s != 200 {
		t.Fatalf("author after reviewer's budget ran out: %d %s", s, body)
	}
	if got := e.proxy.budget.State(); got.UsedTokens <= sandbox.UsedTokens || got.HeldTokens != 0 {
		t.Errorf("sandbox budget after author's call: %+v, want more used than %d and nothing held", got, sandbox.UsedTokens)
	}
}
