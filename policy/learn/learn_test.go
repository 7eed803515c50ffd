package learn

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// readTrail reads a test audit trail.
func readTrail(t *testing.T, name string) []audit.Event {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var evs []audit.Event
	if err := audit.Read(f, name, func(e audit.Event, _ int) error { evs = append(evs, e); return nil }); err != nil {
		t.Fatal(err)
	}
	return evs
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs (run go test -update):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestLearnGolden(t *testing.T) {
	out, err := Learn(readTrail(t, "trail.jsonl"), Options{Filename: "testdata/learned.yaml", Sources: []string{"trail.jsonl"}})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "learned.yaml", out)
	p, err := policy.Load("testdata/learned.yaml")
	if err != nil {
		t.Fatalf("the candidate does not load: %v", err)
	}
	if len(p.Rules()) != 4 {
		t.Errorf("rules: got %d, want 4 (api, files, git, pypi)", len(p.Rules()))
	}
}
