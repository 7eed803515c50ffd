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
