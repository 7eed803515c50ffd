package llmproxy

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/policy"
)

// chatBody is a fixed request: its reservation is 86 input tokens (its fallback gpt-backup is
// an OpenAI-compatible server: 64 per call, 16 per message, "user" and "hi" by bytes) + 50
// output tokens.
const chatBody = `{"model":"gpt-test","max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`

func TestParallelCallsNeverOverspend(t *testing.T) {
	const reserve = 86 + 50
	budget := int64(10*reserve + 100) // ten calls fit, an eleventh only clamped (to 14), a twelfth not at all
	e := newEnv(t, setup{llmExtra: fmt.Sprintf("    budget: {tokens: %d}\n", budget)})
	e.openai.Hold = make(chan struct{})
	e.openai.Arrived = make(chan struct{}, 100)
	const n = 100
	var wg sync.WaitGroup
	statuses := make(chan int, n)
	refused := make(chan struct{}, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, h, body := e.post("/v1/chat/completions", chatBody)
			// The rest of the budget is held by calls in flight, not spent: retry soon.
			if status == http.StatusTooManyRequests {
				if !strings.Contains(body, "reserved by calls in flight") || h.Get("X-Airlock-Decision") != "deny" || h.Get("Retry-After") != "1" {
					t.Errorf("429 %v %s", h, body)
				}
				refused <- struct{}{}
			}
			statuses <- status
		}()
	}
	// Every call that does not fit is refused while the eleven that do are held by the provider.
	for range n - 11 {
		<-refused
	}
	for range 11 {
		<-e.openai.Arrived
	}
	if got := e.openai.InFlight(); got != 11 {
		t.Errorf("%d calls reached the provider, want exactly 11", got)
	}
	close(e.openai.Hold)
	wg.Wait()
	close(statuses)
	count := map[int]int{}
	for s := range statuses {
		count[s]++
	}
	if count[200] != 11 || count[429] != 89 {
		t.Errorf("statuses %v, want 11×200 and 89×429", count)
	}
	if err := e.ledger.Flush(); err != nil {
		t.Fatal(err)
	}
	tot, pu := e.ledger.Totals().Total, e.openai.TotalUsage()
	if tot.Input != pu.Input || tot.Output != pu.Output || tot.Requests != 11 {
		t.Errorf("ledger %+v, provider %+v: want the sum of the real usage", tot, pu)
	}
	if tot.Input+tot.Output > budget {
		t.Errorf("spent %d of %d", tot.Input+tot.Output, budget)
	}
	if st := e.proxy.budget.State(); st.HeldTokens != 0 || st.UsedTokens != pu.Input+pu.Output {
		t.Errorf("budget state %+v after every call ended", st)
	}
}

func TestLedgerSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, setup{stateDir: dir, llmExtra: "    budget: {tokens: 100000, usd: 1}\n"})
	for range 3 {
		if s, _, b := e.post("/v1/chat/completions", chatBody); s != 200 {
			t.Fatalf("%d %s", s, b)
		}
	}
	before := e.proxy.Usage()
	e.stopFn()
	pol := e.proxy.cfg.Policy.Current()
	e.start(pol)
	after := e.proxy.Usage()
	if before.Total != after.Total || *before.Budget.TokensRemaining != *after.Budget.TokensRemaining ||
		*before.Budget.USDRemaining != *after.Budget.USDRemaining {
		t.Errorf("before restart %+v %+v, after %+v %+v", before.Total, before.Budget, after.Total, after.Budget)
	}
	if before.Total.Requests != 3 || before.Total.Output != 15 {
		t.Errorf("usage %+v", before.Total)
	}
}

