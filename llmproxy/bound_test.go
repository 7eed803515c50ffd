package llmproxy

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/test/fakellm"
)

// gpt4oModel adds a model with a real OpenAI name (its tokenizer and image rules are known)
// to the test policy, before extra llm fields.
const gpt4oModel = "      - {name: gpt-4o, provider: openai, price: {inputPerMTok: 2.5, outputPerMTok: 10}}\n"

// pngDataURL is a w×h PNG as a data URL.
func pngDataURL(t testing.TB, w, h int) string {
	var buf bytes.Buffer
	if err := png.Encode(&buf, image.NewGray(image.Rect(0, 0, w, h))); err != nil {
		t.Fatal(err)
	}
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(buf.Bytes())
}

func TestImageRules(t *testing.T) {
	tests := []struct {
		name, model string
		w, h        int
		detail      string
		want        int64
	}{
		{"gpt-4o low", "gpt-4o", 4000, 4000, "low", 85},
		{"gpt-4o 1024 square", "gpt-4o", 1024, 1024, "high", 85 + 170*4},      // OpenAI's worked example: 765
		{"gpt-4o 2048x4096", "gpt-4o", 2048, 4096, "high", 85 + 170*6},        // 768×1536: 1105
		{"gpt-4o unknown size", "gpt-4o", 0, 0, "auto", 85 + 170*8},           // the most tiles
		{"gpt-4o-mini", "gpt-4o-mini", 1024, 1024, "high", 2833 + 5667*4},     // 33× dearer per tile
		{"gpt-4.1-mini patches", "gpt-4.1-mini", 1024, 1024, "high", 1659},    // 1024 patches × 1.62
		{"gpt-4.1-mini capped", "gpt-4.1-mini", 4000, 4000, "high", 2489},     // 1536 × 1.62
		{"unknown model, unknown size", "llama", 0, 0, "high", 2833 + 5667*8}, // the dearest rule
		{"unknown model, low", "llama", 0, 0, "low", 3779},                    // 1536 patches × 2.46: the patch rule ignores detail
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			url := "https://example.test/cat.png"
			if tc.w > 0 {
				url = pngDataURL(t, tc.w, tc.h)
			}
			if got := openaiImageTokens(tc.model, url, tc.detail); got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
	if got := anthropicImageTokens(strings.TrimPrefix(pngDataURL(t, 200, 150), "data:image/png;base64,")); got != 40 {
		t.Errorf("claude 200×150: got %d, want 40", got)
	}
	if got := anthropicImageTokens(""); got != anthropicMaxImageTokens {
		t.Errorf("claude unknown: got %d", got)
	}
}

func TestUnboundableRefusedUnderHardBudget(t *testing.T) {
	e := newEnv(t, setup{llmExtra: gpt4oModel + "    budget: {tokens: 100000}\n"})
	tests := []struct{ name, path, body, why string }{
		{"previous_response_id", "/v1/responses", `{"model":"gpt-4o","input":"hi","previous_response_id":"resp_1"}`, "previous_response_id"},
		{"store", "/v1/chat/completions", `{"model":"gpt-4o","store":true,"messages":[{"role":"user","content":"hi"}]}`, `store`},
		{"file_id", "/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"file-1"}}]}]}`, "file_id"},
		{"server tool", "/v1/responses", `{"model":"gpt-4o","input":"hi","tools":[{"type":"web_search"}]}`, "web_search"},
		{"anthropic server tool", "/v1/messages", `{"model":"claude-test","max_tokens":5,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"web_search_20250305","name":"web_search"}]}`, "web_search_20250305"},
		{"anthropic file image", "/v1/messages", `{"model":"claude-test","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"file","file_id":"f"}}]}]}`, "file_id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, h, body := e.post(tc.path, tc.body)
			if s != http.StatusForbidden || !strings.Contains(body, "cannot be bounded") || !strings.Contains(body, tc.why) ||
				h.Get("X-Should-Retry") != "false" || h.Get("X-Airlock-Error") != "unbounded_cost" {
				t.Errorf("got %d %s", s, body)
			}
		})
	}
	if n := e.openai.Calls() + e.anthropic.Calls(); n != 0 {
		t.Errorf("%d refused calls reached a provider", n)
	}
	// Without a lifetime cap nothing needs bounding.
	free := newEnv(t, setup{llmExtra: gpt4oModel})
	if s, _, body := free.post("/v1/chat/completions", tests[1].body); s != 200 {
		t.Errorf("no hard budget: %d %s", s, body)
	}
}

func TestClampedCall(t *testing.T) {
	e := newEnv(t, setup{openai: fakellm.Config{CountInput: true, Reply: strings.Repeat("word ", 200)},
		llmExtra: gpt4oModel + "    budget: {tokens: 100}\n"})
	// A call that fits by its bytes never loads a tokenizer.
	if s, _, body := e.post("/v1/chat/completions", `{"model":"gpt-4o","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`); s != 200 {
		t.Fatalf("%d %s", s, body)
	}
	if n := e.proxy.tok.loads.Load(); n != 0 {
		t.Errorf("%d vocabularies loaded for a call that fits by bytes", n)
	}
	used := e.proxy.budget.State().UsedTokens
	s, h, body := e.post("/v1/chat/completions", `{"model":"gpt-4o","max_tokens":200,"messages":[{"role":"user","content":"hi"}]}`)
	if s != 200 {
		t.Fatalf("%d %s", s, body)
	}
	// Input counted with o200k: 8 per call, 6 per message, "user" and "hi" 1 token + 1 each.
	want := 100 - used - (8 + 6 + 2 + 2)
	if got := h.Get("X-Airlock-Output-Clamped"); got != strconv.FormatInt(want, 10) {
		t.Errorf("X-Airlock-Output-Clamped %q, want %d", got, want)
	}
	var resp struct {
		Usage struct {
			CompletionTokens int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	_ = json.Unmarshal([]byte(body), &resp)
	if resp.Usage.CompletionTokens != want {
		t.Errorf("the provider produced %d tokens, want the clamped %d", resp.Usage.CompletionTokens, want)
	}
	if n := e.proxy.tok.loads.Load(); n != 1 {
		t.Errorf("%d vocabularies loaded, want o200k only", n)
	}
	rem, err := strconv.ParseInt(h.Get("X-Airlock-Budget-Remaining-Tokens"), 10, 64)
	if err != nil || rem != 0 {
		t.Errorf("X-Airlock-Budget-Remaining-Tokens %q, want 0 while the call holds the rest", h.Get("X-Airlock-Budget-Remaining-Tokens"))
	}
	// What is left after settling is less than the input bound: the next call is refused,
	// 403 in the API's shape, and names the cap.
	s, h, body = e.post("/v1/chat/completions", `{"model":"gpt-4o","max_tokens":200,"messages":[{"role":"user","content":"hi"}]}`)
	if s != http.StatusForbidden || !strings.Contains(body, `"code":"insufficient_quota"`) || !strings.Contains(body, "llm.budget.tokens: 100") ||
		h.Get("X-Should-Retry") != "false" || h.Get("X-Airlock-Budget-Remaining-Tokens") == "" {
		t.Errorf("exhausted: %d %v %s", s, h, body)
	}
	e.stopFn() // the audit log is written asynchronously: closing it flushes
	if !strings.Contains(e.audit.String(), fmt.Sprintf(`"output_clamped":%d`, want)) {
		t.Errorf("audit event does not say the call was clamped:\n%s", e.audit.String())
	}
}

// prose is n bytes of deterministic English prose.
func prose(n int) string {
	words := strings.Fields(`the a river town morning light people walked along quiet streets while
		children played near old stone bridges and merchants opened their small shops before noon
		every season brought new travellers who spoke of distant cities mountains forests and seas
		history remembers those years as a time of patient work careful building honest trade
		she wrote letters to her brother describing gardens markets music festivals rain and harvest
		he answered slowly because the roads were long and messengers were few in winter`)
	var b strings.Builder
	x := uint32(12345)
	next := func(m int) int { x = x*1664525 + 1013904223; return int(x>>16) % m }
	for b.Len() < n {
		k := 8 + next(12)
		for i := range k {
			w := words[next(len(words))]
			if i == 0 {
				w = strings.ToUpper(w[:1]) + w[1:]
			}
			b.WriteString(w)
			if i < k-1 {
				b.WriteByte(' ')
			}
		}
		b.WriteString(". ")
		if next(6) == 0 {
			b.WriteString("\n\n")
		}
	}
	return b.String()[:n]
}

func TestLargePromptUnderTokensPerMinute(t *testing.T) {
	// The clock stands still: the bucket refills 3 333 tokens a second, so on a slow machine
	// (two 600 KB prompts tokenized under -race) a real clock could refill it between calls.
	frozen := time.Now()
	e := newEnv(t, setup{openai: fakellm.Config{CountInput: true}, llmExtra: gpt4oModel + "    budget: {tokensPerMinute: 200000}\n",
		now: func() time.Time { return frozen }})
	text := prose(600 << 10)
	body, _ := json.Marshal(map[string]any{"model": "gpt-4o", "max_tokens": 100,
		"messages": []any{map[string]any{"role": "user", "content": text}}})
	s, _, answer := e.post("/v1/chat/completions", string(body))
	if s != 200 {
		t.Fatalf("600 KB prompt, full bucket: %d %s", s, answer[:min(len(answer), 300)])
	}
	used := e.openai.TotalUsage().Input
	if used < 100000 || used > 200000 {
		t.Errorf("the provider counted %d input tokens, want about 150k", used)
	}
	recs := ledgerRecords(t, e)
	if len(recs) != 2 || recs[0].Input < used || recs[0].Input > used+100 {
		t.Errorf("reserved %+v for a %d-token prompt: want the o200k count (plus overheads), not the bytes", recs, used)
	}
	// The bucket now holds 200k minus what was used: a second such call waits.
	s, h, _ := e.post("/v1/chat/completions", string(body))
	if s != http.StatusTooManyRequests || h.Get("Retry-After") == "" {
		t.Errorf("second 600 KB prompt: %d Retry-After %q, want 429 with Retry-After", s, h.Get("Retry-After"))
	}
}

// ledgerRecords reads every record of the test's ledger file.
func ledgerRecords(t *testing.T, e *env) []Record {
	t.Helper()
	if err := e.ledger.Flush(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(e.stateDir, LedgerFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []Record
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		r, ok := decodeRecord(sc.Bytes())
		if !ok {
			t.Fatalf("bad ledger line %s", sc.Text())
		}
		out = append(out, r)
	}
	return out
}

// burstCall is one call of the burst: its body and whether the client cuts its stream.
func burstCall(t *testing.T, i int, img string) (string, bool) {
	msg := func(content any) []any { return []any{map[string]any{"role": "user", "content": content}} }
	b := map[string]any{"model": "gpt-4o", "messages": msg(fmt.Sprintf("Call %d: say hello.", i))}
	cut := false
	switch i % 5 {
	case 0:
		b["n"], b["max_tokens"] = 3, 20
	case 1:
		b["max_tokens"] = 30
		b["messages"] = msg([]any{map[string]any{"type": "text", "text": "What is this?"},
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": img, "detail": "high"}}})
	case 2:
		b["stream"], b["max_tokens"], cut = true, 40, true
		b["metadata"] = map[string]any{"fake_hang_after": "2"}
	case 3:
		b["stream"], b["n"], b["max_completion_tokens"] = true, 2, 25
	case 4:
		b["max_tokens"] = 60
	}
	raw, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw), cut
}

// cutStream sends a streaming call and hangs up after two content deltas.
func cutStream(e *env, body string) (int, error) {
	req, _ := http.NewRequest(http.MethodPost, e.URL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	sc := bufio.NewScanner(resp.Body)
	deltas := 0
	for deltas < 2 && sc.Scan() {
		if strings.Contains(sc.Text(), `"content":"`) && !strings.Contains(sc.Text(), `"content":""`) {
			deltas++
		}
	}
	return resp.StatusCode, sc.Err()
}

func TestBurstNeverOverspends(t *testing.T) {
	const budget = 3000
	e := newEnv(t, setup{openai: fakellm.Config{CountInput: true},
		llmExtra: gpt4oModel + fmt.Sprintf("    budget: {tokens: %d}\n", budget)})
	img := pngDataURL(t, 600, 400) // 2 tiles: 425 tokens
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body, cut := burstCall(t, i, img)
			var s int
			if cut {
				var err error
				if s, err = cutStream(e, body); err != nil {
					t.Errorf("call %d: %v", i, err)
				}
			} else {
				s, _, _ = e.post("/v1/chat/completions", body)
			}
			mu.Lock()
			statuses[s]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	// Then spend what is left, one call at a time, until the budget refuses.
	for i := 0; ; i++ {
		body, _ := burstCall(t, 4, img)
		s, _, _ := e.post("/v1/chat/completions", body)
		statuses[s]++
		if s == http.StatusForbidden {
			break
		}
		if i > 200 {
			t.Fatal("the budget never ran out")
		}
	}
	e.stopFn() // every call settled
	recs := ledgerRecords(t, e)
	// A cut call forwarded two deltas, "Hello " and "from ", each counted with o200k.
	count := newTokenizers().counter(encO200k)
	wantCut := count("Hello ") + count("from ")
	reserves := map[string]Record{}
	var charged, estIn, estOut, cuts int64
	for _, r := range recs {
		if r.Kind == RecordReserve {
			reserves[r.ID] = r
			continue
		}
		res := reserves[r.ID]
		charged += r.Input + r.Output
		if r.Input > res.Input || r.Input+r.Output > res.Input+res.Output {
			t.Errorf("call %s charged %d+%d, more than it reserved (%d+%d): the bound does not hold", r.ID, r.Input, r.Output, res.Input, res.Output)
		}
		if r.Estimated {
			cuts++
			estIn, estOut = estIn+r.Input, estOut+r.Output
			if r.Output != wantCut {
				t.Errorf("cut call %s charged %d output tokens, want the %d it forwarded", r.ID, r.Output, wantCut)
			}
		}
	}
	// The documented worst-case overshoot of a lifetime cap is zero when the provider keeps
	// to max_tokens (docs/llm.md, llm.budget).
	if charged > budget {
		t.Errorf("charged %d tokens under a cap of %d", charged, budget)
	}
	pu, tot := e.openai.TotalUsage(), e.ledger.Totals().Total
	if tot.Input != pu.Input+estIn || tot.Output != pu.Output+estOut {
		t.Errorf("ledger %d in / %d out; provider reported %d / %d for completed calls, cut calls counted %d / %d",
			tot.Input, tot.Output, pu.Input, pu.Output, estIn, estOut)
	}
	if statuses[200] < 10 || statuses[403] == 0 || cuts == 0 || charged < budget-200 {
		t.Errorf("statuses %v, %d cut: want a mix of answered, cut and refused calls", statuses, cuts)
	}
	t.Logf("statuses %v, %d cut, %d of %d tokens charged", statuses, cuts, charged, budget)
}

func TestAnthropicCutStreamCharged(t *testing.T) {
	e := newEnv(t, setup{llmExtra: "    budget: {tokens: 100000}\n"})
	// The fake sends message_start, content_block_start, ping and one delta, then waits.
	e.anthropic.Step = make(chan struct{}, 3)
	for range 3 {
		e.anthropic.Step <- struct{}{}
	}
	e.anthropic.Canceled = make(chan struct{}, 1)
	req, _ := http.NewRequest(http.MethodPost, e.URL+"/v1/messages",
		strings.NewReader(`{"model":"claude-test","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && !strings.Contains(sc.Text(), `"text_delta"`) {
	}
	resp.Body.Close()
	<-e.anthropic.Canceled
	e.stopFn()
	var settle *Record
	for _, r := range ledgerRecords(t, e) {
		if r.Kind == RecordSettle {
			settle = &r
		}
	}
	// Input as message_start reported it; output "Hello " counted by its bytes (no Claude
	// tokenizer is published).
	if settle == nil || !settle.Estimated || settle.Input != 12 || settle.Output != int64(len("Hello ")) {
		t.Errorf("settle %+v, want estimated, 12 input, 6 output", settle)
	}
}
