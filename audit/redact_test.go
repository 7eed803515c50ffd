package audit

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRedact: Options.Redact scrubs the written line (stderr and file) and the events Recent
// returns.
func TestRedact(t *testing.T) {
	var buf bytes.Buffer
	file := filepath.Join(t.TempDir(), "audit.jsonl")
	redact := func(b []byte) []byte { return bytes.ReplaceAll(b, []byte("hunter2"), []byte("[REDACTED]")) }
	l, err := New(Options{Writer: &buf, File: file, Keep: 4, Redact: redact})
	if err != nil {
		t.Fatal(err)
	}
	l.Log(Event{Kind: KindCredential, Decision: DecisionDeny, Error: "upstream said hunter2", Detail: "x hunter2"})
	recent := l.Recent()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(file)
	for name, out := range map[string]string{"writer": buf.String(), "file": string(got)} {
		if strings.Contains(out, "hunter2") || !strings.Contains(out, "[REDACTED]") {
			t.Errorf("%s: got %q, want the value redacted", name, out)
		}
	}
	if recent[0]["error"] != "upstream said [REDACTED]" || recent[0]["detail"] != "x [REDACTED]" {
		t.Errorf("Recent: got %v", recent[0])
	}
}
