package audit

import (
	"crypto/ed25519"
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

// Defaults of Options.
const (
	DefaultCheckpointEvery = 10 * time.Second
	DefaultRetryEvery      = 250 * time.Millisecond
	DefaultFloodInterval   = 100 * time.Millisecond
)

// Logger writes events as JSON lines, chained by hash (each line carries its sequence
// number and the SHA-256 of the line before it), to a file (rotated by size and age, the
// chain continuing across files) or, without one, to a writer. It is safe for concurrent use.
//
// Log encodes the event and hands it to a writer goroutine, which writes everything that
// arrived since its last write in one call (group commit): under load many events share one
// write system call. Commit queues its event the same way and returns once its batch's
// write(2) is done, so a caller can release a response only once its event is in the file;
// when no write is under way it writes the batch itself (no hand-off to the writer
// goroutine and back), and callers that arrive meanwhile share the next write. A failed write (a full
// disk, a read-only file system) keeps the batch, makes Health and Commit report the error,
// and is retried until it succeeds. With a signing key, the writer appends Ed25519-signed
// checkpoints of the chain to a second file at rotation, at Close and periodically.
// The zero value is not usable; call New.
type Logger struct {
	discard bool // Discard's Logger: no sinks, no writer goroutine
	redact  func([]byte) []byte
	sandbox string
	now     func() time.Time
	opts    Options
	primary io.Writer // the writer when there is no file, else nil
	mirror  io.Writer // the writer when there is a file (best effort), else nil
	file    *logFile
	cp      *checkpointer // nil without a key

	// mu guards pending and everything below it; flushed and space are signalled under it.
	mu      sync.Mutex
	flushed *sync.Cond // Commit waits here for its line's write
	space   *sync.Cond // Log waits here while pending is over maxPending
	pending []byte
	spare   []byte
	// writing is held by whoever writes to the primary sink (the writer goroutine, or a
	// Commit caller writing its batch itself, see lead): one at a time, in order.
	writing bool
	// mirrorBuf holds written lines not yet copied to mirror, since mirrorAt (writeMirror);
	// mirroring is set while a goroutine copies (one at a time, so copies keep the file's order).
	mirrorBuf   []byte
	mirrorSpare []byte
	mirroring   bool
	mirrorAt    time.Time
	seq         uint64   // the last sequence number given out
	committed   uint64   // the last sequence number given to a Commit caller
	prev        [32]byte // the hash of line seq
	written     uint64   // the last sequence number written to the primary sink
	writtenHash [32]byte
	failedUpTo  uint64 // the last line of the batch whose write last failed
	writeErr    error  // nil while the primary sink takes writes
	cpErr       error  // nil while checkpoints are written
	sealErr     error  // why SealOnClose could not rotate the file at Close
	refused     int64  // Commit calls refused while writeErr was set
	downSince   time.Time
	closed      bool
	exited      bool
	// recent holds encoded (and redacted) lines, a ring; each slot's memory is reused by the
	// line that replaces it, so keeping them costs no allocation per event.
	recent [][]byte
	next   int
	full   bool

	floods floods
	wake   chan struct{}
	urgent chan struct{} // a Commit caller waits for the next write
	done   chan struct{} // closed when the writer goroutine has exited
}

// Options configures a Logger. The zero value writes to stderr with sandbox name "".
type Options struct {
	// Sandbox is the name put in events that have none.
	Sandbox string
	// Writer receives the JSON lines; nil means os.Stderr. With File set it is a best-effort
	// copy (the sidecar's stderr); without, it is where the chain is written.
	Writer io.Writer
	// File, when non-empty, is appended to (created 0600 if missing); the chain continues
	// from its last complete line (or from the newest rotated file beside it).
	File string
	// MaxBytes and MaxAge rotate File (renamed to File.<UTC time>) once it holds that many
	// bytes or is that old; 0 never rotates on that ground.
	MaxBytes int64
	MaxAge   time.Duration
	// Key signs checkpoints of the chain; nil writes none (unless Signer is set).
	Key ed25519.PrivateKey
	// Signer, when set, signs checkpoints instead of Key: a signing service such as Vault's
	// Transit engine, so that the private key stays out of the sidecar. It signs on its own
	// goroutine: the chain goes on while it fails, its checkpoints wait and are retried with
	// backoff (Signing says so), and none is written unsigned or signed otherwise.
	Signer Signer
	// SignGrace is how long Close waits for checkpoints a Signer has not signed yet; 0 means
	// DefaultSignGrace. Those still unsigned then are not written, and Close says so.
	SignGrace time.Duration
	// Checkpoints is the file checkpoints are appended to; "" means File + ".checkpoints"
	// (or no checkpoints without File).
	Checkpoints string
	// CheckpointEvery is the period of checkpoints (when something was written since the
	// last); 0 means DefaultCheckpointEvery.
	CheckpointEvery time.Duration
	// RetryEvery is how often a failed write is retried; 0 means DefaultRetryEvery.
	RetryEvery time.Duration
	// FloodInterval is the span in which denials to one destination share one event after
	// the first (CommitDenial); 0 means DefaultFloodInterval.
	FloodInterval time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Keep is how many recent events Recent returns (for the admin /v1/decisions endpoint);
	// 0 keeps none.
	Keep int
	// Redact, when set, scrubs each encoded line before it is kept (for Recent) or written:
	// the credential broker's redactor, so no secret value reaches the audit trail. Nil
	// writes lines as they are.
	Redact func([]byte) []byte
	// SealOnClose rotates File at Close (after the last write, with a signed "rotate"
	// checkpoint), so that the tail is a sealed file a shipper may take; a later Logger on
	// the same File continues the chain from it in a new file. False leaves the tail open.
	SealOnClose bool
}

// New returns a Logger and starts its writer goroutine; Close stops it. It opens
// Options.File when set and reads where the chain left off.
func New(o Options) (*Logger, error) {
	w := o.Writer
	if w == nil {
		w = os.Stderr
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.CheckpointEvery <= 0 {
		o.CheckpointEvery = DefaultCheckpointEvery
	}
	if o.RetryEvery <= 0 {
		o.RetryEvery = DefaultRetryEvery
	}
	if o.FloodInterval <= 0 {
		o.FloodInterval = DefaultFloodInterval
	}
	if o.SignGrace <= 0 {
		o.SignGrace = DefaultSignGrace
	}
	l := &Logger{sandbox: o.Sandbox, now: o.Now, redact: o.Redact, opts: o, primary: w,
		recent: make([][]byte, o.Keep), wake: make(chan struct{}, 1), urgent: make(chan struct{}, 1), done: make(chan struct{})}
	if o.File != "" {
		f, err := openLogFile(o.File, o.Now)
		if err != nil {
			return nil, err
		}
		l.file, l.primary, l.mirror = f, nil, w
		l.seq, l.prev = f.seq, f.prev
		l.written, l.writtenHash = f.seq, f.prev
		signer := o.Signer
		if signer == nil && o.Key != nil {
			signer = KeySigner(o.Key)
		}
		if signer != nil {
			path := o.Checkpoints
			if path == "" {
				path = o.File + ".checkpoints"
			}
			if l.cp, err = openCheckpointer(path, signer, o.Now, f.seq, l.Log); err != nil {
				_ = f.close()
				return nil, err
			}
		}
	}
	l.flushed = sync.NewCond(&l.mu)
	l.space = sync.NewCond(&l.mu)
	l.floods.init(l)
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
	l.enqueue(&e, false)
}

// enqueue encodes e, gives it the next sequence number and queues it. With refuseDown it
// queues nothing while the primary sink is failing and returns that error. It returns the
// line's sequence number (0 when nothing was queued).
func (l *Logger) enqueue(e *Event, refuseDown bool) (uint64, error) {
	if l.discard {
		return 0, nil
	}
	if e.Time.IsZero() {
		e.Time = l.now()
	}
	if e.Sandbox == "" {
		e.Sandbox = l.sandbox
	}
	bp := lineBufs.Get().(*[]byte)
	defer putLineBuf(bp)
	*bp = e.appendBody((*bp)[:0])
	body := *bp
	if l.redact != nil {
		body = l.redact(body)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if refuseDown && l.writeErr != nil {
		l.refused++
		return 0, l.writeErr
	}
	for len(l.pending) > maxPending && !l.closed {
		l.space.Wait()
	}
	if l.closed {
		return 0, ErrClosed
	}
	l.seq++
	if refuseDown {
		l.committed = l.seq
	}
	start := len(l.pending)
	l.pending = append(l.pending, body...)
	l.pending = appendTail(l.pending, l.seq, &l.prev)
	line := l.pending[start : len(l.pending)-1]
	l.prev = sha256Line(line)
	if len(l.recent) > 0 {
		if cap(l.recent[l.next]) > maxRecentSlot {
			l.recent[l.next] = nil // an unusually large line grew it: let it go
		}
		l.recent[l.next] = append(l.recent[l.next][:0], line...)
		l.next = (l.next + 1) % len(l.recent)
		l.full = l.full || l.next == 0
	}
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return l.seq, nil
}

// maxRecentSlot is the largest buffer a slot of the recent ring keeps for reuse.
const maxRecentSlot = 4 << 10

// lineBufs holds encoding buffers, so that Log (which copies the line into pending) does not
// allocate one per event.
var lineBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// putLineBuf returns a buffer to lineBufs unless an unusually large event grew it.
func putLineBuf(bp *[]byte) {
	if cap(*bp) <= 64<<10 {
		lineBufs.Put(bp)
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
		lines = append(lines, string(l.recent[(l.next-i+len(l.recent))%len(l.recent)]))
	}
	l.mu.Unlock()
	out := make([]map[string]any, 0, len(lines))
	for _, line := range lines {
		dec := json.NewDecoder(strings.NewReader(line))
		dec.UseNumber()
		var m map[string]any
		if err := dec.Decode(&m); err != nil { // cannot happen: appendBody writes valid JSON
			m = map[string]any{"error": "undecodable audit line"}
		}
		delete(m, "level") // the logrus markers are not part of the event
		delete(m, "msg")
		out = append(out, m)
	}
	return out
}

// Close writes every queued event, signs a last checkpoint, stops the writer and closes the
// files. It returns the write error the Logger was left with, if any. It is idempotent.
func (l *Logger) Close() error {
	if l.discard {
		return nil
	}
	l.floods.stop()
	l.mu.Lock()
	already := l.closed
	l.closed = true
	l.space.Broadcast()
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
	<-l.done
	var cpErr error
	if !already && l.cp != nil {
		// Without l.mu: the signing queue logs its outage notes through it.
		cpErr = l.cp.close(l.opts.SignGrace)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	err := errors.Join(l.writeErr, l.cpErr, l.sealErr, cpErr)
	if !already && l.file != nil {
		if cerr := l.file.close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close audit log: %w", cerr))
		}
	}
	return err
}

// Signing returns the state of checkpoint signing: with a remote Signer, whether
// checkpoints wait for it and why. The zero SignStatus means no checkpoints are signed.
func (l *Logger) Signing() SignStatus {
	switch {
	case l.cp == nil:
		return SignStatus{}
	case l.cp.queue != nil:
		return l.cp.queue.status()
	}
	return SignStatus{Signer: l.cp.signer.String()}
}
