package policy

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestExamplesLoad loads every example policy: this package's testdata/examples and, when
// present, the repository's deploy/examples (STYLE.md: every example is loaded by a test).
func TestExamplesLoad(t *testing.T) {
	var files []string
	for _, pattern := range []string{"testdata/examples/*.yaml", "../deploy/examples/*.yaml"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	n := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(data, []byte("kind: EgressPolicy")) {
			continue // e.g. a file of test cases beside the policy
		}
		n++
		t.Run(f, func(t *testing.T) {
			if _, err := Load(f); err != nil {
				t.Errorf("Load: %v", err)
			}
		})
	}
	if n == 0 {
		t.Fatal("no example policies found")
	}
}
