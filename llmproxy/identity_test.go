package llmproxy

import (
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/airlock-dev/airlock/policy"
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

// TestIdentityUsageSurvivesRestart: each call's ledger records name its identity, the usage
// report has each identity's figures, and a restarted proxy restores an identity's budget
// from the ledger (its own cap keeps refusing), not from zero.
func TestIdentityUsageSurvivesRestart(t *testing.T) {
	ids := &fakeIdentities{}
	e := newEnv(t, setup{stateDir: t.TempDir(), identities: ids, llmExtra: "    budget: {tokens: 100000}\n" +
		"  identities:\n    reviewer: {llm: {budget: {tokens: 150}}}\n    author: {}\n"})
	call := `{"model":"gpt-test","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	ids.set("author", nil)
	if s, _, body := e.post("/v1/chat/completions", call); s != 200 {
		t.Fatalf("author's call: %d %s", s, body)
	}
	ids.set("reviewer", nil)
	refused := false
	for range 20 {
		if s, _, _ := e.post("/v1/chat/completions", call); s == 403 {
			refused = true
			break
		}
	}
	if !refused {
		t.Fatal("reviewer's own budget never refused it")
	}
	before := e.proxy.Usage()
	own := e.proxy.idRoutes.budget("reviewer", nil).State()
	if len(before.Identities) != 2 || before.Identities[0].Identity != "author" || before.Identities[0].Total.Requests != 1 ||
		before.Identities[1].Identity != "reviewer" || before.Identities[1].Total.Input+before.Identities[1].Total.Output != own.UsedTokens {
		t.Fatalf("usage report identities = %+v, want author's one call and reviewer's %d tokens", before.Identities, own.UsedTokens)
	}
	if got := before.Total.Requests; got != before.Identities[0].Total.Requests+before.Identities[1].Total.Requests {
		t.Errorf("sandbox total %d requests, want the identities' sum", got)
	}

	// The metrics carry the identity too (requests count the refused call as well).
	byID := requestsByIdentity(t, e.proxy.metrics.requests)
	if want := float64(before.Identities[1].Total.Requests + 1); byID["author"] != 1 || byID["reviewer"] != want {
		t.Errorf("airlock_llm_requests_total by identity = %v, want author 1 and reviewer %v", byID, want)
	}
	if got := testutil.ToFloat64(e.proxy.metrics.denied.WithLabelValues(string(policy.ReasonBudgetExhausted), "reviewer")); got != 1 {
		t.Errorf("airlock_llm_denied_total{reason=budget_exhausted,identity=reviewer} = %v, want 1", got)
	}

	e.stopFn()
	e.start(e.proxy.cfg.Policy.Current())
	if got := e.proxy.idRoutes.budget("reviewer", nil).State().UsedTokens; got != own.UsedTokens {
		t.Errorf("reviewer's budget after restart used %d tokens, want %d from the ledger", got, own.UsedTokens)
	}
	if s, _, body := e.post("/v1/chat/completions", call); s != 403 || !strings.Contains(body, "spec.identities.reviewer.llm.budget.tokens") {
		t.Errorf("reviewer after restart: %d %s, want its own cap still refusing", s, body)
	}
	ids.set("author", nil)
	if s, _, body := e.post("/v1/chat/completions", call); s != 200 {
		t.Errorf("author after restart: %d %s", s, body)
	}
	if after := e.proxy.Usage(); len(after.Identities) != 2 || after.Identities[0].Total.Requests != 2 {
		t.Errorf("after restart identities = %+v, want author at 2 calls", after.Identities)
	}
}

// A record of the sandbox's own identity is written as before identities existed (no
// "identity" field), and a ledger without one has no identity figures.
func TestLedgerWithoutIdentities(t *testing.T) {
	line := string(encodeRecord(Record{Seq: 1, Kind: RecordSettle, ID: "c1", Model: "m", Input: 3, Output: 4}))
	if strings.Contains(line, "identity") {
		t.Errorf("a record without identity encodes %q, want no identity field", line)
	}
	r, ok := decodeRecord([]byte(strings.TrimSuffix(line, "\n")))
	if !ok || r.Identity != "" || r.Input != 3 {
		t.Fatalf("decode %q: %+v %v", line, r, ok)
	}
	rp := &replay{ids: map[string]*usageSet{}, open: map[string]Record{}}
	rp.apply(r)
	if tot := rp.totals(); len(tot.Identities) != 0 || tot.Total.Requests != 1 {
		t.Errorf("totals %+v, want one call and no identities", tot)
	}
	if _, ok := rp.totals().Identity("reviewer"); ok {
		t.Error("Identity(reviewer) found in a ledger without it")
	}
}

// requestsByIdentity sums a requests counter by its identity label.
func requestsByIdentity(t *testing.T, c *prometheus.CounterVec) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "identity" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}
