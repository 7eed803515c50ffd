package llmproxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/internal/crcline"
)

// commitInterval is the least time between two group commits of the ledger. An fsync holds
// the Go scheduler's P until sysmon takes it back, so a sync per call would stall handlers;
// one per 10 ms costs little and bounds what a crash can lose to that window.
const commitInterval = 10 * time.Millisecond

// LedgerFile is the ledger's file name in the state directory.
const LedgerFile = "llm-ledger.jsonl"

// The kinds of ledger records.
const (
	// RecordReserve is written when a call is dispatched, with its reservation.
	RecordReserve = "reserve"
	// RecordSettle is written when a call ends, with its real usage (or its reservation when
	// the usage could not be known: Estimated).
	RecordSettle = "settle"
)

// Record is one ledger line. A call has a reserve record and, once it ends, a settle record
// with the same ID; a reserve without a settle (the sidecar died mid-call) is charged in full
// when the ledger is next opened.
type Record struct {
	Seq     int64     `json:"seq"`
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	ID      string    `json:"id"`
	Sandbox string    `json:"sandbox,omitempty"`
	// Identity is the spec.identities name that made the call; "" for the sandbox's own
	// (and in ledgers written before identities existed).
	Identity string `json:"identity,omitempty"`
	Model    string `json:"model"`
	Provider string `json:"provider,omitempty"`
	Input    int64  `json:"input_tokens"`
	Output   int64  `json:"output_tokens"`
	// CostNano is the cost in nano-dollars (1e-9 USD).
	CostNano int64 `json:"cost_nusd"`
	Status   int   `json:"status,omitempty"`
	// Estimated marks a settle that charged the reservation because the real usage is
	// unknown (stream cut or interrupted, sidecar restart).
	Estimated bool `json:"estimated,omitempty"`
}

// ModelUsage is the usage of one model in the ledger.
type ModelUsage struct {
	Model    string `json:"model"`
	Provider string `json:"provider,omitempty"`
	Requests int64  `json:"requests"`
	Input    int64  `json:"input_tokens"`
	Output   int64  `json:"output_tokens"`
	CostNano int64  `json:"cost_nusd"`
	// Estimated counts the calls charged at their reservation (usage unknown).
	Estimated int64 `json:"estimated,omitempty"`
}

// Totals is what a ledger adds up to.
type Totals struct {
	Models []ModelUsage `json:"models"`
	Total  ModelUsage   `json:"total"`
	// Identities are the same figures for the calls of each identity (spec.identities),
	// sorted by name; the calls of the sandbox's own identity are in Models and Total only.
	Identities []IdentityTotals `json:"identities,omitempty"`
	// Pending are reservations of calls without a settle record yet.
	Pending []Record `json:"-"`
}

// IdentityTotals are one identity's figures in a ledger.
type IdentityTotals struct {
	Identity string       `json:"identity"`
	Models   []ModelUsage `json:"models"`
	Total    ModelUsage   `json:"total"`
}

// Identity returns identity name's figures as Totals of their own (its pending
// reservations included), and whether the ledger holds any call of it.
func (t Totals) Identity(name string) (Totals, bool) {
	out := Totals{}
	for _, r := range t.Pending {
		if r.Identity == name {
			out.Pending = append(out.Pending, r)
		}
	}
	for _, it := range t.Identities {
		if it.Identity == name {
			out.Models, out.Total = it.Models, it.Total
			return out, true
		}
	}
	return out, len(out.Pending) > 0
}

// usageSet is the usage of one set of calls, per model and in total.
type usageSet struct {
	byModel map[string]*ModelUsage
	total   ModelUsage
}

// add counts a settle record.
func (u *usageSet) add(r Record) {
	if u.byModel == nil {
		u.byModel = make(map[string]*ModelUsage)
	}
	m := u.byModel[r.Model]
	if m == nil {
		m = &ModelUsage{Model: r.Model}
		u.byModel[r.Model] = m
	}
	for _, x := range []*ModelUsage{m, &u.total} {
		x.Provider = r.Provider
		x.Requests++
		x.Input += r.Input
		x.Output += r.Output
		x.CostNano += r.CostNano
		if r.Estimated {
			x.Estimated++
		}
	}
	u.total.Provider, u.total.Model = "", ""
}

