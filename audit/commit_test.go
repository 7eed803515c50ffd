package audit

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// switchWriter fails with ENOSPC while full is set, and counts writes.
type switchWriter struct {
	full   atomic.Bool
	mu     sync.Mutex
	buf    bytes.Buffer
	writes int
}

func (w *switchWriter) Write(p []byte) (int, error) {
	if w.full.Load() {
		return 0, syscall.ENOSPC
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes++
	return w.buf.Write(p)
}

func (w *switchWriter) snapshot() ([]byte, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return bytes.Clone(w.buf.Bytes()), w.writes
}

func TestCommitReturnsAfterTheWriteAndSharesWrites(t *testing.T) {
	w := &switchWriter{}
	l, err := New(Options{Writer: w})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const n = 200
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("req-%d", i)
			if err := l.Commit(Event{Kind: KindHTTP, Decision: DecisionAllow, RequestID: id, Phase: PhaseDecision}); err != nil {
				t.Error(err)
				return
			}
			// Written before Commit returned: the caller may answer now.
			if b, _ := w.snapshot(); !bytes.Contains(b, []byte(`"request_id":"`+id+`"`)) {
				t.Errorf("%s: Commit returned before its line was written", id)
			}
		}()
	}
	wg.Wait()
	if _, writes := w.snapshot(); writes >= n {
		t.Errorf("%d concurrent commits took %d writes; want them to share writes", n, writes)
	}
}

func TestFailsClosedAndRecoversWithoutRestart(t *testing.T) {
	w := &switchWriter{}
	l, err := New(Options{Writer: w, RetryEvery: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Commit(Event{Kind: KindHTTP, Decision: DecisionAllow, Destination: "before.test:443"}); err != nil {
		t.Fatal(err)
	}
	w.full.Store(true)
	l.Log(Event{Kind: KindDNS, Decision: DecisionAllow, Destination: "queued.test"}) // kept for the retry
	var err2 error
	for err2 == nil { // the write of the queued event fails; until then Commit still works
		err2 = l.Commit(Event{Kind: KindHTTP, Decision: DecisionAllow, Destination: "during.test:443"})
	}
	if !errors.Is(err2, ErrUnavailable) || !errors.Is(err2, syscall.ENOSPC) {
		t.Fatalf("Commit on a full disk: got %v, want ErrUnavailable wrapping ENOSPC", err2)
	}
	if h := l.Health(); !errors.Is(h, syscall.ENOSPC) {
		t.Fatalf("Health on a full disk: got %v, want ENOSPC", h)
	}
	if err := l.Commit(Event{Kind: KindHTTP, Decision: DecisionAllow}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Commit while down: got %v, want refused at once", err)
	}
	w.full.Store(false) // space returns
	deadline := time.Now().Add(10 * time.Second)
	for l.Health() != nil && time.Now().Before(deadline) {
		runtimeGosched()
	}
	if err := l.Commit(Event{Kind: KindHTTP, Decision: DecisionAllow, Destination: "after.test:443"}); err != nil {
		t.Fatalf("after recovery: %v", err)
	}
	b, _ := w.snapshot()
	for _, want := range []string{"before.test", "queued.test", "after.test", `"kind":"audit"`} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("log lacks %s after recovery:\n%s", want, b)
		}
	}
	checkChain(t, b)
}

// checkChain verifies the chain of an in-memory log.
func checkChain(t *testing.T, b []byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := Verify([]string{path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Intact() {
		t.Fatalf("chain broken: %v", rep.Tampered)
	}
}

func runtimeGosched() { time.Sleep(time.Millisecond) } // polling a condition, not synchronising

func TestFloodOfDenialsIsSummarised(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	const interval = 5 * time.Millisecond
	l, err := New(Options{Writer: io.Discard, File: path, FloodInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	const workers, each = 500, 200 // 100 000 denials
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if err := l.CommitDenial(Event{Kind: KindHTTP, Decision: DecisionDeny, Reason: "no_rule", Destination: "flood.test:443"}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var events, sum int64
	if err := Read(f, path, func(e Event, _ int) error {
		events++
		sum += max(e.Count, 1)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	bound := int64(elapsed/interval) + 2
	if sum != workers*each || events > bound {
		t.Fatalf("got %d events counting %d denials in %v; want at most %d events counting %d", events, sum, elapsed, bound, workers*each)
	}
	t.Logf("%d denials in %v: %d events", sum, elapsed, events)
}

func TestKernelDenialFloodIsSummarisedWithoutWaiting(t *testing.T) {
	var buf switchWriter
	l, err := New(Options{Writer: &buf, FloodInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for range 100_000 { // one reader goroutine, as the ring buffer's: it never waits an interval
		l.LogDenial(Event{Kind: KindConnect, Decision: DecisionDeny, Reason: "kernel_not_allowed", Destination: "198.18.0.9:443"})
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	b, _ := buf.snapshot()
	var events, sum int64
	if err := Read(bytes.NewReader(b), "log", func(e Event, _ int) error {
		events++
		sum += max(e.Count, 1)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if events != 2 || sum != 100_000 {
		t.Fatalf("got %d events counting %d, want the first and one summary counting 100000", events, sum)
	}
}

// TestCommitCallersWriteInOrderAcrossRotations: Commit callers write their batches
// themselves when no write is under way (lead), while the writer goroutine writes Log's
// events and rotates the file: the chain stays whole and in order across the files, every
// Commit's line is in the file when it returns, and no event is lost.
func TestCommitCallersWriteInOrderAcrossRotations(t *testing.T) {
	key := testKey(t)
	path := filepath.Join(t.TempDir(), "audit.log")
	var mu sync.Mutex
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	clock := func() time.Time { // distinct rotated names without waiting for the real clock
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(time.Millisecond)
		return now
	}
	l, err := New(Options{Writer: io.Discard, File: path, Key: key, MaxBytes: 4096, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	const workers, each = 8, 40
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				id := fmt.Sprintf("w%d-%d", w, i)
				if err := l.Commit(Event{Kind: KindHTTP, Decision: DecisionAllow, RequestID: id, Phase: PhaseDecision}); err != nil {
					t.Error(err)
					return
				}
				if !inAuditFiles(t, path, id) {
					t.Errorf("%s: Commit returned before its line was in the file", id)
				}
				l.Log(Event{Kind: KindHTTP, Decision: DecisionAllow, RequestID: id})
			}
		}()
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	files := append(rotatedFiles(path), path)
	if len(files) < 3 {
		t.Fatalf("got %d files, want the log rotated while callers wrote", len(files))
	}
	rep, err := Verify(files, key.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(2 * workers * each); !rep.Intact() || int64(rep.Events) != want {
		t.Fatalf("got tampered %v, %d events; want %d intact", rep.Tampered, rep.Events, want)
	}
}

// inAuditFiles reports whether request id's line is in the log or a rotated file. The log
// is read before the rotated files are listed: a line rotated away meanwhile (or the log
// found missing between a rotation's rename and its new file) is in a file the listing
// finds.
func inAuditFiles(t *testing.T, path, id string) bool {
	t.Helper()
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist): // renamed by a rotation under way: listed below
	case err != nil:
		t.Error(err)
		return false
	}
	if bytes.Contains(b, []byte(`"request_id":"`+id+`"`)) {
		return true
	}
	for _, f := range rotatedFiles(path) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Error(err)
			return false
		}
		if bytes.Contains(b, []byte(`"request_id":"`+id+`"`)) {
			return true
		}
	}
	return false
}
