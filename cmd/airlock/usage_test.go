package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/llmproxy"
)

func TestUsagePrintsLedger(t *testing.T) {
	dir := t.TempDir()
	l, err := llmproxy.OpenLedger(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Append(llmproxy.Record{Kind: llmproxy.RecordSettle, ID: "a", Model: "gpt-4o-mini", Provider: "openai", Input: 1000, Output: 200, CostNano: 270000})
	l.Append(llmproxy.Record{Kind: llmproxy.RecordSettle, ID: "b", Model: "claude-sonnet", Provider: "anthropic", Input: 10, Output: 5, CostNano: 105000})
	l.Append(llmproxy.Record{Kind: llmproxy.RecordReserve, ID: "c", Model: "gpt-4o-mini", Provider: "openai", Input: 50, Output: 100, CostNano: 1})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(dir, "p.yaml")
	os.WriteFile(pol, []byte("apiVersion: airlock/v1\nkind: EgressPolicy\nmetadata: {name: u}\nspec:\n  llm:\n    budget: {tokens: 5000, usd: 1}\n"), 0o644)

	code, out, errOut := airlock(t, "usage", "--state-dir", dir, "--policy", pol)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"gpt-4o-mini", "claude-sonnet", "1010", "tokens: 3635 of 5000 left", "1 call(s) in flight: 150 tokens reserved"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = airlock(t, "usage", "--state-dir", dir, "--json")
	var u llmproxy.Usage
	if code != 0 || json.Unmarshal([]byte(out), &u) != nil || u.Total.Requests != 2 || u.Total.Input != 1010 || len(u.Models) != 2 {
		t.Errorf("--json: exit %d, %+v\n%s", code, u, out)
	}

	os.WriteFile(filepath.Join(dir, llmproxy.LedgerFile), []byte("{\"bad\":1}\n{\"also\":2}\n"), 0o600)
	if code, _, errOut := airlock(t, "usage", "--state-dir", dir); code != 1 || !strings.Contains(errOut, "ledger corrupt") {
		t.Errorf("corrupt ledger: exit %d, %s", code, errOut)
	}
}
