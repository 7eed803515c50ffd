package audit

import (
	"fmt"
	"sync"
	"time"
)

// maxFloodKeys bounds the destinations whose flood state is kept; idle ones are swept
// beyond it.
const maxFloodKeys = 4096

// floodKey is what makes two denials "the same" for a summary.
type floodKey struct {
	kind              Kind
	decision, reason  string
	rule, destination string
	sandbox           string
}

// floodGroup is the denials waiting for one summary event.
type floodGroup struct {
	first Event // the first denial of the group; the summary is it with a count
	count int64
	done  chan struct{} // closed once the summary is written (or failed)
	err   error
}

// floodState is one destination's summary state.
type floodState struct {
	last  time.Time   // when the last event for the key was written
	group *floodGroup // the denials waiting for the next summary, or nil
}

// floods turns repeated denials into summary events (Logger.CommitDenial).
type floods struct {
	l *Logger
	// mu guards m and stopped.
	mu      sync.Mutex
	m       map[floodKey]*floodState
	stopped bool
}

func (f *floods) init(l *Logger) {
	f.l, f.m = l, make(map[floodKey]*floodState)
}

// CommitDenial records a denial and returns once an event covering it is written, like
// Commit. The first denial of a destination in FloodInterval is written as its own event;
// the denials that follow within the interval wait for one summary event (the first of
// them, with Count set), written one interval after the last event for that destination.
// So a flood to one destination costs at most one event per interval, each persisted before
// the denials it counts are answered, and the counts add up to the denials.
func (l *Logger) CommitDenial(e Event) error {
	return l.denial(e, true)
}

// LogDenial is CommitDenial for a denial nobody waits on (a kernel deny event read from the
// ring buffer: the kernel has refused already): it folds the denial into the same summaries
// but returns at once.
func (l *Logger) LogDenial(e Event) {
	_ = l.denial(e, false)
}

// denial records a denial through the flood summaries, waiting for its event with wait.
func (l *Logger) denial(e Event, wait bool) error {
	if l.discard {
		return nil
	}
	if e.Time.IsZero() {
		e.Time = l.now()
	}
	if e.Sandbox == "" {
		e.Sandbox = l.sandbox
	}
	k := floodKey{e.Kind, e.Decision, e.Reason, e.Rule, e.Destination, e.Sandbox}
	f := &l.floods
	f.mu.Lock()
	st := f.m[k]
	now := l.now()
	if f.stopped || st == nil || (st.group == nil && now.Sub(st.last) >= l.opts.FloodInterval) {
		if !f.stopped {
			f.sweep(now)
			f.m[k] = &floodState{last: now}
		}
		f.mu.Unlock()
		if !wait {
			l.Log(e)
			return nil
		}
		return l.Commit(e)
	}
	g := st.group
	if g == nil {
		g = &floodGroup{first: e, done: make(chan struct{})}
		st.group = g
		time.AfterFunc(st.last.Add(l.opts.FloodInterval).Sub(now), func() { f.flush(k) })
	}
	g.count++
	f.mu.Unlock()
	if !wait {
		return nil
	}
	<-g.done
	return g.err
}

// flush writes the summary of key k's waiting group.
func (f *floods) flush(k floodKey) {
	f.mu.Lock()
	st := f.m[k]
	if st == nil || st.group == nil { // stop flushed it already
		f.mu.Unlock()
		return
	}
	g := st.group
	st.group, st.last = nil, f.l.now()
	f.mu.Unlock()
	ev := g.first
	ev.Count = g.count
	noun := "denials"
	if g.count == 1 {
		noun = "denial"
	}
	ev.Detail = fmt.Sprintf("%d %s in a flood, summarised (the first: %s)", g.count, noun, g.first.Detail)
	g.err = f.l.Commit(ev)
	close(g.done)
}

// sweep drops idle keys when there are too many. f.mu is held.
func (f *floods) sweep(now time.Time) {
	if len(f.m) < maxFloodKeys {
		return
	}
	for k, st := range f.m {
		if st.group == nil && now.Sub(st.last) >= f.l.opts.FloodInterval {
			delete(f.m, k)
		}
	}
}

// stop makes later denials go straight to Commit (which refuses them after Close) and
// writes the summaries still waiting, before Close closes the log.
func (f *floods) stop() {
	f.mu.Lock()
	f.stopped = true
	var keys []floodKey
	for k, st := range f.m {
		if st.group != nil {
			keys = append(keys, k)
		}
	}
	f.mu.Unlock()
	for _, k := range keys {
		f.flush(k)
	}
}
