package llmproxy

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/policy"
)

// chatBody is a fixed request: its reservation is len(chatBody) + 50 tokens.
const chatBody = `{"model":"gpt-test","max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`

func TestParallelCallsNeverOverspend(t *testing.T) {
	reserve := int64(len(chatBody) + 50)
	budget := 10*reserve + reserve/2 // ten calls fit, an eleventh does not
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
			if status == http.StatusTooManyRequests {
				if !strings.Contains(body, "insufficient_quota") || h.Get("X-Airlock-Decision") != "deny" {
					t.Errorf("429 body %s", body)
				}
				refused <- struct{}{}
			}
			statuses <- status
		}()
	}
	// Every call that does not fit is refused while the ten that do are held by the provider.
	for range n - 10 {
		<-refused
	}
	for range 10 {
		<-e.openai.Arrived
	}
	if got := e.openai.InFlight(); got != 10 {
		t.Errorf("%d calls reached the provider, want exactly 10", got)
	}
	close(e.openai.Hold)
	wg.Wait()
	close(statuses)
	count := map[int]int{}
	for s := range statuses {
		count[s]++
	}
	if count[200] != 10 || count[429] != 90 {
		t.Errorf("statuses %v, want 10×200 and 90×429", count)
	}
	if err := e.ledger.Flush(); err != nil {
		t.Fatal(err)
	}
	tot, pu := e.ledger.Totals().Total, e.openai.TotalUsage()
	if tot.Input != pu.Input || tot.Output != pu.Output || tot.Requests != 10 {
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
	b := NewBudget(func() time.Time { return now }, 0, 0)
	tests := []struct {
		name    string
		caps    policy.Budget
		tokens  int64
		nano    int64
		want    error
		wantCap string
	}{
		{"fits", policy.Budget{Tokens: 100}, 100, 0, nil, ""},
		{"tokens exhausted", policy.Budget{Tokens: 100}, 101, 0, ErrBudgetExhausted, "tokens"},
		{"usd exhausted", policy.Budget{USD: 0.000001}, 1, 1001, ErrBudgetExhausted, "usd"},
		{"too big for a minute", policy.Budget{TokensPerMinute: 10}, 11, 0, ErrBudgetExhausted, "tokensPerMinute"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := b.Reserve(tc.caps, tc.tokens, tc.nano)
			var be *BudgetError
			if !errors.Is(err, tc.want) || (err != nil && (!errors.As(err, &be) || be.Cap != tc.wantCap)) {
				t.Errorf("got %v, want %v (%s)", err, tc.want, tc.wantCap)
			}
			b.Settle(h, 0, 0)
		})
	}
	// Requests per minute: the third in the same minute waits for the first to leave.
	b = NewBudget(func() time.Time { return now }, 0, 0)
	caps := policy.Budget{RequestsPerMinute: 2}
	for range 2 {
		h, err := b.Reserve(caps, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		b.Settle(h, 1, 0)
		now = now.Add(10 * time.Second)
	}
	_, err := b.Reserve(caps, 1, 0)
	var be *BudgetError
	if !errors.As(err, &be) || !errors.Is(err, ErrRateLimited) || be.RetryAfter != 40*time.Second {
		t.Fatalf("third request: %v (retry after %v), want rate limited for 40s", err, be)
	}
	now = now.Add(40 * time.Second)
	if _, err := b.Reserve(caps, 1, 0); err != nil {
		t.Errorf("after the window: %v", err)
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
