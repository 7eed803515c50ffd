package learn

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/policy"
)

func TestReplayNarrowCandidate(t *testing.T) {
	cand, err := policy.Load("testdata/narrow.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rep := Replay(readTrail(t, "trail.jsonl"), cand)
	var got []string
	for _, x := range rep.Changes {
		got = append(got, fmt.Sprintf("%s %s", x.Change, x.describe()))
	}
	want := []string{
		// git: the POST is not among the candidate's L7 rules.
		"allow-to-deny POST git.test:443/repo.git/git-upload-pack",
		// the only lookup of a name no rule names
		"allow-to-deny dns lookup-only.test",
		// pypi: tunnels not intercepted, and the candidate would intercept them
		"undecidable connect pypi.test:443",
		"undecidable connect pypi.test:8443",
		// metadata.test resolved to a link-local address: still denied (unchanged); the
		// private IP literal and the metadata name were reported, and no rule names them.
		"allow-to-deny GET 10.1.2.3:80/",
		"allow-to-deny GET metadata.google.internal:80/computeMetadata/v1/",
		"allow-to-deny GET files.test:443/packages/requests-2.31.0.tar.gz",
		"allow-to-deny GET files.test:443/simple/a/",
		"allow-to-deny GET files.test:443/simple/b/",
		"allow-to-deny GET files.test:443/simple/c/",
		"allow-to-deny GET files.test:443/simple/d/",
		"allow-to-deny GET files.test:443/simple/e/",
		"allow-to-deny connect files.test:443",
		// loopy.test: the name is allowed by no rule.
		"allow-to-deny GET loopy.test:80/",
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("changes:\n got %q\nwant %q", got, want)
	}
	if rep.Counts[DenyToAllow] != 0 {
		t.Errorf("deny-to-allow: got %d, want 0 (evil.test was denied for host_mismatch, not by a rule)", rep.Counts[DenyToAllow])
	}
	if rep.Skipped["llm"] != 1 || rep.Skipped["policy"] != 1 {
		t.Errorf("skipped: got %v, want 1 llm and 1 policy", rep.Skipped)
	}
	if !rep.Fails([]Change{AllowToDeny}) || rep.Fails([]Change{DenyToAllow}) {
		t.Errorf("Fails: got %v/%v, want true for allow-to-deny only", rep.Fails([]Change{AllowToDeny}), rep.Fails([]Change{DenyToAllow}))
	}
	var text strings.Builder
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"allow → deny", "undecidable", "trail.jsonl:5  POST git.test:443/repo.git/git-upload-pack", "rule git "} {
		if !strings.Contains(text.String(), s) {
			t.Errorf("text report lacks %q:\n%s", s, text.String())
		}
	}
}

// TestReplayLearnedCandidate replays the trail against the policy learned from it: nothing
// that went through would now be denied, except what Learn left out on purpose.
func TestReplayLearnedCandidate(t *testing.T) {
	cand, err := policy.Load("testdata/learned.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rep := Replay(readTrail(t, "trail.jsonl"), cand)
	for _, x := range rep.Changes {
		switch x.Destination {
		case "10.1.2.3:80", "metadata.google.internal:80", "loopy.test:80", "lookup-only.test":
			continue // left out on purpose
		case "new.test:443":
			if x.Change == DenyToAllow {
				continue // an enforce run's denial, learned as a rule
			}
		}
		t.Errorf("unexpected change under the learned candidate: %+v", x)
	}
}
