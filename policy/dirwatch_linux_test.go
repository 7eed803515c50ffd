package policy

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// nextEvent returns the watcher's next event; the timeout only keeps a broken test from
// hanging.
func nextEvent(t *testing.T, w *dirWatcher) string {
	t.Helper()
	select {
	case name, ok := <-w.Events:
		if !ok {
			t.Fatal("events closed")
		}
		return name
	case err := <-w.Errors:
		t.Fatalf("watch error: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
	}
	return ""
}

// TestDirWatcherIgnoresWrites: appends to a file held open (an audit log) queue no event at
// all; the kernel queues events in order, so the first event seen is the rename after them.
// Closing the written file is an event (an in-place write of the policy is seen then).
func TestDirWatcherIgnoresWrites(t *testing.T) {
	dir := t.TempDir()
	f, err := os.OpenFile(filepath.Join(dir, "audit.jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	w := watchDir(t, dir)
	for range 1000 {
		if _, err := f.WriteString("line\n"); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(f.Name(), 0o640); err != nil { // attributes: no event either
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "x.tmp"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, want := nextEvent(t, w), filepath.Join(dir, "x.tmp"); got != want {
		t.Fatalf("first event %q, want the creation of %q", got, want)
	}
	if got, want := nextEvent(t, w), filepath.Join(dir, "x.tmp"); got != want {
		t.Fatalf("second event %q, want the close of %q", got, want)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := nextEvent(t, w), f.Name(); got != want {
		t.Fatalf("event %q, want the close of %q", got, want)
	}
}

// TestDirWatcherDirectoryGone reports a watched directory that is removed, and watches it
// again when it is added again.
func TestDirWatcherDirectoryGone(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	w := watchDir(t, dir)
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-w.Errors:
		if err == nil {
			t.Fatal("nil error")
		}
	case name := <-w.Events:
		t.Fatalf("event %q, want the directory's loss", name)
	case <-time.After(10 * time.Second):
		t.Fatal("no error for the removed directory")
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := w.Add(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "p.yaml"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, want := nextEvent(t, w), filepath.Join(dir, "p.yaml"); got != want {
		t.Fatalf("event %q, want %q", got, want)
	}
}

func TestDirWatcherNotADirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := newDirWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Add(file); err == nil {
		t.Error("Add of a file succeeded")
	}
}

// watchDir is a dirWatcher on dir, closed with the test.
func watchDir(t *testing.T, dir string) *dirWatcher {
	t.Helper()
	w, err := newDirWatcher()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	if err := w.Add(dir); err != nil {
		t.Fatal(err)
	}
	return w
}
