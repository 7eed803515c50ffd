package llmproxy

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/internal/fakellm"
)

// The official Node SDKs, pinned; installed from the npm registry once into the repository's
// .cache (shared by worktrees, never committed).
const (
	nodeOpenAI    = "openai@7.55.0"
	nodeAnthropic = "@anthropic-ai/sdk@1.10.0"
)

// nodeSDKs returns the node_modules directory holding the official SDKs, installing them
// when missing. It skips when node or npm is not installed, and fails instead where
// AIRLOCK_PRIVILEGED_TESTS=1 (CI), so CI never passes without the SDKs having run.
func nodeSDKs(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("AIRLOCK_PRIVILEGED_TESTS") == "1" {
				t.Fatalf("%s is not installed: the Node SDK tests need it (AIRLOCK_PRIVILEGED_TESTS=1 turns this skip into a failure)", tool)
			}
			t.Skipf("%s is not installed: the Node SDK tests need it", tool)
		}
	}
	root, err := filepath.Abs(filepath.Join("..", ".cache", "node-sdk", strings.NewReplacer("@", "", "/", "-").Replace(nodeOpenAI+"_"+nodeAnthropic)))
	if err != nil {
		t.Fatal(err)
	}
	mods := filepath.Join(root, "node_modules")
	if _, err := os.Stat(filepath.Join(mods, ".airlock-complete")); err == nil {
		return mods
	}
	if err := os.MkdirAll(filepath.Dir(root), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(root), "install-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	if err := os.WriteFile(filepath.Join(tmp, "package.json"), []byte(`{"private":true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("npm", "install", "--no-audit", "--no-fund", "--ignore-scripts", nodeOpenAI, nodeAnthropic)
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install %s %s: %v\n%s", nodeOpenAI, nodeAnthropic, err, out)
	}
	if err := os.WriteFile(filepath.Join(tmp, "node_modules", ".airlock-complete"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Another test process may have won the race: keep its copy.
	if err := os.Rename(tmp, root); err != nil {
		if _, serr := os.Stat(filepath.Join(mods, ".airlock-complete")); serr != nil {
			t.Fatalf("install the Node SDKs: %v", err)
		}
	}
	return mods
}

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
