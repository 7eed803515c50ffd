package meter

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/internal/crcline"
)

// File names of the usage ledgers.
const (
	// LedgerFile is the sidecar's usage ledger in its state directory, beside the model
	// API's llm-ledger.jsonl.
	LedgerFile = "usage-ledger.jsonl"
	// ArchiveFile, in the airlock state directory that holds the sandboxes, keeps the last
	// record of every deleted sandbox (`sandbox delete` appends it).
	ArchiveFile = "usage-archive.jsonl"
)

// compactAt is the size past which opening a ledger rewrites it with only the last record
// of each key: every record holds totals, so older ones add nothing.
const compactAt = 1 << 20

// The kinds of ledger records.
const (
	KindSample = "sample" // written every interval
	KindFreeze = "freeze" // a cap froze the sandbox
	KindThaw   = "thaw"   // a raised cap or the operator thawed it
	KindFinal  = "final"  // the sidecar's last record as it stops, or the archive's at delete
)

// Key says whose figures a record holds: a sandbox, and within it an identity ("" for the
// whole sandbox; identities come with issue 34).
type Key struct {
	Sandbox  string `json:"sandbox"`
	Identity string `json:"identity,omitempty"`
}

// Totals are a key's figures over its whole life, across sidecar restarts.
type Totals struct {
	// CPUUserUsec and CPUSystemUsec are CPU time in microseconds.
	CPUUserUsec   uint64 `json:"cpu_user_usec"`
	CPUSystemUsec uint64 `json:"cpu_system_usec"`
	// MemoryPeakBytes is the highest memory use seen (the cgroup's own peak counter);
	// MemoryGiBHours the memory in use integrated over time (trapezoids between samples).
	MemoryPeakBytes uint64  `json:"memory_peak_bytes"`
	MemoryGiBHours  float64 `json:"memory_gib_hours"`
	// TxBytes and RxBytes are the bytes the sandbox sent and received (IP packets, headers
	// included); Connections the connections the kernel allowed.
	TxBytes     uint64 `json:"tx_bytes"`
	RxBytes     uint64 `json:"rx_bytes"`
	Connections uint64 `json:"connections"`
	// Since is the first sample's time.
	Since time.Time `json:"since"`
}

// CPUSeconds is user plus system CPU time in seconds.
func (t Totals) CPUSeconds() float64 { return float64(t.CPUUserUsec+t.CPUSystemUsec) / 1e6 }

// Raw is what the counters read at a sample, to tell growth from a counter that started
// again from zero (kernel maps replaced by a new sidecar version).
type Raw struct {
	CPUUserUsec   uint64 `json:"cpu_user_usec"`
	CPUSystemUsec uint64 `json:"cpu_system_usec"`
	MemoryBytes   uint64 `json:"memory_bytes"`
	TxBytes       uint64 `json:"tx_bytes"`
	RxBytes       uint64 `json:"rx_bytes"`
	Connections   uint64 `json:"connections"`
	// Runs are, for an identity of a pod, the CPU counters of each container run (by its
	// runtime ID) at the sample: a run's growth is added to the identity's CPU counters
	// above, which therefore only grow; a new run counts from zero.
	Runs map[string]RunRaw `json:"runs,omitempty"`
}

// RunRaw is one container run's CPU counters at a sample.
type RunRaw struct {
	CPUUserUsec   uint64 `json:"cpu_user_usec"`
	CPUSystemUsec uint64 `json:"cpu_system_usec"`
}

// Record is one ledger line: a key's totals at a moment, what they cost, and whether a cap
// holds the sandbox frozen.
type Record struct {
	Seq  int64     `json:"seq"`
	Time time.Time `json:"time"`
	Kind string    `json:"kind"`
	Key
	Totals
	Raw Raw `json:"raw"`
	// ComputeUSD is the totals priced with spec.usage.prices in force when written;
	// ModelUSD and ModelTokens the model API's settled spend then.
	ComputeUSD  float64 `json:"compute_usd"`
	ModelUSD    float64 `json:"model_usd"`
	ModelTokens int64   `json:"model_tokens"`
	// Frozen is the message of the cap that holds the sandbox frozen; "" when it runs.
	Frozen string `json:"frozen,omitempty"`
	// Waived says the operator thawed the sandbox past its caps (`airlock sandbox thaw`);
	// the caps are checked again after the next policy reload.
	Waived bool `json:"waived,omitempty"`
}

// TotalUSD is compute and model spend together.
func (r Record) TotalUSD() float64 { return r.ComputeUSD + r.ModelUSD }

// life is a record's key and its first sample's time: the archive holds every sandbox ever
// deleted, a name used twice among them.
type life struct {
	Key
	since int64
}

func lifeOf(r Record) life { return life{r.Key, r.Since.UnixNano()} }

// ErrLedgerCorrupt means a line other than the last fails its checksum.
var ErrLedgerCorrupt = errors.New("usage ledger corrupt")

// ReadFile returns the last record of every key's life (its key and Since) in the ledger at
// path, sorted by key and Since. A missing file is empty; a torn last line is skipped; a bad line
// before it is ErrLedgerCorrupt.
func ReadFile(path string) ([]Record, error) {
	recs, _, _, err := readFile(path)
	return recs, err
}

