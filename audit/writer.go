package audit

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"time"
)

// yieldBelow bounds the batch a Commit caller lets grow before it writes (waitWritten): a
// batch this large is written at once.
const yieldBelow = 64 << 10

// ErrClosed is returned by Commit after Close.
var ErrClosed = errors.New("audit log closed")

// ErrUnavailable wraps every error Commit and Health return for an audit log that cannot be
// written: callers fail closed on it.
var ErrUnavailable = errors.New("audit log unavailable")

// Commit records one event and returns once the write(2) of the batch holding it is done,
// so that a caller may release a response only after its event is in the file. Concurrent
// calls share writes (group commit). While the log cannot be written it queues nothing
// and returns the error at once (wrapping ErrUnavailable); it returns ErrClosed after Close.
func (l *Logger) Commit(e Event) error {
	seq, err := l.enqueue(&e, true)
	if err != nil || seq == 0 {
		return err
	}
	led, err := l.waitWritten(seq)
	if led && l.mirrorBehind() {
		// The writer goroutine has not copied a full mirror's worth while Commit callers
		// wrote batch after batch (it waits its turn behind them): the caller that wrote
		// copies it, after the callers of its batch were released, so the copy stays within
		// its bound instead of growing (and being reallocated) until the callers pause.
		l.writeMirror(false)
	}
	return err
}

// mirrorBehind reports whether the mirror's copy has reached mirrorMaxBytes.
func (l *Logger) mirrorBehind() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mirror != nil && len(l.mirrorBuf) >= mirrorMaxBytes
}

// waitWritten waits until line seq is written, or its batch's write failed. When no write
// is under way it yields the processor once (so that goroutines ready to commit join the
// batch) and then writes what is pending itself (lead); when it cannot (a rotation is due,
// the sink is failing, the Logger is closing) the writer goroutine is asked to, at once.
// led says whether the caller wrote a batch.
func (l *Logger) waitWritten(seq uint64) (led bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	asked, yielded := false, false
	for l.written < seq {
		switch {
		case l.writeErr != nil && l.failedUpTo >= seq:
			return led, l.writeErr
		case l.exited:
			return led, ErrClosed
		case l.canLead():
			if !yielded && len(l.pending) < yieldBelow {
				// Before writing, let the goroutines that are ready to run have their turn
				// once: the proxy's request goroutines run one after another on a P, and
				// each used to find no write under way and write its own event alone
				// (0.9 writes per request); those that commit meanwhile join this batch
				// (0.25). The caller still returns only once its event's write is done.
				yielded = true
				l.mu.Unlock()
				runtime.Gosched()
				l.mu.Lock()
				continue
			}
			l.lead()
			led = true
			continue
		case !l.writing && !asked:
			asked = true
			select { // a caller is waiting: the writer cuts its linger short
			case l.urgent <- struct{}{}:
			default:
			}
			select {
			case l.wake <- struct{}{}:
			default:
			}
		}
		l.flushed.Wait()
	}
	return led, nil
}

// canLead reports whether a Commit caller may write what is pending itself: nobody is
// writing, the sink takes writes, and the file needs no rotation first (the writer
// goroutine rotates and checkpoints). l.mu is held.
func (l *Logger) canLead() bool {
	return !l.writing && !l.closed && l.writeErr == nil && len(l.pending) > 0 &&
		(l.file == nil || !l.file.due(l.opts.MaxBytes, l.opts.MaxAge))
}

// lead writes what is pending on the calling goroutine, as flush does. l.mu is held (and
// released during the write).
func (l *Logger) lead() {
	batch, last, lastHash := l.take()
	l.mu.Unlock()
	var err error
	if l.file != nil {
		err = l.file.write(batch)
	} else {
		_, err = l.primary.Write(batch)
	}
	l.mu.Lock()
	l.settle(batch, last, lastHash, err, true)
}

// take takes the role of writer and the pending batch. l.mu is held and the role free.
func (l *Logger) take() (batch []byte, last uint64, lastHash [32]byte) {
	l.writing = true
	batch, last, lastHash = l.pending, l.seq, l.prev
	l.pending, l.spare = l.spare[:0], nil
	l.space.Broadcast()
	return batch, last, lastHash
}

