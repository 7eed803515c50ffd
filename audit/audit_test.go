package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func decodeLines(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q is not JSON: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func TestLogWritesOneJSONLinePerEvent(t *testing.T) {
	var buf bytes.Buffer
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	l, err := New(Options{Sandbox: "sb1", Writer: &buf, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	l.Log(Event{Kind: KindHTTP, Decision: DecisionDeny, Rule: "r", Reason: "no_rule", Destination: "evil.test:443", Status: 403})
	l.Log(Event{Kind: KindConnect, Decision: DecisionReport, Sandbox: "other", BytesUp: 10, BytesDown: 20, Duration: 1500 * time.Microsecond})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	lines := decodeLines(t, buf.Bytes())
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2: %s", len(lines), buf.String())
	}
	tests := []struct {
		name  string
		line  map[string]any
		field string
		want  any
	}{
		{"time from clock", lines[0], "time", "2026-11-22T10:00:00Z"},
		{"sandbox default", lines[0], "sandbox", "sb1"},
		{"kind", lines[0], "kind", "http"},
		{"decision", lines[0], "decision", "deny"},
		{"rule", lines[0], "rule", "r"},
		{"reason", lines[0], "reason", "no_rule"},
		{"destination", lines[0], "destination", "evil.test:443"},
		{"status", lines[0], "status", float64(403)},
		{"would_deny false on deny", lines[0], "would_deny", false},
		{"sandbox kept", lines[1], "sandbox", "other"},
		{"would_deny on report", lines[1], "would_deny", true},
		{"bytes up", lines[1], "bytes_up", float64(10)},
		{"bytes down", lines[1], "bytes_down", float64(20)},
		{"duration ms", lines[1], "duration_ms", 1.5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.line[tc.field]; got != tc.want {
				t.Errorf("%s: got %v, want %v", tc.field, got, tc.want)
			}
		})
	}
	if _, ok := lines[1]["status"]; ok {
		t.Errorf("zero status should be left out: %v", lines[1])
	}
}

func TestLogAppendsToFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	for i := 0; i < 2; i++ { // a second logger appends, never truncates
		l, err := New(Options{Writer: &bytes.Buffer{}, File: path})
		if err != nil {
			t.Fatal(err)
		}
		l.Log(Event{Kind: KindPolicy, Decision: DecisionAllow})
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(decodeLines(t, b)); got != 2 {
		t.Fatalf("got %d lines, want 2", got)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := st.Mode().Perm(); perm != 0o600 {
		t.Errorf("mode: got %o, want 600", perm)
	}
}

func TestRecentKeepsNewestFirst(t *testing.T) {
	l, err := New(Options{Writer: &bytes.Buffer{}, Keep: 3})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(l.Recent()); got != 0 {
		t.Fatalf("empty: got %d events", got)
	}
	defer l.Close()
	for _, r := range []string{"a", "b", "c", "d", "e"} {
		l.Log(Event{Kind: KindHTTP, Decision: DecisionAllow, Rule: r})
	}
	var got []string
	for _, e := range l.Recent() {
		got = append(got, e["rule"].(string))
	}
	if strings.Join(got, ",") != "e,d,c" {
		t.Errorf("got %v, want [e d c]", got)
	}
}

func TestHostileStringsStayInsideTheirField(t *testing.T) {
	var buf bytes.Buffer
	l, err := New(Options{Writer: &buf})
	if err != nil {
		t.Fatal(err)
	}
	hostile := []string{
		"/a\n{\"decision\":\"allow\"}",
		"/\"},\"decision\":\"allow",
		"/\x00\x1f\u2028\u2029",
		"/bad-utf8-\xff\xfe",
		"/back\\slash\ttab\rcr",
	}
	for _, p := range hostile {
		l.Log(Event{Kind: KindHTTP, Decision: DecisionDeny, Path: p})
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	lines := decodeLines(t, buf.Bytes())
	if len(lines) != len(hostile) {
		t.Fatalf("got %d lines, want %d: a hostile path split or merged lines", len(lines), len(hostile))
	}
	for i, m := range lines {
		want := string([]rune(hostile[i])) // each invalid byte becomes U+FFFD, as encoding/json does
		if m["path"] != want || m["decision"] != "deny" {
			t.Errorf("line %d: got path %q decision %v, want %q deny", i, m["path"], m["decision"], want)
		}
	}
}

func TestConcurrentEventsAreWholeLines(t *testing.T) {
	var buf bytes.Buffer
	l, err := New(Options{Writer: &buf})
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 8, 500
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				l.Log(Event{Kind: KindHTTP, Decision: DecisionAllow, Path: strings.Repeat("x", i)})
			}
		}()
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := len(decodeLines(t, buf.Bytes())); got != writers*each {
		t.Errorf("got %d lines, want %d", got, writers*each)
	}
	l.Log(Event{Kind: KindHTTP}) // after Close: dropped, must not panic or block
}

// failingWriter fails every write.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestCloseReportsWriteErrors(t *testing.T) {
	l, err := New(Options{Writer: failingWriter{}})
	if err != nil {
		t.Fatal(err)
	}
	l.Log(Event{Kind: KindHTTP})
	if err := l.Close(); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("Close: got %v, want the write error", err)
	}
}

func FuzzEventLine(f *testing.F) {
	for _, s := range []string{"", "/a", "\x00", "\\\"", "\u2028", "\xff"} {
		f.Add(s, s)
	}
	f.Fuzz(func(t *testing.T, path, detail string) {
		e := Event{Kind: KindHTTP, Decision: DecisionDeny, Path: path, Detail: detail, Secrets: []string{detail}}
		line := e.appendBody(nil)
		line = appendTail(line, 7, &[32]byte{})
		if bytes.Count(line, []byte("\n")) != 1 || line[len(line)-1] != '\n' {
			t.Fatalf("not exactly one line: %q", line)
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("not JSON: %v: %q", err, line)
		}
		if path != "" && m["path"] != string([]rune(path)) {
			t.Errorf("path: got %q, want %q", m["path"], path)
		}
	})
}

func TestHealthReportsWriteErrors(t *testing.T) {
	good, err := New(Options{Writer: &bytes.Buffer{}})
	if err != nil {
		t.Fatal(err)
	}
	good.Log(Event{Kind: KindHTTP})
	_ = good.Close()
	if err := good.Health(); err != nil {
		t.Errorf("healthy logger: got %v, want nil", err)
	}
	bad, err := New(Options{Writer: failingWriter{}})
	if err != nil {
		t.Fatal(err)
	}
	var s Sink = bad
	s.Log(Event{Kind: KindHTTP})
	_ = bad.Close() // waits for the write
	if err := s.Health(); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("Health: got %v, want the write error", err)
	}
	if err := Discard().Health(); err != nil {
		t.Errorf("Discard: got %v, want nil", err)
	}
}
