package main

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/policy"
)

// TestREADMEPolicyExamplesLoad loads every complete policy in README.md's yaml blocks, so the
// documentation cannot drift from the loader. Skeletons holding "{...}" are skipped.
func TestREADMEPolicyExamplesLoad(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(b), -1)
	loaded := 0
	for i, m := range blocks {
		doc := m[1]
		if !strings.Contains(doc, "kind: EgressPolicy") || strings.Contains(doc, "{...}") {
			continue
		}
		if _, err := policy.Parse("README.md yaml block "+strconv.Itoa(i), []byte(doc)); err != nil {
			t.Errorf("README policy example %d does not load:\n%v\n%s", i, err, doc)
		}
		loaded++
	}
	if loaded == 0 {
		t.Fatal("found no complete policy example in README.md")
	}
}
