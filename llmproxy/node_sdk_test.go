package llmproxy

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/test/fakellm"
	"github.com/airlock-dev/airlock/test/testnet"
)

// The official Node SDKs, pinned; installed from the npm registry once into the repository's
// .cache (shared by worktrees, never committed).
const (
	nodeOpenAI    = "openai@7.55.0"
	nodeAnthropic = "@anthropic-ai/sdk@1.10.0"
)

// nodeSDKs returns the node_modules directory holding the official SDKs
// (testnet.NodeModules: installed once, a skip outside CI and a failure in it without node).
func nodeSDKs(t *testing.T) string { return testnet.NodeModules(t, nodeOpenAI, nodeAnthropic) }

// nodeResult is one call the script made.
type nodeResult struct {
	OK        bool   `json:"ok"`
	Usage     int64  `json:"usage"`
	Remaining string `json:"remaining"`
	Name      string `json:"name"`
	Status    int    `json:"status"`
	Code      string `json:"code"`
	Type      string `json:"type"`
	Message   string `json:"message"`
}

func TestNodeSDKsStopAtBudget(t *testing.T) {
	mods := nodeSDKs(t)
	for _, tc := range []struct{ flavor, model, wantType string }{
		{"openai", "gpt-4o", "insufficient_quota"},
		{"anthropic", "claude-test", "permission_error"},
	} {
		t.Run(tc.flavor, func(t *testing.T) {
			cfg := fakellm.Config{CountInput: true}
			e := newEnv(t, setup{openai: cfg, anthropic: cfg, llmExtra: gpt4oModel + "    budget: {tokens: 200}\n"})
			script, _ := filepath.Abs(filepath.Join("testdata", "node", "budget.cjs"))
			cmd := exec.Command("node", script, tc.flavor, e.URL, tc.model)
			cmd.Env = append(os.Environ(), "NODE_PATH="+mods)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("node: %v\n%s", err, stderr.String())
			}
			var results []nodeResult
			for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				var r nodeResult
				if err := json.Unmarshal([]byte(line), &r); err != nil {
					t.Fatalf("script line %q: %v", line, err)
				}
				results = append(results, r)
			}
			var spent int64
			for _, r := range results[:len(results)-1] {
				spent += r.Usage
				if r.Usage > 30 || r.Remaining == "" {
					t.Errorf("call %+v: want about 20 tokens and X-Airlock-Budget-Remaining-Tokens", r)
				}
			}
			last := results[len(results)-1]
			if last.OK || last.Status != 403 || last.Type != tc.wantType || !strings.Contains(last.Message, "llm.budget.tokens: 200") {
				t.Errorf("last call %+v: want 403 %s naming the cap", last, tc.wantType)
			}
			if len(results) < 6 || spent > 200 {
				t.Errorf("%d calls succeeded spending %d of 200 tokens", len(results)-1, spent)
			}
			// One request per call reached the sidecar: the SDK did not retry the refusal.
			e.stopFn() // the audit log is written asynchronously: closing it flushes
			// Decision-phase lines (written before a call is sent) are not counted.
			if got := strings.Count(e.audit.String(), `"kind":"llm"`) - strings.Count(e.audit.String(), `"phase":"decision"`); got != len(results) {
				t.Errorf("the sidecar received %d requests for %d calls: the SDK retried", got, len(results))
			}
			t.Logf("%s: %d calls spent %d of 200 tokens, then %d %s", tc.flavor, len(results)-1, spent, last.Status, last.Type)
		})
	}
}