// models returns the per-model usage, sorted by model.
func (u *usageSet) models() []ModelUsage {
	var out []ModelUsage
	for _, m := range u.byModel {
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Model < out[j].Model })
	return out
}

// replay is the state of a ledger read from disk.
type replay struct {
	usageSet
	ids    map[string]*usageSet // by identity, for the calls of identities
	open   map[string]Record    // reserve records without a settle
	recent []Record             // settle records, in order, for the minute window
	seq    int64
	good   int64 // offset after the last good line
	torn   bool  // a torn or unverifiable last line follows good
}

// readLedger reads and checks path. A torn last line (no newline, or failing its checksum) is
// tolerated and reported; a bad line before the last is ErrLedgerCorrupt.
func readLedger(path string) (*replay, error) {
	rp := &replay{ids: make(map[string]*usageSet), open: make(map[string]Record)}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return rp, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read usage ledger: %w", err)
	}
	for lineNo := 1; len(data) > 0; lineNo++ {
		nl := bytes.IndexByte(data, '\n')
		if nl < 0 {
			rp.torn = true // the last write was cut short
			break
		}
		r, ok := decodeRecord(data[:nl])
		if !ok {
			if nl == len(data)-1 {
				rp.torn = true
				break
			}
			return nil, fmt.Errorf("%s:%d: %w: the line fails its checksum; restore the file from a backup or move it away to start from zero", path, lineNo, ErrLedgerCorrupt)
		}
		rp.apply(r)
		rp.good += int64(nl + 1)
		data = data[nl+1:]
	}
	return rp, nil
}

// apply adds one record to the replay state.
func (rp *replay) apply(r Record) {
	rp.seq = max(rp.seq, r.Seq)
	switch r.Kind {
	case RecordReserve:
		rp.open[r.ID] = r
	case RecordSettle:
		delete(rp.open, r.ID)
		rp.add(r)
	}
}

// add counts a settle record: in the sandbox's figures, and in its identity's.
func (rp *replay) add(r Record) {
	rp.usageSet.add(r)
	if r.Identity != "" {
		u := rp.ids[r.Identity]
		if u == nil {
			u = &usageSet{}
			rp.ids[r.Identity] = u
		}
		u.add(r)
	}
	rp.recent = append(rp.recent, r)
}

// totals returns the per-model usage, sorted by model.
func (rp *replay) totals() Totals {
	t := Totals{Total: rp.total, Models: rp.models()}
	for _, name := range slices.Sorted(maps.Keys(rp.ids)) {
		u := rp.ids[name]
		t.Identities = append(t.Identities, IdentityTotals{Identity: name, Models: u.models(), Total: u.total})
	}
	for _, r := range rp.open {
		t.Pending = append(t.Pending, r)
	}
	return t
}

// ReadLedger reads the ledger of stateDir without changing it (for airlock usage while a
// sidecar runs). Pending reservations are reported in Totals.Pending, not charged. It may
// return ErrLedgerCorrupt or an I/O error; a missing ledger is empty.
func ReadLedger(stateDir string) (Totals, error) {
	rp, err := readLedger(filepath.Join(stateDir, LedgerFile))
	if err != nil {
		return Totals{}, err
	}
	return rp.totals(), nil
}

// Ledger is the append-only usage ledger in the state directory: one JSON line per record,
// each with a CRC-32C, written by one goroutine that writes and fsyncs everything appended
// since its last write (group commit), so a call never waits for the disk. Close writes and
// syncs what is pending. It is safe for concurrent use.
type Ledger struct {
	path string
	f    *os.File
	now  func() time.Time

	// mu guards pending, seq, closed, writeErr, the totals (byModel, total) and written.
	mu       sync.Mutex
	wake     *sync.Cond // the writer waits here for pending records or close
	synced   *sync.Cond // Flush waits here for written to reach its target
	pending  []byte
	seq      int64
	appended int64 // seq of the last record appended
	written  int64 // seq of the last record written and synced
	closed   bool
	writeErr error
	state    *replay

	done chan struct{}
}

