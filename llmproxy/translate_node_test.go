package llmproxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/policy"
)

// translatePolicy routes gpt-tr to an OpenAI provider and claude-tr to an Anthropic one;
// the %s are their URLs.
const translatePolicy = `apiVersion: airlock/v1
kind: EgressPolicy
metadata: {name: llm-translate}
spec:
  secrets:
    openai-key: {env: TEST_OPENAI_KEY}
    anthropic-key: {env: TEST_ANTHROPIC_KEY}
  llm:
    providers:
      openai: {baseURL: "%s", apiKey: {secret: openai-key}}
      anthropic: {baseURL: "%s", apiKey: {secret: anthropic-key}}
    models:
      - {name: gpt-tr, provider: openai, upstreamModel: gpt-upstream, price: {inputPerMTok: 1, outputPerMTok: 2}}
      - {name: claude-tr, provider: anthropic, upstreamModel: claude-upstream, price: {inputPerMTok: 3, outputPerMTok: 15}}
    budget: {tokens: 1000000}
`

// translateEnv is the proxy in front of the two strict fakes.
type translateEnv struct {
	*env
	oa *openaiFake
	an *anthropicFake
}

func newTranslateEnv(t *testing.T) *translateEnv {
	t.Helper()
	te := &translateEnv{oa: &openaiFake{dialectFake{t: t, key: openaiKey}}, an: &anthropicFake{dialectFake{t: t, key: anthropicKey}}}
	oa, an := httptest.NewServer(te.oa), httptest.NewServer(te.an)
	t.Cleanup(oa.Close)
	t.Cleanup(an.Close)
	pol, err := policy.Parse("translate.yaml", fmt.Appendf(nil, translatePolicy, oa.URL, an.URL))
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	te.env = &env{t: t, audit: &auditSink{}, stateDir: t.TempDir(), keys: mapKeys{"openai-key": openaiKey, "anthropic-key": anthropicKey}}
	te.start(pol)
	return te
}

// nodeStep is one line the translate.cjs script prints.
type nodeStep struct {
	Step    string         `json:"step"`
	Text    string         `json:"text"`
	Finish  string         `json:"finish"`
	Usage   int64          `json:"usage"`
	Object  string         `json:"object"`
	Chunks  int            `json:"chunks"`
	Finish1 string         `json:"finish1"`
	Finish2 string         `json:"finish2"`
	Name    string         `json:"name"`
	Args    map[string]any `json:"args"`
	OK      bool           `json:"ok"`
	Status  int            `json:"status"`
	Param   string         `json:"param"`
	Type    string         `json:"type"`
	Message string         `json:"message"`
}

// runTranslateScript runs translate.cjs and returns its steps by name.
func runTranslateScript(t *testing.T, mods, flavor, url, model string) map[string]nodeStep {
	t.Helper()
	script, _ := filepath.Abs(filepath.Join("testdata", "node", "translate.cjs"))
	cmd := exec.Command("node", script, flavor, url, model)
	cmd.Env = append(os.Environ(), "NODE_PATH="+mods)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s\n%s", err, out, stderr.String())
	}
	steps := map[string]nodeStep{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var s nodeStep
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			t.Fatalf("script line %q: %v", line, err)
		}
		steps[s.Step] = s
	}
	return steps
}

func TestNodeSDKsTranslated(t *testing.T) {
	mods := nodeSDKs(t)
	for _, tc := range []struct {
		flavor, model, reply    string
		object, finish, toolEnd string
		calls                   int // provider calls the script makes (the refused one never leaves)
		refuse                  string
	}{
		{"openai", "claude-tr", "Hello from Anthropic", "chat.completion", "stop", "tool_calls", 6, "n"},
		{"anthropic", "gpt-tr", "Hello from OpenAI", "message", "end_turn", "tool_use", 6, "top_k"},
		{"responses", "claude-tr", "Hello from Anthropic", "response", "completed", "completed", 6, "previous_response_id"},
	} {
		t.Run(tc.flavor, func(t *testing.T) {
			e := newTranslateEnv(t)
			steps := runTranslateScript(t, mods, tc.flavor, e.URL, tc.model)
			want := map[string]nodeStep{
				"plain":  {Step: "plain", Text: tc.reply, Finish: tc.finish, Usage: fakeIn + fakeOut, Object: tc.object},
				"stream": {Step: "stream", Text: tc.reply, Finish: tc.finish, Usage: fakeIn + fakeOut},
				"tools": {Step: "tools", Finish1: tc.toolEnd, Name: "get_weather", Args: map[string]any{"city": "Paris"},
					Text: "The tool said: sunny, 21C", Finish2: tc.finish},
				"tools-stream": {Step: "tools-stream", Finish1: tc.toolEnd, Name: "get_weather", Args: map[string]any{"city": "Paris"},
					Text: "The tool said: rainy", Finish2: tc.finish},
			}
			for name, w := range want {
				got := steps[name]
				if name == "stream" {
					if got.Chunks < 3 {
						t.Errorf("stream: %d chunks: want one per word", got.Chunks)
					}
					got.Chunks = 0
				}
				if !reflect.DeepEqual(got, w) {
					t.Errorf("%s:\n got %+v\nwant %+v", name, got, w)
				}
			}
			r := steps["refuse"]
			if r.OK || r.Status != 400 || !strings.Contains(r.Message, tc.refuse) || !strings.Contains(r.Message, "cannot be translated") {
				t.Errorf("refuse: %+v: want 400 naming %s", r, tc.refuse)
			}
			if tc.flavor != "anthropic" && r.Param != tc.refuse {
				t.Errorf("refuse: param %q, want %q", r.Param, tc.refuse)
			}
			provider := &e.an.dialectFake
			if tc.model == "gpt-tr" {
				provider = &e.oa.dialectFake
			}
			if got := len(provider.Bodies()); got != tc.calls {
				t.Errorf("the provider received %d calls, want %d", got, tc.calls)
			}
			// Each call is counted once, in the provider's tokens.
			if st := e.proxy.budget.State(); st.UsedTokens != int64(tc.calls)*(fakeIn+fakeOut) {
				t.Errorf("budget used %d tokens, want %d", st.UsedTokens, tc.calls*(fakeIn+fakeOut))
			}
			e.stopFn()
			if n := completedTranslated(e.audit.String()); n != tc.calls {
				t.Errorf("%d completion events say translated, want %d", n, tc.calls)
			}
		})
	}
}

// completedTranslated counts the audit lines of completed calls (not the decision events
// written before a call is sent) that say the call was translated.
func completedTranslated(log string) int {
	n := 0
	for line := range strings.Lines(log) {
		if strings.Contains(line, "translated ") && !strings.Contains(line, `"phase":"decision"`) {
			n++
		}
	}
	return n
}