// settle records the write of batch (through line last) or its failure, and gives up the
// role of writer; byCaller says a Commit caller wrote it (lead). l.mu is held.
func (l *Logger) settle(batch []byte, last uint64, lastHash [32]byte, err error, byCaller bool) {
	l.writing = false
	defer l.flushed.Broadcast()
	if err != nil {
		// Keep the batch, in order, ahead of what arrived meanwhile: the chain must not
		// have a hole, so it is written once the sink takes writes again.
		l.pending = append(batch, l.pending...)
		l.failedUpTo = last
		if l.writeErr == nil {
			l.downSince = l.now()
		}
		l.writeErr = fmt.Errorf("%w: write audit events: %w", ErrUnavailable, err)
		return
	}
	if l.mirror != nil {
		// stderr is a copy; the file is the record. The copy goes out after the waiting
		// Commit callers are released, gathered over several batches (writeMirror).
		if len(l.mirrorBuf) == 0 {
			l.mirrorAt = time.Now()
			if byCaller {
				// The writer goroutine may be waiting with no copy due: wake it, so the copy
				// stays within mirrorMaxAge of the file.
				select {
				case l.wake <- struct{}{}:
				default:
				}
			}
		}
		l.mirrorBuf = append(l.mirrorBuf, batch...)
	}
	l.written, l.writtenHash, l.spare = last, lastHash, batch[:0]
	recovered := l.writeErr != nil
	l.writeErr = nil
	if recovered {
		l.noteOutage()
	}
}