func readFile(path string) (last []Record, good int64, lines int, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, 0, nil
	}
	if err != nil {
		return nil, 0, 0, fmt.Errorf("read usage ledger: %w", err)
	}
	byKey := map[life]Record{}
	for lineNo := 1; len(data) > 0; lineNo++ {
		nl := bytes.IndexByte(data, '\n')
		if nl < 0 {
			break // the last write was cut short
		}
		r, ok := decode(data[:nl])
		if !ok {
			if nl == len(data)-1 {
				break
			}
			return nil, 0, 0, fmt.Errorf("%s:%d: %w: the line fails its checksum; restore the file or move it away", path, lineNo, ErrLedgerCorrupt)
		}
		byKey[lifeOf(r)] = r
		good += int64(nl + 1)
		lines++
		data = data[nl+1:]
	}
	for _, r := range byKey {
		last = append(last, r)
	}
	sort.Slice(last, func(i, j int) bool {
		if last[i].Sandbox != last[j].Sandbox {
			return last[i].Sandbox < last[j].Sandbox
		}
		if last[i].Identity != last[j].Identity {
			return last[i].Identity < last[j].Identity
		}
		return last[i].Since.Before(last[j].Since)
	})
	return last, good, lines, nil
}

// Ledger appends records to one ledger file, each written and synced before Append returns
// (one per interval: no group commit is needed). Past 1 MiB it rewrites the file with the last
// record of each life, so a sidecar sampling for months keeps a small file. It is safe for
// concurrent use.
type Ledger struct {
	path string
	// mu guards f, seq, size and last.
	mu   sync.Mutex
	f    *os.File
	seq  int64
	size int64
	last map[life]Record
}

// OpenLedger opens (creating it 0600) the ledger at path and returns it with the last record
// of each key's life. A torn last line is cut off; a ledger grown past 1 MiB is first rewritten
// with only those last records.
func OpenLedger(path string) (*Ledger, []Record, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, nil, fmt.Errorf("create state directory: %w", err)
	}
	last, good, lines, err := readFile(path)
	if err != nil {
		return nil, nil, err
	}
	if good > compactAt && lines > len(last) {
		if err := rewrite(path, last); err != nil {
			return nil, nil, err
		}
		good = 0
		for _, r := range last {
			good += int64(len(encode(r)))
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("open usage ledger: %w", err)
	}
	if err := f.Truncate(good); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("cut the torn last line of the usage ledger: %w", err)
	}
	if _, err := f.Seek(good, 0); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("open usage ledger: %w", err)
	}
	l := &Ledger{path: path, f: f, size: good, last: make(map[life]Record, len(last))}
	for _, r := range last {
		l.seq = max(l.seq, r.Seq)
		l.last[lifeOf(r)] = r
	}
	return l, last, nil
}

// rewrite replaces the ledger at path with recs, atomically: a new file, synced, renamed
// over it, and the directory synced, so a crash leaves the old file or the new one.
func rewrite(path string, recs []Record) error {
	var buf []byte
	for _, r := range recs {
		buf = append(buf, encode(r)...)
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("compact usage ledger: %w", err)
	}
	_, err = f.Write(buf)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("compact usage ledger: %w", err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// Append writes r (its Seq assigned) and syncs it.
func (l *Ledger) Append(r Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return errors.New("usage ledger closed")
	}
	l.seq++
	r.Seq = l.seq
	line := encode(r)
	if _, err := l.f.Write(line); err != nil {
		return fmt.Errorf("write usage ledger: %w", err)
	}
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("sync usage ledger: %w", err)
	}
	l.size += int64(len(line))
	l.last[lifeOf(r)] = r
	if l.size > compactAt && l.size > int64(2*len(line)*len(l.last)) {
		return l.compact()
	}
	return nil
}

// compact rewrites the file with the last record of each life and appends to the new file.
// The caller holds mu.
func (l *Ledger) compact() error {
	recs := make([]Record, 0, len(l.last))
	for _, r := range l.last {
		recs = append(recs, r)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Seq < recs[j].Seq })
	if err := rewrite(l.path, recs); err != nil {
		return err
	}
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("reopen usage ledger: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("reopen usage ledger: %w", err)
	}
	l.f.Close()
	l.f, l.size = f, st.Size()
	return nil
}

// Close closes the file; it is idempotent.
func (l *Ledger) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// Archive appends r, as a final record, to the archive ledger at path (the state directory's
// usage-archive.jsonl): `sandbox delete` keeps a deleted sandbox's bill there.
func Archive(path string, r Record) error {
	l, _, err := OpenLedger(path)
	if err != nil {
		return err
	}
	r.Kind = KindFinal
	return errors.Join(l.Append(r), l.Close())
}

// encode is one ledger line for r (package crcline's format); nil when r does not marshal
// (a figure that is not a number), which keeps nothing rather than a line that cannot be read.
func encode(r Record) []byte {
	line, err := crcline.Encode(r)
	if err != nil {
		return nil
	}
	return line
}

// decode checks and decodes one line without its newline.
func decode(line []byte) (Record, bool) {
	var r Record
	if !crcline.Decode(line, &r) {
		return Record{}, false
	}
	return r, true
}