// OpenLedger opens (creating it 0600 if needed) the ledger of stateDir, replays it, cuts off
// a torn last line, and charges every reservation left without a settle (a call the
// previous sidecar did not finish) in full with a settle record of its own. It may return
// ErrLedgerCorrupt or an I/O error.
func OpenLedger(stateDir string, now func() time.Time) (*Ledger, error) {
	if now == nil {
		now = time.Now
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("create state directory: %w", err)
	}
	path := filepath.Join(stateDir, LedgerFile)
	rp, err := readLedger(path)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open usage ledger: %w", err)
	}
	if rp.torn {
		if err := f.Truncate(rp.good); err != nil {
			f.Close()
			return nil, fmt.Errorf("cut the torn last line of the usage ledger: %w", err)
		}
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		f.Close()
		return nil, fmt.Errorf("open usage ledger: %w", err)
	}
	l := &Ledger{path: path, f: f, now: now, seq: rp.seq, appended: rp.seq, written: rp.seq, state: rp, done: make(chan struct{})}
	l.wake = sync.NewCond(&l.mu)
	l.synced = sync.NewCond(&l.mu)
	go l.writeLoop()
	for _, r := range rp.totals().Pending {
		r.Kind, r.Time, r.Estimated, r.Status = RecordSettle, now(), true, 0
		l.Append(r)
	}
	if err := l.Flush(); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// Append adds r to the ledger (Seq is assigned) and returns at once; the record reaches the
// disk with the next group commit. Settle records count in Totals immediately.
func (l *Ledger) Append(r Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.seq++
	r.Seq = l.seq
	if r.Time.IsZero() {
		r.Time = l.now()
	}
	l.state.apply(r)
	if len(l.state.recent) > 4096 {
		l.state.recent = append(l.state.recent[:0], l.state.recent[len(l.state.recent)-1024:]...)
	}
	l.pending = append(l.pending, encodeRecord(r)...)
	l.appended = l.seq
	l.wake.Signal()
}

// Flush waits until every record appended so far is written and synced, and returns the
// first write error, if any.
func (l *Ledger) Flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	target := l.appended
	for l.written < target && l.writeErr == nil && !l.closedAndDrained() {
		l.synced.Wait()
	}
	return l.writeErr
}

func (l *Ledger) closedAndDrained() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// writeLoop writes and syncs pending records until Close.
func (l *Ledger) writeLoop() {
	defer close(l.done)
	l.mu.Lock()
	for {
		for len(l.pending) == 0 && !l.closed {
			l.wake.Wait()
		}
		if len(l.pending) == 0 && l.closed {
			l.synced.Broadcast()
			l.mu.Unlock()
			return
		}
		buf, upTo := l.pending, l.appended
		l.pending = nil
		l.mu.Unlock()
		_, err := l.f.Write(buf)
		if err == nil {
			err = l.f.Sync()
		}
		l.mu.Lock()
		if err != nil && l.writeErr == nil {
			l.writeErr = fmt.Errorf("write usage ledger: %w", err)
		}
		l.written = upTo
		l.synced.Broadcast()
		if !l.closed {
			// One commit per interval at most: under load many calls share an fsync, and
			// the disk is not asked to sync thousands of times a second.
			l.mu.Unlock()
			time.Sleep(commitInterval)
			l.mu.Lock()
		}
	}
}

// Totals returns the ledger's per-model usage, settle records only.
func (l *Ledger) Totals() Totals {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.state.totals()
	t.Pending = nil
	return t
}

// recentSettles returns the settle records of the last minute (for the rate window).
func (l *Ledger) recentSettles(since time.Time) []Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Record
	for _, r := range l.state.recent {
		if !r.Time.Before(since) {
			out = append(out, r)
		}
	}
	return out
}

// Close writes and syncs what is pending and closes the file. It is idempotent.
func (l *Ledger) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		<-l.done
		return nil
	}
	l.closed = true
	l.wake.Signal()
	l.mu.Unlock()
	<-l.done
	l.mu.Lock()
	err := l.writeErr
	l.mu.Unlock()
	if cerr := l.f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close usage ledger: %w", cerr)
	}
	return err
}

// encodeRecord is one ledger line for r (package crcline's format); nil when r does not marshal
// (a figure that is not a number), which keeps nothing rather than a line that cannot be read.
func encodeRecord(r Record) []byte {
	line, err := crcline.Encode(r)
	if err != nil {
		return nil
	}
	return line
}

// decodeRecord checks and decodes one line without its newline.
func decodeRecord(line []byte) (Record, bool) {
	var r Record
	if !crcline.Decode(line, &r) {
		return Record{}, false
	}
	return r, true
}