func TestLedgerTornAndCorruptLines(t *testing.T) {
	dir := t.TempDir()
	l, err := OpenLedger(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Append(Record{Kind: RecordReserve, ID: "a", Model: "m", Input: 100, Output: 50, CostNano: 7})
	l.Append(Record{Kind: RecordSettle, ID: "a", Model: "m", Input: 10, Output: 5, CostNano: 3})
	l.Append(Record{Kind: RecordReserve, ID: "b", Model: "m", Input: 20, Output: 30, CostNano: 9})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, LedgerFile)
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"seq":4,"kind":"settle","id":"b","inp`) // a write cut short by a crash
	f.Close()

	l, err = OpenLedger(dir, nil)
	if err != nil {
		t.Fatalf("torn last line: %v", err)
	}
	tot := l.Totals().Total
	// "b" never settled: charged at its reservation, marked estimated.
	if tot.Requests != 2 || tot.Input != 30 || tot.Output != 35 || tot.CostNano != 12 || tot.Estimated != 1 {
		t.Errorf("totals %+v", tot)
	}
	l.Close()
	data, _ := os.ReadFile(path)
	if strings.Contains(string(data), `"inp`+"\n") || !strings.HasSuffix(string(data), "\n") {
		t.Errorf("torn line not cut:\n%s", data)
	}
	// A changed line in the middle is not a crash: refuse to guess.
	bad := strings.Replace(string(data), `"input_tokens":10,`, `"input_tokens":11,`, 1)
	os.WriteFile(path, []byte(bad), 0o600)
	if _, err := OpenLedger(dir, nil); !errors.Is(err, ErrLedgerCorrupt) || !strings.Contains(err.Error(), ":2:") {
		t.Errorf("corrupt middle line: %v, want ErrLedgerCorrupt at line 2", err)
	}
	if _, err := ReadLedger(dir); !errors.Is(err, ErrLedgerCorrupt) {
		t.Errorf("ReadLedger: %v", err)
	}
}

func TestBudgetCaps(t *testing.T) {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	tests := []struct {
		name    string
		caps    policy.Budget
		ask     Ask
		want    error
		wantCap string
		wantOut int64
	}{
		{"fits", policy.Budget{Tokens: 100}, Ask{In: 50, Out: 50, Choices: 1}, nil, "", 50},
		{"clamped", policy.Budget{Tokens: 100}, Ask{In: 60, Out: 50, Choices: 1}, nil, "", 40},
		{"clamped per choice", policy.Budget{Tokens: 100}, Ask{In: 40, Out: 50, Choices: 3}, nil, "", 20},
		{"strict does not clamp", policy.Budget{Tokens: 100}, Ask{In: 60, Out: 50, Choices: 1, Strict: true}, ErrBudgetExhausted, "tokens", 0},
		{"input alone does not fit", policy.Budget{Tokens: 100}, Ask{In: 100, Out: 50, Choices: 1}, ErrBudgetExhausted, "tokens", 0},
		{"embeddings fit", policy.Budget{Tokens: 100}, Ask{In: 100}, nil, "", 0},
		{"usd clamped", policy.Budget{USD: 0.0001}, Ask{In: 50, Out: 100, Choices: 1, Price: policy.Price{InputPerMTok: 1, OutputPerMTok: 1}}, nil, "", 50},
		{"usd exhausted", policy.Budget{USD: 0.000001}, Ask{In: 2, Out: 5, Choices: 1, Price: policy.Price{InputPerMTok: 1000}}, ErrBudgetExhausted, "usd", 0},
		{"larger than a minute, bucket full", policy.Budget{TokensPerMinute: 10}, Ask{In: 11}, nil, "", 0},
		{"larger than a minute, strict", policy.Budget{TokensPerMinute: 10}, Ask{In: 11, Strict: true}, ErrRateLimited, "tokensPerMinute", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBudget(clock, 0, 0)
			h, err := b.Reserve(tc.caps, tc.ask)
			var be *BudgetError
			if !errors.Is(err, tc.want) || (err != nil && (!errors.As(err, &be) || be.Cap != tc.wantCap)) {
				t.Fatalf("got %v, want %v (%s)", err, tc.want, tc.wantCap)
			}
			if err == nil && h.Out != tc.wantOut {
				t.Errorf("granted %d output tokens, want %d", h.Out, tc.wantOut)
			}
		})
	}
}

