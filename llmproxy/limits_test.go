package llmproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-dev/airlock/test/fakellm"
)

// bodyRecorder is an openai-compatible provider (fakellm) that keeps every body it receives.
type bodyRecorder struct {
	fake *fakellm.Server
	// mu guards bodies.
	mu     sync.Mutex
	bodies [][]byte
}

func (b *bodyRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	b.mu.Lock()
	b.bodies = append(b.bodies, body)
	b.mu.Unlock()
	r.Body = io.NopCloser(bytes.NewReader(body))
	b.fake.ServeHTTP(w, r)
}

func (b *bodyRecorder) last(t *testing.T) []byte {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.bodies) == 0 {
		t.Fatal("the provider received nothing")
	}
	return b.bodies[len(b.bodies)-1]
}

// at returns the value at a dotted path of a JSON object (nil when absent).
func at(t *testing.T, body []byte, path string) json.RawMessage {
	t.Helper()
	var obj map[string]json.RawMessage
	for _, k := range strings.Split(path, ".") {
		if obj == nil && json.Unmarshal(body, &obj) != nil {
			t.Fatalf("not an object: %s", body)
		}
		v, ok := obj[k]
		if !ok {
			return nil
		}
		body, obj = v, nil
	}
	return body
}

func newRecorderEnv(t *testing.T, extra string) (*env, *bodyRecorder) {
	rec := &bodyRecorder{fake: fakellm.New(fakellm.Config{Flavor: fakellm.OpenAI, Key: openaiKey})}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	return newEnv(t, setup{backupURL: srv.URL, llmExtra: extra}), rec
}

// Self-hosted servers behind an openai-compatible provider each read their own output limit
// field, some inside a parameter object, some with "no limit" spelled -1. Whatever field,
// spelling, container or duplicate the caller uses, the provider must receive nothing that
// lets it produce more than airlock reserved (4096, the model's default cap, here), and the
// standard max_tokens must be set so a server that ignores the vendor field has a limit too.
func TestVendorOutputFieldsNeverExceedReservation(t *testing.T) {
	e, rec := newRecorderEnv(t, "")
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		name string
		body string
		want map[string]string // dotted path → value the provider must receive
	}{
		{"llama.cpp n_predict", `{"model":"gpt-backup","n_predict":300,` + msgs + `}`,
			map[string]string{"n_predict": "300", "max_tokens": "300"}},
		{"ollama options.num_predict", `{"model":"gpt-backup","options":{"num_predict":200},` + msgs + `}`,
			map[string]string{"options.num_predict": "200", "max_tokens": "200"}},
		{"tgi parameters.max_new_tokens with a lower max_tokens", `{"model":"gpt-backup","max_tokens":10,"parameters":{"max_new_tokens":900},` + msgs + `}`,
			map[string]string{"parameters.max_new_tokens": "900", "max_tokens": "10"}},
		{"gemini generationConfig.maxOutputTokens", `{"model":"gpt-backup","generationConfig":{"maxOutputTokens":700},` + msgs + `}`,
			map[string]string{"generationConfig.maxOutputTokens": "700", "max_tokens": "700"}},
		{"nested extra_body.google.generation_config", `{"model":"gpt-backup","extra_body":{"google":{"generation_config":{"max_output_tokens":333}}},` + msgs + `}`,
			map[string]string{"extra_body.google.generation_config.max_output_tokens": "333", "max_tokens": "333"}},
		{"other spellings", `{"model":"gpt-backup","Max-New-Tokens":50,"MAX_TOKENS":40,` + msgs + `}`,
			map[string]string{"Max-New-Tokens": "50", "MAX_TOKENS": "40", "max_tokens": "50"}},
		{"min_tokens above the limit is lowered", `{"model":"gpt-backup","max_tokens":20,"min_tokens":4000,` + msgs + `}`,
			map[string]string{"min_tokens": "20", "max_tokens": "20"}},
		{"duplicate key in a container is sent once, as read", `{"model":"gpt-backup","options":{"num_predict":99999,"num_predict":64},` + msgs + `}`,
			map[string]string{"options.num_predict": "64", "max_tokens": "64"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _, body := e.post("/v1/chat/completions", tc.body)
			if s != http.StatusOK {
				t.Fatalf("%d %s", s, body)
			}
			got := rec.last(t)
			for path, want := range tc.want {
				if v := at(t, got, path); string(v) != want {
					t.Errorf("provider received %s = %s, want %s (body %s)", path, v, want, got)
				}
			}
			if n := bytes.Count(got, []byte(`"num_predict"`)); n > 1 {
				t.Errorf("provider received num_predict %d times: %s", n, got)
			}
		})
	}
}

