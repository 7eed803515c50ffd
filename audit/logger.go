package audit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// maxPending is how many encoded bytes may wait for the writer before Log blocks: events are
// never dropped, a slow sink slows the sidecar down instead.
const maxPending = 1 << 20

// linger is how long the writer rests after a write before it takes the next batch. Under
// load, the events of that span share one write per sink (each write is a system call, which
// costs more than encoding the event); an event logged after a quiet spell is written at
// once, since the writer is then already waiting for it. Close may wait one linger longer.
const linger = time.Millisecond

// Logger writes events as JSON lines to a writer (stderr by default) and optionally a file.
// It is safe for concurrent use. Log encodes the event and hands it to a writer goroutine,
// which writes everything that arrived since its last write in one call per sink (group
// commit): under load many events share one write system call, and a request never waits for
// the disk. Close writes what is pending. The zero value is not usable; call New.
type Logger struct {
	discard bool // Discard's Logger: no sinks, no writer goroutine
	redact  func([]byte) []byte
	sandbox string
	now     func() time.Time
	sinks   []io.Writer
	file    *os.File

	// mu guards pending, closed, the ring of recent events (recent, next, full) and writeErr;
	// wake and space are signalled under it.
	mu       sync.Mutex
	wake     *sync.Cond // the writer waits here for pending lines or close
	space    *sync.Cond // Log waits here while pending is over maxPending
	pending  []byte
	closed   bool
	recent   []string // encoded (and redacted) lines, a ring
	next     int
	full     bool
	writeErr error

	done chan struct{} // closed when the writer goroutine has written everything and exited
}

// Options configures a Logger. The zero value writes to stderr with sandbox name "".
type Options struct {
	// Sandbox is the name put in events that have none.
	Sandbox string
	// Writer receives the JSON lines; nil means os.Stderr.
	Writer io.Writer
	// File, when non-empty, is also appended to (created 0600 if missing).
	File string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Keep is how many recent events Recent returns (for the admin /v1/decisions endpoint);
	// 0 keeps none.
	Keep int
	// Redact, when set, scrubs each encoded line before it is kept (for Recent) or written:
	// the credential broker's redactor, so no secret value reaches the audit trail. Nil
	// writes lines as they are.
	Redact func([]byte) []byte
}

// New returns a Logger and starts its writer goroutine; Close stops it. It opens
// Options.File when set.
func New(o Options) (*Logger, error) {
	w := o.Writer
	if w == nil {
		w = os.Stderr
	}
	l := &Logger{sandbox: o.Sandbox, now: o.Now, redact: o.Redact, sinks: []io.Writer{w}, recent: make([]string, o.Keep), done: make(chan struct{})}
	if l.now == nil {
		l.now = time.Now
	}
	if o.File != "" {
		f, err := os.OpenFile(o.File, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("open audit log: %w", err)
		}
		l.file = f
		l.sinks = append(l.sinks, f)
	}
	l.wake = sync.NewCond(&l.mu)
	l.space = sync.NewCond(&l.mu)
	go l.writeLoop()
	return l, nil
}

// Discard returns a Logger that drops every event (for tests and tools that audit nothing).
// It starts no goroutine; Close is a no-op.
func Discard() *Logger {
	return &Logger{discard: true}
}

// Log records one event. It returns once the event is queued for writing; after Close it
// drops the event.
func (l *Logger) Log(e Event) {
	if l.discard {
		return
	}
	if e.Time.IsZero() {
		e.Time = l.now()
	}
	if e.Sandbox == "" {
		e.Sandbox = l.sandbox
	}
	bp := lineBufs.Get().(*[]byte)
	defer putLineBuf(bp)
	*bp = e.appendJSON((*bp)[:0])
	line := *bp
	if l.redact != nil {
		line = l.redact(line)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.pending) > maxPending && !l.closed {
		l.space.Wait()
	}
	if l.closed {
		return
	}
	l.pending = append(l.pending, line...)
	if len(l.recent) > 0 {
		l.recent[l.next] = string(line) // a copy: line's buffer goes back to the pool
		l.next = (l.next + 1) % len(l.recent)
		l.full = l.full || l.next == 0
	}
	l.wake.Signal()
}

// lineBufs holds encoding buffers, so that Log (which copies the line into pending) does not
// allocate one per event.
var lineBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// putLineBuf returns a buffer to lineBufs unless an unusually large event grew it.
func putLineBuf(bp *[]byte) {
	if cap(*bp) <= 64<<10 {
		lineBufs.Put(bp)
	}
}

// writeLoop writes pending lines until the Logger is closed and nothing is pending.
func (l *Logger) writeLoop() {
	defer close(l.done)
	var batch []byte
	for {
		l.mu.Lock()
		for len(l.pending) == 0 && !l.closed {
			l.wake.Wait()
		}
		if len(l.pending) == 0 && l.closed {
			l.mu.Unlock()
			return
		}
		batch, l.pending = l.pending, batch[:0]
		l.space.Broadcast()
		l.mu.Unlock()

		var errs []error
		for _, w := range l.sinks {
			if _, err := w.Write(batch); err != nil {
				errs = append(errs, err)
			}
		}
		l.mu.Lock()
		if err := errors.Join(errs...); err != nil && l.writeErr == nil {
			l.writeErr = fmt.Errorf("write audit events: %w", err)
		}
		closed := l.closed
		l.mu.Unlock()
		if !closed {
			time.Sleep(linger)
		}
	}
}

// Recent returns up to Options.Keep most recent events, newest first, as the JSON objects
// the audit log holds: each is its written line decoded (numbers as json.Number), so the
// admin endpoint shows exactly what the log holds, redaction included, and the line encoder
// (encode.go) is the only one.
func (l *Logger) Recent() []map[string]any {
	l.mu.Lock()
	n := l.next
	if l.full {
		n = len(l.recent)
	}
	lines := make([]string, 0, n)
	for i := 1; i <= n; i++ {
		lines = append(lines, l.recent[(l.next-i+len(l.recent))%len(l.recent)])
	}
	l.mu.Unlock()
	out := make([]map[string]any, 0, len(lines))
	for _, line := range lines {
		dec := json.NewDecoder(strings.NewReader(line))
		dec.UseNumber()
		var m map[string]any
		if err := dec.Decode(&m); err != nil { // cannot happen: appendJSON writes valid JSON
			m = map[string]any{"error": "undecodable audit line"}
		}
		delete(m, "level") // the logrus markers are not part of the event
		delete(m, "msg")
		out = append(out, m)
	}
	return out
}

// Close writes every queued event, stops the writer and closes the audit file. It returns
// the first write error the Logger met, if any. It is idempotent.
func (l *Logger) Close() error {
	if l.discard {
		return nil
	}
	l.mu.Lock()
	already := l.closed
	l.closed = true
	l.wake.Signal()
	l.space.Broadcast()
	l.mu.Unlock()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.writeErr
	if !already && l.file != nil {
		if cerr := l.file.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close audit log: %w", cerr)
		}
	}
	return err
}