func TestTokenBucket(t *testing.T) {
	now := time.Unix(1000, 0)
	b := NewBudget(func() time.Time { return now }, 0, 0)
	caps := policy.Budget{TokensPerMinute: 600} // refills 10 tokens a second
	// A call larger than the cap is admitted on a full bucket and leaves it in debt.
	h, err := b.Reserve(caps, Ask{In: 900})
	if err != nil {
		t.Fatalf("full bucket: %v", err)
	}
	b.Settle(h, 900, 0)
	_, err = b.Reserve(caps, Ask{In: 100})
	var be *BudgetError
	if !errors.As(err, &be) || !errors.Is(err, ErrRateLimited) || be.RetryAfter != 40*time.Second {
		t.Fatalf("in debt: %v, want rate limited for 40s (from -300 to 100 at 10/s)", err)
	}
	now = now.Add(40 * time.Second)
	h, err = b.Reserve(caps, Ask{In: 100})
	if err != nil {
		t.Fatalf("after refilling: %v", err)
	}
	// What a call reserved and did not use goes back at once.
	b.Settle(h, 10, 0)
	if _, err := b.Reserve(caps, Ask{In: 90, Strict: true}); err != nil {
		t.Errorf("refund: %v", err)
	}
	// A call larger than the cap on a bucket that is not full waits until it is full.
	_, err = b.Reserve(caps, Ask{In: 700})
	if !errors.As(err, &be) || be.RetryAfter != 60*time.Second {
		t.Errorf("large call on a partial bucket: %v, want a wait of 60s until full", err)
	}

	// Requests per minute: the same bucket, one token per request.
	b = NewBudget(func() time.Time { return now }, 0, 0)
	rpm := policy.Budget{RequestsPerMinute: 2}
	for range 2 {
		h, err := b.Reserve(rpm, Ask{In: 1})
		if err != nil {
			t.Fatal(err)
		}
		b.Settle(h, 1, 0)
	}
	_, err = b.Reserve(rpm, Ask{In: 1})
	if !errors.As(err, &be) || !errors.Is(err, ErrRateLimited) || be.RetryAfter != 30*time.Second {
		t.Fatalf("third request: %v, want rate limited for 30s", err)
	}
	now = now.Add(30 * time.Second)
	if _, err := b.Reserve(rpm, Ask{In: 1}); err != nil {
		t.Errorf("after refilling: %v", err)
	}
}

func TestRateLimitAnswer(t *testing.T) {
	e := newEnv(t, setup{llmExtra: "    budget: {requestsPerMinute: 1}\n"})
	if s, _, b := e.post("/v1/chat/completions", chatBody); s != 200 {
		t.Fatalf("%d %s", s, b)
	}
	s, h, body := e.post("/v1/chat/completions", chatBody)
	if s != 429 || h.Get("Retry-After") == "" || !strings.Contains(body, "rate_limit_exceeded") {
		t.Errorf("second call: %d retry-after %q %s", s, h.Get("Retry-After"), body)
	}
	s, h, body = e.post("/v1/messages", `{"model":"claude-test","max_tokens":5,"messages":[]}`)
	if s != 429 || h.Get("Retry-After") == "" || !strings.Contains(body, `"type":"rate_limit_error"`) {
		t.Errorf("anthropic format: %d %s", s, body)
	}
}

// TestAdmitRefuses: a call the usage meter does not admit (spec.usage.caps reached) is
// refused before any reservation, as an exhausted budget (403, no retry), and never reaches
// the provider.
func TestAdmitRefuses(t *testing.T) {
	var refuse atomic.Bool
	refuse.Store(true)
	e := newEnv(t, setup{admit: func() error {
		if refuse.Load() {
			return errors.New("airlock: the sandbox's usage cap is reached: spec.usage.caps.cpuSeconds 1 reached")
		}
		return nil
	}})
	body := `{"model":"gpt-test","messages":[{"role":"user","content":"hi"}]}`
	code, h, resp := e.post("/v1/chat/completions", body)
	if code != 403 || h.Get("X-Airlock-Decision") != "deny" || !strings.Contains(resp, "spec.usage.caps.cpuSeconds") || !strings.Contains(resp, "insufficient_quota") {
		t.Errorf("refused call: %d %v %s", code, h, resp)
	}
	if n := e.openai.Calls(); n != 0 {
		t.Errorf("provider calls %d, want none", n)
	}
	if st := e.proxy.Spend(); st.HeldNano != 0 || st.UsedNano != 0 {
		t.Errorf("spend after a refused call: %+v, want nothing held or used", st)
	}
	refuse.Store(false)
	if code, _, resp := e.post("/v1/chat/completions", body); code != 200 {
		t.Errorf("admitted call: %d %s", code, resp)
	}
}
