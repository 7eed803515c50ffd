package learn

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/policy"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// readTrail reads a test audit trail.
func readTrail(t *testing.T, name string) []Recorded {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	trail, err := ReadTrail(f, name)
	if err != nil {
		t.Fatal(err)
	}
	return trail
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
	if len(p.Rules()) != 5 {
		t.Errorf("rules: got %d, want 5 (api, files, git, new, pypi)", len(p.Rules()))
	}
}

// TestLearnFromParent learns under a parent: what the parent denies becomes comments, a
// collapsed pattern the parent does not cover falls back to the paths as seen, and a host
// whose requests were not seen takes the parent rule's L7 rules.
func TestLearnFromParent(t *testing.T) {
	parent, err := policy.Load("testdata/parent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out, err := Learn(readTrail(t, "trail.jsonl"), Options{Filename: "testdata/child.yaml",
		Parent: parent, ParentRef: "./parent.yaml", Sources: []string{"trail.jsonl"}})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "child.yaml", out)
	if _, err := policy.Load("testdata/child.yaml"); err != nil {
		t.Fatalf("the candidate does not load: %v", err)
	}
	for _, s := range []string{"HEAD api.test:80/v1/users/5678/repos", "pypi.test:8443", `"/simple/a/"`} {
		if !strings.Contains(string(out), s) {
			t.Errorf("candidate lacks %q", s)
		}
	}
}

func TestLearnNothingUnderParent(t *testing.T) {
	parent, err := policy.Builtin("offline")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Learn(readTrail(t, "trail.jsonl"), Options{Parent: parent, ParentRef: "offline"})
	if !errors.Is(err, ErrNothingLearned) {
		t.Errorf("got %v, want ErrNothingLearned", err)
	}
}

func TestCollapsePath(t *testing.T) {
	tests := []struct{ name, path, want string }{
		{"root", "/", "/"},
		{"literal", "/repos/acme/app", "/repos/acme/app"},
		{"number", "/issues/1234/comments", "/issues/*/comments"},
		{"uuid", "/jobs/3f2c9a1b-1111-2222-3333-444455556666", "/jobs/*"},
		{"commit hash", "/commits/9fceb02d0ae598e95dc970b74767f19372d61af8", "/commits/*"},
		{"short hash", "/c/9fceb02", "/c/*"},
		{"hex word without digit stays", "/deadbeefcafe", "/deadbeefcafe"},
		{"version", "/releases/v1.2.3/notes", "/releases/*/notes"},
		{"embedded version", "/packages/requests-2.31.0.tar.gz", "/packages/*"},
		{"api version stays", "/api/v1/users", "/api/v1/users"},
		{"token", "/s/AbCdEf0123456789xyz", "/s/*"},
		{"slug without digits stays", "/docs/getting-started-with-airlock", "/docs/getting-started-with-airlock"},
		{"literal star", "/a/b*c", "/a/*"},
		{"trailing slash", "/simple/requests/", "/simple/requests/"},
		{"deep", "/1/2/3/4/5/6/7/8/9/10", "/*/*/*/*/*/*/*/**"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := CollapsePath(tc.path); got != tc.want {
				t.Errorf("CollapsePath(%q): got %q, want %q", tc.path, got, tc.want)
			}
		})
	}
}

func TestMergeSiblings(t *testing.T) {
	in := []string{"/simple/a/", "/simple/b/", "/simple/c/", "/simple/d/", "/simple/e/", "/other/x", "/other/y"}
	got := mergeSiblings(in)
	for _, p := range in[:5] {
		if got[p] != "/simple/*/" {
			t.Errorf("%s: got %q, want /simple/*/ (five siblings)", p, got[p])
		}
	}
	for _, p := range in[5:] {
		if got[p] != p {
			t.Errorf("%s: got %q, want it unchanged (two siblings)", p, got[p])
		}
	}
}
