package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/llmproxy"
	"github.com/airlock-dev/airlock/meter"
	"github.com/airlock-dev/airlock/sandbox"
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

// TestUsagePrintsBills: airlock usage adds each sandbox's bill from the usage ledgers of the
// state directory (its own, its sandboxes', the archive of deleted ones), in the table and
// under "sandboxes" in --json.
func TestUsagePrintsBills(t *testing.T) {
	dir := t.TempDir()
	live := filepath.Join(dir, "sandboxes", "sb1", "sidecar", meter.LedgerFile)
	l, _, err := meter.OpenLedger(live)
	if err != nil {
		t.Fatal(err)
	}
	rec := meter.Record{Kind: meter.KindFreeze, Key: meter.Key{Sandbox: "sb1"}, Totals: meter.Totals{CPUUserUsec: 2_500_000, RxBytes: 4096},
		ComputeUSD: 0.25, ModelUSD: 0.5, Frozen: "spec.usage.caps.cpuSeconds 2 reached"}
	if err := l.Append(rec); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if err := meter.Archive(filepath.Join(dir, meter.ArchiveFile), meter.Record{Key: meter.Key{Sandbox: "gone"}, Totals: meter.Totals{TxBytes: 7}}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := airlock(t, "usage", "--state-dir", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"SANDBOX", "sb1", "frozen", "2.500", "0.750000", "gone", "deleted", "sb1: frozen: spec.usage.caps.cpuSeconds 2 reached"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = airlock(t, "usage", "--state-dir", dir, "--json")
	var u struct {
		Sandboxes []Bill `json:"sandboxes"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &u) != nil || len(u.Sandboxes) != 2 || u.Sandboxes[0].CPUSeconds != 2.5 ||
		u.Sandboxes[0].TotalUSD != 0.75 || u.Sandboxes[1].State != "deleted" {
		t.Errorf("--json: exit %d, %+v\n%s", code, u, out)
	}
}

// TestUsageByIdentity: the calls of each identity are totalled below the models, and
// --identity reports one identity's calls against its own budget.
func TestUsageByIdentity(t *testing.T) {
	dir := t.TempDir()
	l, err := llmproxy.OpenLedger(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Append(llmproxy.Record{Kind: llmproxy.RecordSettle, ID: "a", Identity: "reviewer", Model: "m", Provider: "openai", Input: 100, Output: 20, CostNano: 1000})
	l.Append(llmproxy.Record{Kind: llmproxy.RecordSettle, ID: "b", Identity: "author", Model: "m", Provider: "openai", Input: 7, Output: 3, CostNano: 500})
	l.Append(llmproxy.Record{Kind: llmproxy.RecordSettle, ID: "c", Model: "m", Provider: "openai", Input: 1, Output: 1, CostNano: 1})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(dir, "p.yaml")
	os.WriteFile(pol, []byte("apiVersion: airlock/v1\nkind: EgressPolicy\nmetadata: {name: u}\nspec:\n"+
		"  llm:\n    budget: {tokens: 5000}\n  identities:\n    reviewer: {llm: {budget: {tokens: 200}}}\n    author: {}\n"), 0o644)
	writeIdentityUsage(t, filepath.Join(dir, meter.LedgerFile))

	code, out, errOut := airlock(t, "usage", "--state-dir", dir)
	if code != 0 || !strings.Contains(out, "IDENTITY") || !strings.Contains(out, "reviewer") || !strings.Contains(out, "author") {
		t.Fatalf("exit %d, %s:\n%s", code, errOut, out)
	}
	if !regexp.MustCompile(`(?m)^\s*s/reviewer\s+running\s+1\.500\s+0\.500\s+2\.0\s+0\.000000\s+-\s+-\s+-\s+0\.250000\s+-\s+0\.250000`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^\s*s\s+running\s+4\.000\s+1\.000\s`).MatchString(out) {
		t.Errorf("want a compute row for s/reviewer (network and model \"-\") and the sandbox's row:\n%s", out)
	}
	code, out, errOut = airlock(t, "usage", "--state-dir", dir, "--identity", "reviewer", "--policy", pol)
	if code != 0 || !strings.Contains(out, "tokens: 80 of 200 left") || strings.Contains(out, "author") {
		t.Errorf("--identity reviewer: exit %d, %s:\n%s", code, errOut, out)
	}
	code, out, _ = airlock(t, "usage", "--state-dir", dir, "--identity", "author", "--json")
	var u llmproxy.Usage
	var bs struct {
		Sandboxes []Bill `json:"sandboxes"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &u) != nil || u.Total.Requests != 1 || u.Total.Input != 7 ||
		json.Unmarshal([]byte(out), &bs) != nil || len(bs.Sandboxes) != 1 || bs.Sandboxes[0].Identity != "author" || bs.Sandboxes[0].CPUSeconds != 0.25 {
		t.Errorf("--identity author --json: exit %d, %+v, %+v\n%s", code, u, bs, out)
	}
	code, out, _ = airlock(t, "usage", "--state-dir", dir, "--json")
	if code != 0 || json.Unmarshal([]byte(out), &u) != nil || u.Total.Requests != 3 || len(u.Identities) != 2 || u.Identities[1].Identity != "reviewer" {
		t.Errorf("--json: exit %d, %+v\n%s", code, u, out)
	}
	if code, _, errOut := airlock(t, "usage", "--state-dir", dir, "--identity", "nobody", "--policy", pol); code == 0 || !strings.Contains(errOut, `has no identity "nobody"`) {
		t.Errorf("--identity nobody: exit %d, %s", code, errOut)
	}
}

// writeIdentityUsage writes a usage ledger holding sandbox s's record and its identities'
// reviewer and author.
func writeIdentityUsage(t *testing.T, path string) {
	t.Helper()
	l, _, err := meter.OpenLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, r := range []meter.Record{
		{Key: meter.Key{Sandbox: "s"}, Totals: meter.Totals{CPUUserUsec: 4e6, CPUSystemUsec: 1e6, TxBytes: 10}, ComputeUSD: 1},
		{Key: meter.Key{Sandbox: "s", Identity: "reviewer"}, Totals: meter.Totals{CPUUserUsec: 1.5e6, CPUSystemUsec: 0.5e6, MemoryPeakBytes: 2 << 20}, ComputeUSD: 0.25},
		{Key: meter.Key{Sandbox: "s", Identity: "author"}, Totals: meter.Totals{CPUUserUsec: 0.25e6}, ComputeUSD: 0.125},
	} {
		r.Kind = meter.KindSample
		if err := l.Append(r); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFillUsageIdentities: `sandbox list` gets each identity's CPU and memory peak from the
// sidecar's usage ledger beside the sandbox's own figures.
func TestFillUsageIdentities(t *testing.T) {
	dir := t.TempDir()
	writeIdentityUsage(t, filepath.Join(dir, meter.LedgerFile))
	ss := []sandbox.Status{{Name: "s", SidecarDir: dir, Identities: []sandbox.IdentityStatus{{Name: "author", UID: 20000}, {Name: "reviewer", UID: 20001}}}}
	fillUsage(ss)
	if ss[0].CPUSeconds != 5 || ss[0].ComputeUSD != 1 {
		t.Errorf("sandbox: %v CPU-s, $%v; want the sandbox's record", ss[0].CPUSeconds, ss[0].ComputeUSD)
	}
	if a, r := ss[0].Identities[0], ss[0].Identities[1]; a.CPUSeconds != 0.25 || r.CPUSeconds != 2 || r.MemoryPeakBytes != 2<<20 {
		t.Errorf("identities: %+v, want author 0.25 CPU-s, reviewer 2 CPU-s and 2 MiB", ss[0].Identities)
	}
}
