package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const learnTrail = "../../learn/testdata/trail.jsonl"

func TestPolicyLearnWritesACandidateThatChecks(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "candidate.yaml")
	code, _, errOut := airlock(t, "policy", "learn", learnTrail, "-o", out, "--name", "from-trail")
	if code != 0 {
		t.Fatalf("learn: exit %d: %s", code, errOut)
	}
	if code, stdout, errOut := airlock(t, "policy", "check", out); code != 0 || !strings.Contains(stdout, `policy "from-trail"`) {
		t.Fatalf("check: exit %d: %s %s", code, stdout, errOut)
	}
	// A file parent is named relative to the candidate's directory.
	parent := filepath.Join(dir, "base", "parent.yaml")
	data, err := os.ReadFile("../../learn/testdata/parent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(parent), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(parent, data, 0o644); err != nil {
		t.Fatal(err)
	}
	child := filepath.Join(dir, "child.yaml")
	if code, _, errOut := airlock(t, "policy", "learn", learnTrail, "--from", parent, "-o", child); code != 0 {
		t.Fatalf("learn --from: exit %d: %s", code, errOut)
	}
	got, err := os.ReadFile(child)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got), `extends: ["./base/parent.yaml"]`) {
		t.Errorf("child does not extend ./base/parent.yaml:\n%s", got)
	}
	if code, stdout, errOut := airlock(t, "policy", "check", child); code != 0 {
		t.Fatalf("check child: exit %d: %s %s", code, stdout, errOut)
	}
	// A built-in profile that allows none of it: nothing to learn.
	if code, _, errOut := airlock(t, "policy", "learn", learnTrail, "--from", "offline"); code != 1 || !strings.Contains(errOut, "no recorded traffic the parent allows") {
		t.Errorf("learn --from offline: exit %d, stderr %q; want 1 and the reason", code, errOut)
	}
}

func TestPolicyLearnErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no trail", []string{"policy", "learn"}, 2, "Usage: airlock policy learn"},
		{"missing trail", []string{"policy", "learn", "testdata/no-such.jsonl"}, 1, "open audit log"},
		{"not a trail", []string{"policy", "learn", "testdata/unknown-field.yaml"}, 1, "unknown-field.yaml:1: decode audit line"},
		{"replay without policy", []string{"policy", "replay", learnTrail}, 2, "Usage: airlock policy replay"},
		{"replay bad fail-on", []string{"policy", "replay", learnTrail, "--policy", examplePolicy, "--fail-on", "sometimes"}, 1, `unknown change "sometimes"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := airlock(t, tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.want) {
				t.Errorf("got exit %d, stderr %q; want %d and %q", code, errOut, tc.code, tc.want)
			}
		})
	}
}

func TestPolicyReplayExitStatus(t *testing.T) {
	narrow := "../../learn/testdata/narrow.yaml"
	tests := []struct {
		failOn string
		code   int
	}{
		{"", 1}, // the default: allow-to-deny
		{"none", 0},
		{"deny-to-allow", 0},
		{"undecidable", 1},
		{"any", 1},
	}
	for _, tc := range tests {
		t.Run("fail-on "+tc.failOn, func(t *testing.T) {
			args := []string{"policy", "replay", learnTrail, "--policy", narrow, "--json"}
			if tc.failOn != "" {
				args = append(args, "--fail-on", tc.failOn)
			}
			code, out, errOut := airlock(t, args...)
			if code != tc.code {
				t.Errorf("exit: got %d, want %d (%s)", code, tc.code, errOut)
			}
			var rep struct {
				Counts  map[string]int
				Changes []struct{ Source, Change string }
			}
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("not JSON: %v: %s", err, out)
			}
			if rep.Counts["allow-to-deny"] != 12 || rep.Counts["undecidable"] != 2 || len(rep.Changes) != 14 {
				t.Errorf("counts: got %v with %d changes, want 12 allow-to-deny, 2 undecidable", rep.Counts, len(rep.Changes))
			}
			if !strings.HasPrefix(rep.Changes[0].Source, learnTrail+":") {
				t.Errorf("source: got %q, want %s:LINE", rep.Changes[0].Source, learnTrail)
			}
		})
	}
}

func TestPolicyLearnBadName(t *testing.T) {
	code, _, errOut := airlock(t, "policy", "learn", learnTrail, "--name", "Bad Name")
	if code != 1 || !strings.Contains(errOut, `invalid policy name "Bad Name"`) {
		t.Errorf("got exit %d, stderr %q; want 1 and the name", code, errOut)
	}
}
