package credentials

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/policy"
)

func TestPlaceholdersPersistAndWrite(t *testing.T) {
	dir := t.TempDir()
	p1, err := LoadPlaceholders(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, PlaceholderKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v, want mode 0600", fi, err)
	}
	p2, err := LoadPlaceholders(dir)
	if err != nil {
		t.Fatal(err)
	}
	ph := p1.For("github-token")
	if ph != p2.For("github-token") || !strings.HasPrefix(ph, "airlock-placeholder:github-token:") || len(ph) != len("airlock-placeholder:github-token:")+16 {
		t.Fatalf("placeholder %q not stable or not in the documented format", ph)
	}
	if p1.For("a") == p1.For("b") || NewPlaceholders([]byte("another key 0123456789")).For("github-token") == ph {
		t.Fatal("placeholders do not depend on the name and the key")
	}
	if err := p1.Write(dir, []string{"github-token"}); err != nil {
		t.Fatal(err)
	}
	var m map[string]string
	b, _ := os.ReadFile(filepath.Join(dir, PlaceholdersFile))
	if err := json.Unmarshal(b, &m); err != nil || m["github-token"] != ph {
		t.Fatalf("placeholders.json: %s (%v)", b, err)
	}
	if err := os.WriteFile(filepath.Join(dir, PlaceholderKeyFile), []byte("not hex\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPlaceholders(dir); err == nil {
		t.Fatal("a corrupt key file was accepted")
	}
}

func TestFileSource(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "tok")
	if err := os.WriteFile(f, []byte("file-secret\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	v, err := FileSource{}.Fetch(context.Background(), "tok", policy.Secret{File: f})
	if err != nil || v.Secret != "file-secret" {
		t.Fatalf("got %q, %v", v.Secret, err)
	}
	for _, path := range []string{filepath.Join(dir, "missing"), writeEmpty(t, dir)} {
		if _, err := (FileSource{}).Fetch(context.Background(), "tok", policy.Secret{File: path}); !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s: got %v, want ErrUnavailable", path, err)
		}
	}
}

func writeEmpty(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "empty")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPlaceholdersWriteReplacesAtomically(t *testing.T) {
	dir := t.TempDir()
	p, err := LoadPlaceholders(dir)
	if err != nil {
		t.Fatal(err)
	}
	read := func() map[string]string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, PlaceholdersFile))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]string
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("placeholders.json: %v: %s", err, b)
		}
		return m
	}
	if err := p.Write(dir, []string{"old", "kept"}); err != nil {
		t.Fatal(err)
	}
	if m := read(); len(m) != 2 || m["old"] != p.For("old") || m["kept"] != p.For("kept") {
		t.Fatalf("first write: got %v", m)
	}
	// A reload: "old" is gone, "new" arrives.
	if err := p.Write(dir, []string{"kept", "new"}); err != nil {
		t.Fatal(err)
	}
	if m := read(); len(m) != 2 || m["new"] != p.For("new") || m["kept"] != p.For("kept") {
		t.Fatalf("second write: got %v, want exactly kept and new", m)
	}
	fi, err := os.Stat(filepath.Join(dir, PlaceholdersFile))
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("placeholders.json: %v %v, want mode 0644", fi, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != PlaceholdersFile && e.Name() != PlaceholderKeyFile {
			t.Errorf("state directory holds %s, want only the key and the placeholders file", e.Name())
		}
	}
	// A directory that cannot take the temporary file: an error, not a silent success.
	if err := p.Write(filepath.Join(dir, "missing"), []string{"x"}); err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
}

// TestPlaceholderMemoBounded: For gives the HMAC placeholder whether memoised or not, and
// names beyond the bound (they can come from the sandbox's text) are not remembered.
func TestPlaceholderMemoBounded(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	memo, fresh := NewPlaceholders(key), func() *Placeholders { return NewPlaceholders(key) }
	for i := range 2 * maxPlaceholderMemo {
		name := fmt.Sprintf("secret-%d", i)
		if got, want := memo.For(name), fresh().For(name); got != want {
			t.Fatalf("For(%q) = %q, want %q", name, got, want)
		}
	}
	if got, want := memo.For("secret-1"), fresh().For("secret-1"); got != want {
		t.Fatalf("memoised For = %q, want %q", got, want)
	}
	n := 0
	memo.memo.Range(func(any, any) bool { n++; return true })
	if n > maxPlaceholderMemo {
		t.Fatalf("%d placeholders remembered, want at most %d", n, maxPlaceholderMemo)
	}
}
