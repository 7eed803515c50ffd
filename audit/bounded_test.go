package audit

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// huge is n bytes that JSON escapes at six bytes each, the worst case for a line's length.
func huge(n int) string { return strings.Repeat("\x01", n) }

// Every field an event records from the sandbox is bounded: a call with a model name,
// path, destination or error of megabytes writes a line far below what readers take, the
// fields say how long they were, and a restart continues the chain.
func TestEventFieldsBounded(t *testing.T) {
	key := testKey(t)
	pub := key.Public().(ed25519.PublicKey)
	path := filepath.Join(t.TempDir(), "audit.log")
	const big = 12 << 20 // the model name; other fields 1 MiB
	const mib = 1 << 20
	secrets := make([]string, 1000)
	for i := range secrets {
		secrets[i] = huge(5000)
	}
	events := []Event{
		{Kind: KindLLM, Decision: DecisionAllow, Model: huge(big), Provider: huge(mib), Prompt: huge(mib), Path: "/v1/chat/completions"},
		{Kind: KindHTTP, Decision: DecisionDeny, Destination: huge(mib) + ":443", Path: "/" + huge(mib), Method: huge(mib),
			Detail: huge(mib), Error: huge(mib), Client: huge(mib), Rule: huge(mib), Reason: huge(mib), RequestID: huge(mib), Secrets: secrets},
		{Kind: KindDNS, Decision: DecisionAllow, Destination: strings.Repeat("é", mib/2)},
	}
	o := Options{Sandbox: "sb", Writer: io.Discard, File: path, Key: key}
	l, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if err := l.Commit(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range bytes.Split(bytes.TrimSpace(b), []byte{'\n'}) {
		if len(line) > 1<<20 {
			t.Errorf("line %d is %d bytes, want under 1 MiB", i+1, len(line))
		}
	}
	var got []Event
	if err := Read(bytes.NewReader(b), "audit.log", func(e Event, _ int) error { got = append(got, e); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || !strings.HasSuffix(got[0].Model, "…[truncated: 12582912 bytes]") || len(got[1].Secrets) != maxSecrets+1 ||
		!strings.Contains(got[2].Destination, "truncated: 1048576 bytes") {
		t.Fatalf("read back %d events; model ends %q", len(got), got[0].Model[max(0, len(got[0].Model)-40):])
	}
	// A restart continues the chain, which verifies whole with the key.
	l, err = New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Commit(Event{Kind: KindHTTP, Decision: DecisionAllow, Destination: "after.test:443"}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := Verify([]string{path}, pub)
	if err != nil || !rep.Proven() || rep.FirstSeq != 1 || rep.LastSeq != 4 {
		t.Fatalf("after a restart: %v %v %v seq %d..%d, want proven 1..4", err, rep.Tampered, rep.Unanchored, rep.FirstSeq, rep.LastSeq)
	}
}

// unboundedLine is a chained line as an older airlock wrote it, with nothing bounded.
func unboundedLine(seq uint64, prev [32]byte, model string) string {
	e := Event{Time: time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC), Sandbox: "sb", Kind: KindLLM, Decision: DecisionAllow}
	b := e.appendBody(nil)
	b = appendString(append(b, `,"model":`...), model)
	return strings.TrimSuffix(string(appendTail(b, seq, &prev)), "\n")
}

// A log an older airlock left with a line longer than any window a reader takes at once
// (25 MB), or ending in lines that are not audit lines, still restarts its chain where it
// stood, and every reader takes it.
func TestRestartAfterUnreadableTail(t *testing.T) {
	for _, tc := range []struct {
		name  string
		size  int      // the long line's length, escaped
		after []string // lines after the chained ones
	}{
		{"a 25 MB line last", 25 << 20, nil},
		{"junk after it", 5 << 20, []string{"not json at all"}},
		{"a torn line after it", 5 << 20, []string{`{"time":"2026-11-23T10:00:01Z","sandbox":"sb","kind":"ht`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.log")
			l1 := unboundedLine(1, [32]byte{}, "m")
			l2 := unboundedLine(2, sha256.Sum256([]byte(l1)), huge(tc.size/6))
			text := l1 + "\n" + l2 + "\n"
			for _, a := range tc.after {
				text += a + "\n"
			}
			if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			n := 0
			if err := Read(strings.NewReader(text), "old.log", func(Event, int) error { n++; return nil }); err != nil && len(tc.after) == 0 {
				t.Fatalf("Read: %v", err)
			}
			l, err := New(Options{Sandbox: "sb", Writer: io.Discard, File: path})
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Commit(Event{Kind: KindHTTP, Decision: DecisionAllow, Destination: "next.test:443"}); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			rep, err := Verify([]string{path}, nil)
			if err != nil || !rep.Intact() || rep.LastSeq != 3 {
				t.Fatalf("got %v %v, last seq %d; want intact, the chain continued at seq 3", err, rep.Tampered, rep.LastSeq)
			}
		})
	}
}
