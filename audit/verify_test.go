package audit

import (
	"bytes"
	"crypto/ed25519"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// writeChain writes n events to a fresh audit file signed with key and closes the Logger.
func writeChain(t *testing.T, n int, key ed25519.PrivateKey) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := New(Options{Sandbox: "sb", Writer: io.Discard, File: path, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := l.Commit(Event{Kind: KindHTTP, Decision: DecisionAllow, Destination: fmt.Sprintf("h%d.test:443", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func testKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	k, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// editLines rewrites the file's lines with fn.
func editLines(t *testing.T, path string, fn func([]string) []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	out := strings.Join(fn(lines), "\n") + "\n"
	if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyNamesTheTamperedLine(t *testing.T) {
	key := testKey(t)
	tests := []struct {
		name     string
		edit     func(path string)
		wantKind string
		wantLine int
	}{
		{"untouched", func(string) {}, "", 0},
		{"one line edited", func(p string) {
			editLines(t, p, func(l []string) []string {
				l[4] = strings.Replace(l[4], "h4.test", "h4.evil", 1)
				return l
			})
		}, ProblemChanged, 5},
		{"last line edited", func(p string) {
			editLines(t, p, func(l []string) []string {
				l[9] = strings.Replace(l[9], "h9.test", "h9.evil", 1)
				return l
			})
		}, ProblemChanged, 10},
		{"one line deleted", func(p string) {
			editLines(t, p, func(l []string) []string { return append(l[:4:4], l[5:]...) })
		}, ProblemRemoved, 5},
		{"one line replaced by text", func(p string) {
			editLines(t, p, func(l []string) []string { l[4] = "not an audit line"; return l })
		}, ProblemRemoved, 6},
		{"two lines swapped", func(p string) {
			editLines(t, p, func(l []string) []string { l[4], l[5] = l[5], l[4]; return l })
		}, ProblemReordered, 5},
		{"truncated by lines", func(p string) {
			editLines(t, p, func(l []string) []string { return l[:7] })
		}, ProblemTruncated, 0},
		{"truncated mid-line", func(p string) {
			st, _ := os.Stat(p)
			if err := os.Truncate(p, st.Size()-40); err != nil {
				t.Fatal(err)
			}
		}, ProblemTruncated, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := writeChain(t, 10, key)
			tc.edit(path)
			rep, err := Verify([]string{path}, key.Public().(ed25519.PublicKey))
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantKind == "" {
				if !rep.Intact() || rep.Events != 10 || rep.SignedSeq != 10 || len(rep.Torn) != 0 {
					t.Fatalf("got %+v (tampered %v), want intact with 10 events signed", rep, rep.Tampered)
				}
				return
			}
			if rep.Intact() {
				t.Fatalf("got intact, want %s", tc.wantKind)
			}
			p := *rep.Tampered
			if p.Kind != tc.wantKind || (tc.wantLine != 0 && (p.Line != tc.wantLine || p.File != path)) {
				t.Errorf("got %v, want %s at line %d", p, tc.wantKind, tc.wantLine)
			}
		})
	}
}

func TestVerifyFailsWithAnotherKey(t *testing.T) {
	path := writeChain(t, 3, testKey(t))
	rep, err := Verify([]string{path}, testKey(t).Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Intact() || rep.Tampered.Kind != ProblemSignature {
		t.Fatalf("got %v, want a signature problem", rep.Tampered)
	}
}

func TestVerifyTellsATornLineFromTampering(t *testing.T) {
	key := testKey(t)
	path := writeChain(t, 5, key)
	// A crash in the middle of a write: a partial line, no checkpoint after it.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString(`{"time":"2026-11-23T10:00:00Z","sandbox":"sb","kind":"ht`)
	_ = f.Close()
	pub := key.Public().(ed25519.PublicKey)
	rep, err := Verify([]string{path}, pub)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Intact() || len(rep.Torn) != 1 || rep.Torn[0].Line != 6 {
		t.Fatalf("torn last line: got tampered %v, torn %v; want intact with line 6 torn", rep.Tampered, rep.Torn)
	}
	// The sidecar restarts on the same file: the chain resumes after the torn line.
	l, err := New(Options{Writer: io.Discard, File: path, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Commit(Event{Kind: KindDNS, Decision: DecisionAllow}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err = Verify([]string{path}, pub)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Intact() || len(rep.Torn) != 1 || rep.Torn[0].Line != 6 || rep.LastSeq != 6 {
		t.Fatalf("after restart: got tampered %v, torn %v, last seq %d; want intact, line 6 torn, seq 6", rep.Tampered, rep.Torn, rep.LastSeq)
	}
	// Garbage put in the middle of the chain is not a torn line.
	editLines(t, path, func(l []string) []string { l[2] = `{"garbage"`; return l })
	if rep, _ = Verify([]string{path}, pub); rep.Intact() || rep.Tampered.Line != 3 {
		t.Fatalf("garbage line: got %v, want tampering at line 3", rep.Tampered)
	}
}

func TestRotationContinuesTheChain(t *testing.T) {
	key := testKey(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	var mu sync.Mutex
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	clock := func() time.Time { // distinct rotated names without waiting for the real clock
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(time.Millisecond)
		return now
	}
	for run := range 2 { // a restart in between: the chain continues from the newest file
		l, err := New(Options{Writer: io.Discard, File: path, Key: key, MaxBytes: 1024, Now: clock})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 30 {
			if err := l.Commit(Event{Kind: KindHTTP, Decision: DecisionDeny, Destination: fmt.Sprintf("r%d-%d.test:443", run, i)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	files := append(rotatedFiles(path), path)
	if len(files) < 4 {
		t.Fatalf("got %d files, want the log rotated several times", len(files))
	}
	// Given in reverse (as a shell glob would not order them), Verify puts them in order.
	var rev []string
	for i := len(files) - 1; i >= 0; i-- {
		rev = append(rev, files[i])
	}
	rep, err := Verify(rev, key.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Intact() || rep.Events != 60 || rep.FirstSeq != 1 || rep.SignedSeq != 60 {
		t.Fatalf("got tampered %v, %d events from seq %d, signed %d; want 60 intact and signed", rep.Tampered, rep.Events, rep.FirstSeq, rep.SignedSeq)
	}
	// Removing a whole rotated file from the middle is found.
	mid := files[1]
	rep, _ = Verify(append(files[:1:1], files[2:]...), key.Public().(ed25519.PublicKey))
	if rep.Intact() || rep.Tampered.Kind != ProblemRemoved {
		t.Fatalf("without %s: got %v, want lines removed", mid, rep.Tampered)
	}
}

func TestKeyPEMRoundTrip(t *testing.T) {
	key := testKey(t)
	privPEM, err := EncodePrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pubPEM, err := EncodePublicKey(key.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParsePrivateKey(privPEM)
	if err != nil || !got.Equal(key) {
		t.Fatalf("private: got %v, %v", got, err)
	}
	for _, b := range [][]byte{pubPEM, privPEM} {
		pub, err := ParsePublicKey(b)
		if err != nil || !bytes.Equal(pub, key.Public().(ed25519.PublicKey)) {
			t.Fatalf("public from %q: got %v, %v", b[:20], pub, err)
		}
	}
}

func TestVerifyReadsACapturedStderr(t *testing.T) {
	var buf bytes.Buffer
	l, err := New(Options{Writer: &buf})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if err := l.Commit(Event{Kind: KindDNS, Decision: DecisionAllow, Destination: fmt.Sprintf("n%d.test", i)}); err != nil {
			t.Fatal(err)
		}
		buf.WriteString(`{"level":"info","msg":"policy reloaded","time":"2026-11-23T10:00:00Z"}` + "\n")
		buf.WriteString("2026/11/23 10:00:00 http: TLS handshake error from 127.0.0.1:1: EOF\n")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "stderr.log")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := Verify([]string{path}, nil)
	if err != nil || !rep.Intact() || rep.Events != 4 {
		t.Fatalf("got %v (%d events), %v; want 4 intact events among the log lines", rep.Tampered, rep.Events, err)
	}
}

// FuzzVerify feeds arbitrary files to Verify: it must not panic, and a file it calls intact
// must hold a gap-free chain.
func FuzzVerify(f *testing.F) {
	var buf bytes.Buffer
	l, err := New(Options{Writer: &buf})
	if err != nil {
		f.Fatal(err)
	}
	for i := range 3 {
		_ = l.Commit(Event{Kind: KindDNS, Decision: DecisionAllow, Destination: fmt.Sprintf("n%d.test", i)})
	}
	_ = l.Close()
	f.Add(buf.Bytes())
	f.Add([]byte("{\"msg\":\"audit\",\"seq\":1,\"prev\":\"\"}\n{"))
	f.Add([]byte(`{"checkpoint":"periodic","seq":1,"hash":"00","key":"","sig":""}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "audit.log")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		rep, err := Verify([]string{path}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Intact() && rep.Events > 0 && rep.LastSeq-rep.FirstSeq+1 != uint64(rep.Events) {
			t.Fatalf("intact with %d events over seq %d..%d", rep.Events, rep.FirstSeq, rep.LastSeq)
		}
	})
}