// Health returns why events are not reaching the audit file (a full disk, a read-only file
// system, a failing checkpoint file), wrapping ErrUnavailable, or nil while every write
// succeeds. It turns nil again once a retried write succeeds. A Discard Logger is always
// healthy.
func (l *Logger) Health() error {
	if l.discard {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.writeErr != nil {
		return l.writeErr
	}
	return l.cpErr
}

// writeLoop writes pending lines, retries a failed write, rotates the file and writes
// checkpoints, until the Logger is closed and nothing more can be written.
func (l *Logger) writeLoop() {
	defer func() {
		l.mu.Lock()
		l.exited = true
		l.flushed.Broadcast()
		l.mu.Unlock()
		close(l.done)
	}()
	tick := time.NewTicker(min(l.opts.CheckpointEvery, l.opts.RetryEvery))
	defer tick.Stop()
	rest := time.NewTimer(linger)
	defer rest.Stop()
	mirrorDue := time.NewTimer(mirrorMaxAge)
	defer mirrorDue.Stop()
	for {
		l.await(tick.C, mirrorDue)
		l.gather(rest)
		ok, closed := l.flush()
		if closed {
			l.seal()
		}
		l.maintain(closed)
		if closed {
			l.writeMirror(true)
			return
		}
		if ok {
			l.rest(rest)
		}
	}
}

// await waits for lines to write or a tick; meanwhile it copies written lines to the mirror
// once they are due (writeMirror), so a copy is at most mirrorMaxAge behind the file.
func (l *Logger) await(tick <-chan time.Time, due *time.Timer) {
	l.writeMirror(false)
	for {
		var dueC <-chan time.Time
		if at, ok := l.mirrorDue(); ok {
			due.Reset(time.Until(at))
			dueC = due.C
		}
		select {
		case <-l.wake:
			return
		case <-tick:
			return
		case <-dueC:
			l.writeMirror(true)
		}
	}
}

// rest waits a linger after a write, so that logged events gather into one batch, unless a
// Commit caller is waiting: it is not kept waiting a linger (what arrives while a write is
// under way still shares the next one).
func (l *Logger) rest(t *time.Timer) {
	select {
	case <-l.urgent:
		return
	default:
	}
	t.Reset(linger)
	select {
	case <-t.C:
	case <-l.urgent:
		t.Stop() // Go 1.23 timers: Reset and Stop discard a stale tick, no drain needed
	}
}

// gather lets events queued by Log wait up to a linger for company before they are written,
// unless a Commit caller is waiting (then at once). Under the proxy's load the completion
// event of one request and the decision event of the next then share a write instead of
// taking one each: a write is a system call, and the writer's writes were about a tenth
// of the proxy's CPU per intercepted request (make bench, profile).
func (l *Logger) gather(t *time.Timer) {
	l.mu.Lock()
	waiting := l.committed > l.written && l.writeErr == nil
	l.mu.Unlock()
	if waiting {
		return
	}
	t.Reset(linger)
	select {
	case <-t.C:
	case <-l.urgent:
		t.Stop()
	}
}

// flush writes what is pending in one write (once no Commit caller is writing). It reports
// whether the write succeeded (or there was nothing to write) and whether the Logger is
// closed with nothing more to do.
func (l *Logger) flush() (ok, closed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.writing {
		l.flushed.Wait()
	}
	if len(l.pending) == 0 {
		return true, l.closed
	}
	batch, last, lastHash := l.take()
	l.mu.Unlock()
	err := l.writePrimary(batch)
	l.mu.Lock()
	l.settle(batch, last, lastHash, err, false)
	if err != nil {
		return false, l.closed // a closed Logger gives up: Close returns the error
	}
	return true, l.closed && len(l.pending) == 0
}

// Bounds of the mirror's lag behind the file: the copy is written once it holds
// mirrorMaxBytes, or its oldest line is mirrorMaxAge old, or the Logger closes.
const (
	mirrorMaxBytes = 64 << 10
	mirrorMaxAge   = 100 * time.Millisecond
)

// writeMirror copies the lines written to the file since the last copy to the mirror
// (stderr) in one write: always with force, else when a bound is reached. Under load this
// is one write to stderr per many batches instead of one per batch; the copy is best effort
// and its order is the file's: one goroutine copies at a time (mirroring); without force a
// call finding a copy under way leaves it to that one. The writer goroutine calls it, and a
// Commit caller that wrote a batch when the copy is behind (Commit).
func (l *Logger) writeMirror(force bool) {
	l.mu.Lock()
	for l.mirroring {
		if !force {
			l.mu.Unlock()
			return
		}
		l.flushed.Wait()
	}
	buf := l.mirrorBuf
	if len(buf) == 0 || !force && len(buf) < mirrorMaxBytes && time.Since(l.mirrorAt) < mirrorMaxAge {
		l.mu.Unlock()
		return
	}
	l.mirroring = true
	l.mirrorBuf, l.mirrorSpare = l.mirrorSpare[:0], nil
	l.mu.Unlock()
	_, _ = l.mirror.Write(buf)
	if cap(buf) > 4*mirrorMaxBytes {
		buf = nil // a burst grew it: let it go
	}
	l.mu.Lock()
	l.mirrorSpare = buf[:0]
	l.mirroring = false
	l.flushed.Broadcast() // a forced copy may be waiting for this one
	l.mu.Unlock()
}

// mirrorDue returns when the mirror's oldest line is due to be copied, or false when it
// holds none.
func (l *Logger) mirrorDue() (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mirrorAt.Add(mirrorMaxAge), len(l.mirrorBuf) > 0
}

// noteOutage queues an event saying how long the log could not be written and how many
// requests were refused meanwhile. l.mu is held.
func (l *Logger) noteOutage() {
	refused, since := l.refused, l.downSince
	l.refused = 0
	e := Event{Time: l.now(), Sandbox: l.sandbox, Kind: KindAudit, Decision: DecisionDeny,
		Reason: "audit_unavailable", Count: refused,
		Detail: "the audit log could not be written from " + since.UTC().Format(time.RFC3339Nano) +
			"; requests refused meanwhile: " + strconv.FormatInt(refused, 10)}
	body := e.appendBody(nil)
	if l.redact != nil {
		body = l.redact(body)
	}
	l.seq++
	start := len(l.pending)
	l.pending = appendTail(append(l.pending, body...), l.seq, &l.prev)
	l.prev = sha256Line(l.pending[start:])
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// writePrimary writes batch to the file (rotating it first when due) or the writer.
func (l *Logger) writePrimary(batch []byte) error {
	if l.file == nil {
		_, err := l.primary.Write(batch)
		return err
	}
	if l.file.due(l.opts.MaxBytes, l.opts.MaxAge) {
		if err := l.rotate(); err != nil {
			return err
		}
	}
	return l.file.write(batch)
}

// seal rotates a non-empty file at Close when Options.SealOnClose asks for it. A failure is
// kept for Close to return (the tail stays in the open file, and is sealed by the next
// start's rotation or shipped from there).
func (l *Logger) seal() {
	if !l.opts.SealOnClose || l.file == nil || l.file.size == 0 {
		return
	}
	if err := l.rotate(); err != nil {
		l.mu.Lock()
		l.sealErr = fmt.Errorf("%w: seal audit log: %w", ErrUnavailable, err)
		l.mu.Unlock()
	}
}

// rotate signs a checkpoint of the chain so far and starts a new file.
func (l *Logger) rotate() error {
	l.checkpoint("rotate")
	return l.file.rotate()
}

// maintain writes a checkpoint when one is due (periodically, or the last at close).
func (l *Logger) maintain(closed bool) {
	if l.cp == nil {
		return
	}
	switch {
	case closed:
		l.checkpoint("shutdown")
	case l.now().Sub(l.cp.lastAt) >= l.opts.CheckpointEvery:
		l.checkpoint("periodic")
	}
}

// checkpoint signs the last written line's sequence number and hash, when anything was
// written since the last checkpoint. It runs on the writer goroutine only.
func (l *Logger) checkpoint(why string) {
	if l.cp == nil {
		return
	}
	l.mu.Lock()
	seq, hash := l.written, l.writtenHash
	l.mu.Unlock()
	now := l.now()
	if seq == l.cp.lastSeq && why == "periodic" {
		l.cp.lastAt = now
		return
	}
	err := l.cp.write(Checkpoint{Time: now, Sandbox: l.sandbox, Why: why, File: l.file.base(), Seq: seq, Hash: hash})
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.cpErr = fmt.Errorf("%w: write audit checkpoint: %w", ErrUnavailable, err)
		return
	}
	l.cpErr = nil
}
