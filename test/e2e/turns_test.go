//go:build linux

package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestTurnsLongFirst: with its one slot taken, turns hands it on to the long waiters first,
// each kind in the order they came, and gets it back when the last is done.
func TestTurnsLongFirst(t *testing.T) {
	q := &turns{free: 1}
	q.take(false)
	order := make(chan string, 4)
	for i, w := range []struct {
		name string
		long bool
	}{{"short1", false}, {"long1", true}, {"short2", false}, {"long2", true}} {
		go func() {
			q.take(w.long)
			order <- w.name
			q.give()
		}()
		for deadline := time.Now().Add(10 * time.Second); q.queued() != i+1; time.Sleep(time.Millisecond) { // in the queue
			if time.Now().After(deadline) {
				t.Fatalf("%s not queued within 10s", w.name)
			}
		}
	}
	q.give()
	var got []string
	for range 4 {
		got = append(got, <-order)
	}
	if s := strings.Join(got, " "); s != "long1 long2 short1 short2" {
		t.Errorf("turns given in the order %s, want long1 long2 short1 short2", s)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) { // the last give
		q.mu.Lock()
		free := q.free
		q.mu.Unlock()
		if free == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("free slots %d after the last give, want 1", free)
		}
	}
}

func (q *turns) queued() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting)
}
