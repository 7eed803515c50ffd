package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"
)

// Defaults of the remote signing queue.
const (
	// DefaultSignGrace is how long Close waits for checkpoints a remote Signer has not
	// signed yet (Options.SignGrace).
	DefaultSignGrace = 5 * time.Second
	signTimeout      = 5 * time.Second // bounds one signing request
	signBackoffMin   = 250 * time.Millisecond
	signBackoffMax   = 30 * time.Second
)

// SignStatus is the state of checkpoint signing (Logger.Signing).
type SignStatus struct {
	// Signer names the signer; "" when the Logger signs no checkpoints.
	Signer string
	// Pending is how many checkpoints were made and wait for their signature; OldestSeq is
	// the sequence number the oldest of them covers.
	Pending   int
	OldestSeq uint64
	// Since is when signing began failing (zero while it succeeds); LastError says why.
	Since     time.Time
	LastError string
	// Signed counts the checkpoints signed and written since the Logger started.
	Signed uint64
}

// Lagging reports whether checkpoints wait because signing fails.
func (s SignStatus) Lagging() bool { return !s.Since.IsZero() }

// signQueue signs checkpoints with a remote Signer (a signing service) on its own goroutine
// and appends them, in order, to the checkpoint file, so that the writer, and the requests
// waiting for their events to be written, never wait for the service. A checkpoint that
// cannot be signed stays queued and is retried with backoff; it is never written unsigned
// nor signed otherwise (fail closed on evidence). Queued periodic checkpoints are superseded
// by the next checkpoint; rotation, start and shutdown checkpoints are each kept, as verify
// relies on the rotations.
type signQueue struct {
	signer Signer
	f      *os.File
	note   func(Event) // logs an event about signing into the chain
	now    func() time.Time

	ctx    context.Context // cancelled when Close gives up waiting
	cancel context.CancelFunc
	kick   chan struct{}
	drain  chan struct{} // closed by finish: exit once the queue is empty
	done   chan struct{}

	// mu guards everything below.
	mu       sync.Mutex
	queue    []Checkpoint
	inflight bool // queue[0] is being signed
	failing  error
	since    time.Time
	signed   uint64
}

func newSignQueue(s Signer, f *os.File, now func() time.Time, note func(Event)) *signQueue {
	q := &signQueue{signer: s, f: f, note: note, now: now,
		kick: make(chan struct{}, 1), drain: make(chan struct{}), done: make(chan struct{})}
	q.ctx, q.cancel = context.WithCancel(context.Background())
	go q.run()
	return q
}

// submit queues c for signing. It never blocks on the signer.
func (q *signQueue) submit(c Checkpoint) {
	q.mu.Lock()
	n := len(q.queue)
	if n > 0 && (n > 1 || !q.inflight) && q.queue[n-1].Why == "periodic" {
		q.queue[n-1] = c // the newer checkpoint covers everything the older did
	} else {
		q.queue = append(q.queue, c)
	}
	q.mu.Unlock()
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// run signs the queue's head until the queue is drained at finish, or finish gives up.
func (q *signQueue) run() {
	defer close(q.done)
	backoff := signBackoffMin
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		c, ok := q.head()
		if !ok {
			select {
			case <-q.kick:
				continue
			case <-q.drain:
				return
			case <-q.ctx.Done():
				return
			}
		}
		if q.settle(q.signOne(c)) {
			backoff = signBackoffMin
			continue
		}
		select {
		case <-q.drain: // closing: retry often within the grace
			backoff = signBackoffMin
		default:
		}
		t.Reset(backoff)
		select {
		case <-t.C:
		case <-q.ctx.Done():
			t.Stop()
			return
		}
		backoff = min(2*backoff, signBackoffMax)
	}
}

func (q *signQueue) head() (Checkpoint, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.queue) == 0 {
		return Checkpoint{}, false
	}
	q.inflight = true
	return q.queue[0], true
}

// signOne signs c and appends it to the checkpoint file.
func (q *signQueue) signOne(c Checkpoint) error {
	ctx, cancel := context.WithTimeout(q.ctx, signTimeout)
	defer cancel()
	c, err := signCheckpoint(ctx, q.signer, c)
	if err != nil {
		return fmt.Errorf("sign audit checkpoint of seq %d with %s: %w", c.Seq, q.signer, err)
	}
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if _, err := q.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write audit checkpoint: %w", err)
	}
	return nil
}

// settle records the outcome of signing the head; it reports whether it succeeded. The first
// failure of an outage, and the recovery, are logged into the chain.
func (q *signQueue) settle(err error) bool {
	q.mu.Lock()
	q.inflight = false
	var note *Event
	if err == nil {
		q.queue = q.queue[1:]
		q.signed++
		if q.failing != nil {
			note = &Event{Detail: "checkpoint signing by " + q.signer.String() + " resumed; it failed from " +
				q.since.UTC().Format(time.RFC3339Nano) + " (" + q.failing.Error() + "), and the checkpoints made meanwhile are signed now"}
			q.failing, q.since = nil, time.Time{}
		}
	} else {
		if q.failing == nil {
			q.since = q.now()
			note = &Event{Detail: "checkpoint signing by " + q.signer.String() + " failed: " + err.Error() +
				"; the checkpoint of seq " + strconv.FormatUint(q.queue[0].Seq, 10) +
				" and later ones wait unsigned (never signed otherwise) and are retried"}
		}
		q.failing = err
	}
	q.mu.Unlock()
	if note != nil && q.note != nil {
		note.Kind, note.Decision, note.Reason = KindAudit, DecisionDeny, "audit_signing_unavailable"
		q.note(*note)
	}
	return err == nil
}

// status returns the queue's SignStatus.
func (q *signQueue) status() SignStatus {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := SignStatus{Signer: q.signer.String(), Pending: len(q.queue), Since: q.since, Signed: q.signed}
	if len(q.queue) > 0 {
		s.OldestSeq = q.queue[0].Seq
	}
	if q.failing != nil {
		s.LastError = q.failing.Error()
	}
	return s
}

// finish waits up to grace for the queue to be signed, then stops it. It returns an error
// naming the checkpoints left unsigned: they are not written.
func (q *signQueue) finish(grace time.Duration) error {
	close(q.drain)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-q.done:
	case <-t.C:
		q.cancel()
		<-q.done
	}
	q.cancel()
	q.mu.Lock()
	defer q.mu.Unlock()
	if n := len(q.queue); n > 0 {
		return fmt.Errorf("%w: %d audit checkpoints (seq %d..%d) left unsigned at close: %v",
			ErrUnavailable, n, q.queue[0].Seq, q.queue[n-1].Seq, q.failing)
	}
	return nil
}