// A limit the provider would read as "no limit", or one above the model's cap, or a switch
// that lets the server raise the limit itself, is refused before anything is sent, naming
// the field.
func TestVendorOutputFieldsRefused(t *testing.T) {
	e, rec := newRecorderEnv(t, "")
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		name, body, field string
	}{
		{"n_predict -1 (llama.cpp: infinite)", `{"model":"gpt-backup","n_predict":-1,` + msgs + `}`, "n_predict"},
		{"num_predict -2 (ollama: fill the context)", `{"model":"gpt-backup","options":{"num_predict":-2},` + msgs + `}`, "options.num_predict"},
		{"over the model cap", `{"model":"gpt-backup","max_tokens":10,"max_new_tokens":100000,` + msgs + `}`, "max_new_tokens"},
		{"duplicate key, larger last", `{"model":"gpt-backup","options":{"num_predict":5,"num_predict":99999},` + msgs + `}`, "options.num_predict"},
		{"a string a lax server coerces", `{"model":"gpt-backup","max_length":"100000",` + msgs + `}`, "max_length"},
		{"a float", `{"model":"gpt-backup","parameters":{"max_new_tokens":1e6},` + msgs + `}`, "parameters.max_new_tokens"},
		{"auto_max_new_tokens", `{"model":"gpt-backup","max_tokens":10,"auto_max_new_tokens":true,` + msgs + `}`, "auto_max_new_tokens"},
		{"too many outputs", `{"model":"gpt-backup","num_return_sequences":1000,` + msgs + `}`, "num_return_sequences"},
		{"outputs hidden in a container", `{"model":"gpt-backup","generationConfig":{"candidateCount":0},` + msgs + `}`, "generationConfig.candidateCount"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := rec.fake.Calls()
			s, _, body := e.post("/v1/chat/completions", tc.body)
			if s != http.StatusBadRequest || !strings.Contains(body, tc.field) {
				t.Errorf("got %d %s, want 400 naming %q", s, body, tc.field)
			}
			if rec.fake.Calls() != before {
				t.Error("the refused call reached the provider")
			}
		})
	}
}

// When the budget lowers a call's output, every field that sets it is lowered, in whatever
// spelling and container.
func TestBudgetClampReachesVendorFields(t *testing.T) {
	e, rec := newRecorderEnv(t, "    budget: {tokens: 300}\n")
	s, h, body := e.post("/v1/chat/completions", `{"model":"gpt-backup","max_tokens":1000,"n_predict":1000,`+
		`"options":{"num_predict":1000},"parameters":{"max_new_tokens":1000},"messages":[{"role":"user","content":"hi"}]}`)
	if s != http.StatusOK {
		t.Fatalf("%d %s", s, body)
	}
	clamped := h.Get("X-Airlock-Output-Clamped")
	if clamped == "" {
		t.Fatal("the call was not clamped")
	}
	got := rec.last(t)
	for _, path := range []string{"max_tokens", "n_predict", "options.num_predict", "parameters.max_new_tokens"} {
		if v := at(t, got, path); string(v) != clamped {
			t.Errorf("provider received %s = %s, want the clamped %s", path, v, clamped)
		}
	}
}

// A call answered whole whose caller hangs up once the provider has it is billed by the
// provider: it costs what the provider reports, not nothing.
func TestHungUpCallCharged(t *testing.T) {
	e := newEnv(t, setup{llmExtra: "    budget: {tokens: 100000}\n"})
	e.openai.Hold = make(chan struct{})
	e.openai.Arrived = make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.URL+"/v1/chat/completions", strings.NewReader(chatBody))
		req.Header.Set("Authorization", "Bearer "+callerKey)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	<-e.openai.Arrived
	cancel()
	<-done
	close(e.openai.Hold)
	e.stopFn() // waits for the call to finish and settle
	var settle *Record
	for _, r := range ledgerRecords(t, e) {
		if r.Kind == RecordSettle {
			settle = &r
		}
	}
	use := e.openai.TotalUsage()
	if use.Output == 0 {
		t.Fatal("the provider never answered the call")
	}
	if settle == nil || settle.Estimated || settle.Output != use.Output || settle.Input != use.Input {
		t.Errorf("settle %+v, want the provider's %d input and %d output tokens, not estimated", settle, use.Input, use.Output)
	}
}
