package audit

import (
	"bytes"
	"sync"
	"testing"
)

// countingWriter counts Write calls.
type countingWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	writes int
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes++
	return w.buf.Write(p)
}

func TestBurstSharesWrites(t *testing.T) {
	w := &countingWriter{}
	l, err := New(Options{Writer: w})
	if err != nil {
		t.Fatal(err)
	}
	const events = 200
	for range events {
		l.Log(Event{Kind: KindDNS, Decision: DecisionAllow, Destination: "example.com"})
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := len(decodeLines(t, w.buf.Bytes())); got != events {
		t.Fatalf("got %d lines, want %d", got, events)
	}
	// The writer rests a linger between writes, so a burst logged in far less time than
	// events×linger shares a handful of writes instead of one each.
	if w.writes > events/4 {
		t.Errorf("%d events took %d writes; want them batched (at most %d)", events, w.writes, events/4)
	}
}
