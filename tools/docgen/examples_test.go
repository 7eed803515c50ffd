package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/policy"
)

// TestManualPolicyExamplesLoad loads every complete policy in a yaml block of the manual (the
// README, docs/ and the Markdown files under deploy/), so the documentation cannot drift from
// the loader. Skeletons holding "{...}" are skipped. The policy files under deploy/ are
// loaded by policy's TestExamplesLoad and sandbox/kube's TestManifestPolicyLoads.
func TestManualPolicyExamplesLoad(t *testing.T) {
	var files []string
	for _, pattern := range []string{"README.md", "docs/*.md", "deploy/*.md", "deploy/*/*.md"} {
		m, err := filepath.Glob(filepath.Join(repoRoot, pattern))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	block := regexp.MustCompile("(?s)```ya?ml\n(.*?)```")
	loaded := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repoRoot, f)
		for _, m := range block.FindAllStringSubmatchIndex(string(b), -1) {
			doc := string(b[m[2]:m[3]])
			if !strings.Contains(doc, "kind: EgressPolicy") || strings.Contains(doc, "{...}") {
				continue
			}
			line := 1 + strings.Count(string(b[:m[2]]), "\n")
			name := rel + ":" + strconv.Itoa(line)
			// The loader's positions then count from the block's first line.
			if _, err := policy.Parse(name, []byte(doc)); err != nil {
				t.Errorf("policy example at %s does not load:\n%v\n%s", name, err, doc)
			}
			loaded++
		}
	}
	if loaded < 3 {
		t.Fatalf("found %d complete policy examples in the manual, want at least 3 (profiles, credentials, LLM)", loaded)
	}
}
