package audit

import (
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// stepClock is a clock that advances a millisecond per call from start; set jumps it.
type stepClock struct {
	mu  sync.Mutex // guards now
	now time.Time
}

func (c *stepClock) time() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(time.Millisecond)
	return c.now
}

func (c *stepClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// session appends n events to path with a Logger signing with key (none when nil) and
// closes it.
func session(t *testing.T, o Options, n int, tag string) {
	t.Helper()
	o.Writer = io.Discard
	l, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := l.Commit(Event{Kind: KindHTTP, Decision: DecisionAllow, Destination: fmt.Sprintf("%s-%d.test:443", tag, i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// forgedChain returns n chained lines from seq first with the given prev, at time at: what
// an editor who can write the log (but holds no key) makes.
func forgedChain(first uint64, prev [32]byte, n int, at time.Time) []string {
	var out []string
	for i := range n {
		e := Event{Time: at, Sandbox: "sb", Kind: KindHTTP, Decision: DecisionAllow, Destination: fmt.Sprintf("forged-%d.test:443", i)}
		b := appendTail(e.appendBody(nil), first+uint64(i), &prev)
		line := strings.TrimSuffix(string(b), "\n")
		prev = sha256.Sum256([]byte(line))
		out = append(out, line)
	}
	return out
}

// checkpointsOf reads the checkpoints beside path.
func checkpointsOf(t *testing.T, path string) []Checkpoint {
	t.Helper()
	b, err := os.ReadFile(path + ".checkpoints")
	if err != nil {
		t.Fatal(err)
	}
	var out []Checkpoint
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		c, err := ParseCheckpoint([]byte(l))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

// With the key, verify must prove the whole trail: a trail it cannot tie to the key's
// checkpoints from its first line to its last is unanchored (or, where a checkpoint shows
// lines missing, tampered), never intact.
func TestVerifyWithKeyAnchorsTheTrail(t *testing.T) {
	key := testKey(t)
	pub := key.Public().(ed25519.PublicKey)
	start := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	// two sessions of 5 events: checkpoints (shutdown) at seq 5 and 10
	twoSessions := func(t *testing.T) (string, *stepClock) {
		clock := &stepClock{now: start}
		path := filepath.Join(t.TempDir(), "audit.log")
		session(t, Options{Sandbox: "sb", File: path, Key: key, Now: clock.time}, 5, "a")
		session(t, Options{Sandbox: "sb", File: path, Key: key, Now: clock.time}, 5, "b")
		return path, clock
	}
	for _, tc := range []struct {
		name   string
		edit   func(t *testing.T, path string, clock *stepClock) []string // returns the paths to verify
		kind   string                                                     // ProblemUnanchored, or a tampering kind
		reason string
	}{
		{"untouched", func(t *testing.T, p string, _ *stepClock) []string { return []string{p} }, "", ""},
		{"checkpoints file deleted", func(t *testing.T, p string, _ *stepClock) []string {
			if err := os.Remove(p + ".checkpoints"); err != nil {
				t.Fatal(err)
			}
			return []string{p}
		}, ProblemUnanchored, "no checkpoint signed by the key"},
		{"checkpoints file emptied", func(t *testing.T, p string, _ *stepClock) []string {
			if err := os.WriteFile(p+".checkpoints", nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return []string{p}
		}, ProblemUnanchored, "no checkpoint signed by the key"},
		{"first session cut off at its checkpoint", func(t *testing.T, p string, _ *stepClock) []string {
			editLines(t, p, func(l []string) []string { return l[5:] })
			return []string{p}
		}, ProblemRemoved, "removed from the start"},
		{"cut off mid-session", func(t *testing.T, p string, _ *stepClock) []string {
			editLines(t, p, func(l []string) []string { return l[7:] })
			return []string{p}
		}, ProblemRemoved, "removed from the start"},
		{"cut off with no earlier checkpoint", func(t *testing.T, p string, _ *stepClock) []string {
			editLines(t, p, func(l []string) []string { return l[2:] })
			cps := checkpointsOf(t, p)
			b, _ := marshalCheckpoint(cps[len(cps)-1])
			if err := os.WriteFile(p+".checkpoints", append(b, '\n'), 0o600); err != nil {
				t.Fatal(err)
			}
			return []string{p}
		}, ProblemUnanchored, "starts at seq 3, not 1"},
		{"rewritten whole, renumbered after the last checkpoint", func(t *testing.T, p string, _ *stepClock) []string {
			cps := checkpointsOf(t, p)
			last := cps[len(cps)-1]
			lines := forgedChain(last.Seq+1, last.Hash, 8, last.Time)
			if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			return []string{p}
		}, ProblemRemoved, "removed from the start"},
		{"a shutdown checkpoint relabelled a rotation", func(t *testing.T, p string, _ *stepClock) []string {
			editLines(t, p, func(l []string) []string { return l[5:] })
			b, _ := os.ReadFile(p + ".checkpoints")
			first, rest, _ := strings.Cut(string(b), "\n")
			first = strings.Replace(first, `"checkpoint":"shutdown"`, `"checkpoint":"rotate"`, 1)
			if err := os.WriteFile(p+".checkpoints", []byte(first+"\n"+rest), 0o600); err != nil {
				t.Fatal(err)
			}
			return []string{p}
		}, ProblemSignature, "not signed by the key"},
		{"written on for an hour without the key", func(t *testing.T, p string, clock *stepClock) []string {
			clock.set(start.Add(time.Hour))
			session(t, Options{Sandbox: "sb", File: p, Now: clock.time}, 3, "nokey")
			return []string{p}
		}, ProblemUnanchored, "after the last checkpoint"},
		{"forged tail appended an hour later", func(t *testing.T, p string, _ *stepClock) []string {
			b, _ := os.ReadFile(p)
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			tail := forgedChain(11, sha256.Sum256([]byte(lines[len(lines)-1])), 4, start.Add(time.Hour))
			if err := os.WriteFile(p, []byte(strings.Join(append(lines, tail...), "\n")+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			return []string{p}
		}, ProblemUnanchored, "after the last checkpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, clock := twoSessions(t)
			files := tc.edit(t, path, clock)
			rep, err := Verify(files, pub)
			if err != nil {
				t.Fatal(err)
			}
			var got *Problem
			switch {
			case rep.Tampered != nil:
				got = rep.Tampered
			case rep.Unanchored != nil:
				got = rep.Unanchored
			}
			if tc.kind == "" {
				if got != nil || !rep.Proven() {
					t.Fatalf("got %v, want proven", got)
				}
				return
			}
			if got == nil || got.Kind != tc.kind || !strings.Contains(got.Detail, tc.reason) {
				t.Fatalf("got %v, want %s (%q)", got, tc.kind, tc.reason)
			}
			if rep.Proven() {
				t.Fatal("Proven() is true")
			}
			// Without the key, verify proves only the chain: these read intact, and the
			// report says nothing about anchoring.
			if tc.kind == ProblemUnanchored {
				if rep, _ := Verify(files, nil); !rep.Intact() || rep.Unanchored != nil {
					t.Errorf("without a key: got %v / %v, want intact and no anchoring verdict", rep.Tampered, rep.Unanchored)
				}
			}
		})
	}
}

// The current file alone, after rotations, is anchored by the rotation the key signed; a
// prev that is not the signed hash is tampering.
func TestVerifyCurrentFileAfterRotation(t *testing.T) {
	key := testKey(t)
	pub := key.Public().(ed25519.PublicKey)
	clock := &stepClock{now: time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)}
	path := filepath.Join(t.TempDir(), "audit.log")
	session(t, Options{Sandbox: "sb", File: path, Key: key, MaxBytes: 1024, Now: clock.time}, 30, "r")
	if len(rotatedFiles(path)) == 0 {
		t.Fatal("the log did not rotate")
	}
	rep, err := Verify([]string{path}, pub)
	if err != nil || !rep.Proven() || rep.FirstSeq == 1 {
		t.Fatalf("current file alone: %v %v %v (from seq %d), want proven from after a rotation", err, rep.Tampered, rep.Unanchored, rep.FirstSeq)
	}
	editLines(t, path, func(l []string) []string {
		l[0] = flipPrev(l[0])
		return l
	})
	if rep, _ := Verify([]string{path}, pub); rep.Tampered == nil {
		t.Fatal("a rewritten first prev after a rotation: got no tampering")
	}
}

// A log whose checkpoints predate the signed kinds (v1) still verifies whole; its current
// file alone is unanchored (its rotation is not signed as one), not tampered.
func TestVerifyOldCheckpoints(t *testing.T) {
	key := testKey(t)
	pub := key.Public().(ed25519.PublicKey)
	clock := &stepClock{now: time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)}
	path := filepath.Join(t.TempDir(), "audit.log")
	session(t, Options{Sandbox: "sb", File: path, Key: key, MaxBytes: 1024, Now: clock.time}, 30, "r")
	// Re-sign every checkpoint in the v1 form, as an older airlock wrote them.
	var out []string
	for _, c := range checkpointsOf(t, path) {
		c.Version = 0
		c.Sig = ed25519.Sign(key, c.Message())
		b, _ := marshalCheckpoint(c)
		out = append(out, string(b))
	}
	if err := os.WriteFile(path+".checkpoints", []byte(strings.Join(out, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	all := append(rotatedFiles(path), path)
	if rep, err := Verify(all, pub); err != nil || !rep.Proven() {
		t.Fatalf("every file: %v %v %v, want proven", err, rep.Tampered, rep.Unanchored)
	}
	rep, err := Verify([]string{path}, pub)
	if err != nil || rep.Tampered != nil || rep.Unanchored == nil {
		t.Fatalf("current file alone: %v %v %v, want unanchored", err, rep.Tampered, rep.Unanchored)
	}
}

func marshalCheckpoint(c Checkpoint) ([]byte, error) { return c.MarshalJSON() }

// flipPrev changes the first hex digit of a line's prev.
func flipPrev(line string) string {
	i := strings.Index(line, `"prev":"`) + len(`"prev":"`)
	c := byte('0')
	if line[i] == '0' {
		c = '1'
	}
	return line[:i] + string(c) + line[i+1:]
}
