package ship

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/audit"
)

// Defaults of Config.
const (
	DefaultPoll       = 2 * time.Second
	DefaultMinBackoff = time.Second
	DefaultMaxBackoff = time.Minute
	DefaultHeadEvery  = time.Minute
)

// Config configures a Shipper. Log and Store are required.
type Config struct {
	// Log is the audit log (airlock run --audit-log): its sealed files, FILE.<UTC time>,
	// are shipped. The Logger writing it should seal its tail at Close (SealOnClose).
	Log string
	// Checkpoints is the checkpoint file shipped with each segment; "" means Log +
	// ".checkpoints".
	Checkpoints string
	// Store is where objects go.
	Store Store
	// Prefix is the key prefix in the store (e.g. "airlock/"); "" means none.
	Prefix string
	// KeyPrefix names the sandbox under Prefix, slash-separated (e.g. namespace/pod/pod
	// UID): with the chain id after it, a re-created pod of the same name never writes
	// where an earlier one did.
	KeyPrefix string
	// Retention is the Object Lock retention asked for on every upload; zero asks none.
	Retention Retention
	// Backlog bounds the bytes of audit data not yet shipped (sealed files and the open
	// one) that the volume may hold; keep it below the volume's size limit, past which the
	// kubelet evicts the pod and the trail with it. Zero means no bound.
	Backlog int64
	// FailClosed turns the sidecar not-ready (Ready) while the backlog is full. False
	// keeps it serving and drops the oldest unshipped sealed file instead (verify names
	// the missing range).
	FailClosed bool
	// Poll is how often the log's directory is scanned; zero means DefaultPoll.
	Poll time.Duration
	// MinBackoff and MaxBackoff bound the wait after a failed upload (doubling); zero
	// means DefaultMinBackoff and DefaultMaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// HeadEvery is how often at most a head marker (Head) is shipped while the open file
	// holds lines not shipped yet; zero means DefaultHeadEvery, negative ships none.
	HeadEvery time.Duration
	// Logger receives operational logs; nil discards them.
	Logger *logrus.Logger
}

// Status is what the Shipper reports (the admin /readyz body and the metrics).
type Status struct {
	// Chain is the chain id; ShippedSeq the last sequence number shipped and read back.
	Chain      string `json:"chain"`
	ShippedSeq uint64 `json:"shipped_seq"`
	// BacklogFiles and BacklogBytes are the sealed files not yet shipped and the bytes of
	// unshipped audit data (those files and the open one).
	BacklogFiles int   `json:"backlog_files"`
	BacklogBytes int64 `json:"backlog_bytes"`
	// Full says the backlog reached Config.Backlog; DroppedFiles counts sealed files
	// removed unshipped (fail-open) since the start.
	Full         bool `json:"full"`
	DroppedFiles int  `json:"dropped_files"`
	// Uploads and Failures count object uploads read back intact, and failed attempts.
	Uploads  int64 `json:"uploads"`
	Failures int64 `json:"failures"`
	// LastError is the last failure, "" after a success.
	LastError string `json:"last_error,omitempty"`
}

// Lagging reports whether sealed files wait to be shipped.
func (s Status) Lagging() bool { return s.BacklogFiles > 0 }

// state is what the Shipper keeps beside the log (FILE.ship) to continue after a restart.
type state struct {
	Chain    string `json:"chain"`
	LastSeq  uint64 `json:"last_seq"`
	LastHash string `json:"last_hash,omitempty"`
}

// Shipper ships one audit log's sealed files. New has no side effects; Run ships until its
// context ends; Finish ships what is left and the closing marker.
type Shipper struct {
	cfg Config
	log *logrus.Logger

	// segs caches the chain range of each sealed file by path: sealed files never change,
	// and a lagging backlog is measured every Poll. Only the goroutine shipping uses it.
	segs map[string]audit.Segment

	// headSeq and headAt are the last head marker shipped (only Run's goroutine uses them).
	headSeq uint64
	headAt  time.Time

	// mu guards st and status.
	mu     sync.Mutex
	st     state
	status Status
}

// New checks cfg; it touches nothing.
func New(cfg Config) (*Shipper, error) {
	if cfg.Log == "" || cfg.Store == nil {
		return nil, errors.New("audit shipping needs --audit-log and a destination")
	}
	for _, part := range strings.Split(cfg.KeyPrefix, "/") {
		if cfg.KeyPrefix != "" && !validName(part) {
			return nil, fmt.Errorf("audit shipping key prefix %q: each part must be letters, digits, '.', '_' or '-'", cfg.KeyPrefix)
		}
	}
	if m := cfg.Retention.Mode; m != "" && m != "COMPLIANCE" && m != "GOVERNANCE" {
		return nil, fmt.Errorf("audit shipping retention mode %q: use COMPLIANCE or GOVERNANCE", m)
	}
	if cfg.Retention.Mode != "" && cfg.Retention.Period <= 0 {
		return nil, errors.New("audit shipping retention: a mode needs a period")
	}
	if cfg.Checkpoints == "" {
		cfg.Checkpoints = cfg.Log + ".checkpoints"
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.Poll, DefaultPoll)
	def(&cfg.MinBackoff, DefaultMinBackoff)
	def(&cfg.MaxBackoff, DefaultMaxBackoff)
	if cfg.HeadEvery == 0 {
		cfg.HeadEvery = DefaultHeadEvery
	}
	lg := cfg.Logger
	if lg == nil {
		lg = logrus.New()
		lg.SetOutput(discard{})
	}
	return &Shipper{cfg: cfg, log: lg, segs: map[string]audit.Segment{}}, nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// Open reads (or starts) the shipping state beside the log: the chain id and the last seq
// shipped. A log whose chain starts afresh (no state) gets a new random chain id.
func (s *Shipper) Open() error {
	b, err := os.ReadFile(s.statePath())
	switch {
	case err == nil:
		var st state
		if err := json.Unmarshal(b, &st); err != nil || !validName(st.Chain) {
			return fmt.Errorf("audit shipping state %s: unreadable (%v): remove it to start a new chain id", s.statePath(), err)
		}
		s.st = st
	case errors.Is(err, os.ErrNotExist):
		id := make([]byte, 8)
		_, _ = rand.Read(id)
		s.st = state{Chain: time.Now().UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(id)}
		if err := s.saveState(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("audit shipping state: %w", err)
	}
	s.mu.Lock()
	s.status.Chain, s.status.ShippedSeq = s.st.Chain, s.st.LastSeq
	s.mu.Unlock()
	return nil
}

func (s *Shipper) statePath() string { return s.cfg.Log + ".ship" }

// saveState writes the state atomically.
func (s *Shipper) saveState() error {
	b, _ := json.Marshal(s.st)
	tmp := s.statePath() + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("audit shipping state: %w", err)
	}
	if err := os.Rename(tmp, s.statePath()); err != nil {
		return fmt.Errorf("audit shipping state: %w", err)
	}
	return nil
}

// Dir is the chain's key prefix in the store.
func (s *Shipper) Dir() string { return ChainDir(s.cfg.Prefix, s.cfg.KeyPrefix, s.st.Chain) }

// Status returns the current status.
func (s *Shipper) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}

// Ready returns an error only when FailClosed was chosen and the backlog is full: shipping
// that merely lags keeps the sidecar ready.
func (s *Shipper) Ready() error {
	st := s.Status()
	if s.cfg.FailClosed && st.Full {
		return fmt.Errorf("audit shipping backlog full (%d bytes unshipped, bound %d) and fail-closed: %s", st.BacklogBytes, s.cfg.Backlog, st.LastError)
	}
	return nil
}

// Run ships sealed files until ctx ends, scanning every Poll and backing off after a
// failure. It never blocks the audit log's writer or a request: it only reads sealed files.
func (s *Shipper) Run(ctx context.Context) {
	wait := time.Duration(0)
	backoff := s.cfg.MinBackoff
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		err := s.ShipSealed(ctx)
		if err == nil {
			err = s.ShipHead(ctx)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.log.WithField("error", err.Error()).Warn("audit shipping failed; retrying")
			wait, backoff = backoff, min(2*backoff, s.cfg.MaxBackoff)
			continue
		}
		wait, backoff = s.cfg.Poll, s.cfg.MinBackoff
	}
}

// ShipSealed ships every sealed file not shipped yet, oldest first, stopping at the first
// failure (the chain is shipped in order), then enforces the backlog bound.
func (s *Shipper) ShipSealed(ctx context.Context) error {
	files := audit.RotatedFiles(s.cfg.Log)
	var err error
	for i, f := range files {
		newest := i == len(files)-1
		if err = s.shipFile(ctx, f, newest); err != nil {
			s.fail(err)
			break
		}
	}
	s.measure()
	return err
}

// shipFile ships one sealed file and its checkpoints, unless it was shipped already, and
// removes it once shipped unless it is the newest (the chain resumes from it after a
// restart when the open file is empty).
func (s *Shipper) shipFile(ctx context.Context, path string, newest bool) error {
	seg, ok, err := s.segment(path)
	if err != nil {
		return err
	}
	if ok && seg.Last > s.st.LastSeq {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
		if err := s.putVerified(ctx, s.Dir()+SegmentName(seg.First, seg.Last), b); err != nil {
			return err
		}
		cp, err := os.ReadFile(s.cfg.Checkpoints)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("read %s: %w", s.cfg.Checkpoints, err)
		}
		if err := s.putVerified(ctx, s.Dir()+CheckpointsName(seg.Last), filterCheckpoints(cp, seg.Last)); err != nil {
			return err
		}
		s.st.LastSeq, s.st.LastHash = seg.Last, hex.EncodeToString(seg.LastHash[:])
		if err := s.saveState(); err != nil {
			return err
		}
		s.mu.Lock()
		s.status.ShippedSeq, s.status.LastError = seg.Last, ""
		s.mu.Unlock()
		s.log.WithFields(logrus.Fields{"file": filepath.Base(path), "first_seq": seg.First, "last_seq": seg.Last, "to": s.cfg.Store.String() + "/" + s.Dir()}).Info("audit segment shipped")
	}
	if !newest {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove shipped %s: %w", path, err)
		}
		delete(s.segs, path)
	}
	return nil
}

// segment returns the chain range of a sealed file (ok false: it holds no chained line),
// read once and cached.
func (s *Shipper) segment(path string) (audit.Segment, bool, error) {
	if seg, ok := s.segs[path]; ok {
		return seg, seg.Lines > 0, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return audit.Segment{}, false, fmt.Errorf("read %s: %w", path, err)
	}
	seg, ok := audit.SegmentOf(b)
	s.segs[path] = seg
	return seg, ok, nil
}

// putVerified uploads body and reads it back, comparing SHA-256: an upload counts only
// once the store returns what was sent.
func (s *Shipper) putVerified(ctx context.Context, key string, body []byte) error {
	if err := s.cfg.Store.Put(ctx, key, body, s.cfg.Retention); err != nil {
		return err
	}
	got, err := s.cfg.Store.Get(ctx, key, "")
	if err != nil {
		return fmt.Errorf("read back %s: %w", key, err)
	}
	if sha256.Sum256(got) != sha256.Sum256(body) {
		return fmt.Errorf("read back %s: %d bytes that do not hash to the %d bytes sent", key, len(got), len(body))
	}
	s.mu.Lock()
	s.status.Uploads++
	s.mu.Unlock()
	return nil
}

func (s *Shipper) fail(err error) {
	s.mu.Lock()
	s.status.Failures++
	s.status.LastError = err.Error()
	s.mu.Unlock()
}

// measure recomputes the backlog and enforces its bound.
func (s *Shipper) measure() {
	files := audit.RotatedFiles(s.cfg.Log)
	var n int64
	var unshipped []string
	for _, f := range files {
		info, err := os.Stat(f)
		if err != nil {
			continue
		}
		if seg, ok, err := s.segment(f); err == nil && ok && seg.Last <= s.st.LastSeq {
			continue // shipped; kept as the newest sealed file
		}
		n += info.Size()
		unshipped = append(unshipped, f)
	}
	if info, err := os.Stat(s.cfg.Log); err == nil {
		n += info.Size()
	}
	full := s.cfg.Backlog > 0 && n >= s.cfg.Backlog
	dropped := 0
	if full && !s.cfg.FailClosed {
		n, dropped = s.drop(unshipped, n)
		unshipped = unshipped[dropped:]
		full = n >= s.cfg.Backlog
	}
	s.mu.Lock()
	s.status.BacklogFiles, s.status.BacklogBytes, s.status.Full = len(unshipped), n, full
	s.status.DroppedFiles += dropped
	s.mu.Unlock()
}

// drop removes the oldest unshipped sealed files (never the newest sealed file) until the
// backlog fits its bound, and returns the new backlog and how many it removed. This is the
// fail-open choice: the pod keeps serving and is not evicted; verify names the gap.
func (s *Shipper) drop(unshipped []string, n int64) (int64, int) {
	newest := ""
	if all := audit.RotatedFiles(s.cfg.Log); len(all) > 0 {
		newest = all[len(all)-1]
	}
	dropped := 0
	for _, f := range unshipped {
		if n < s.cfg.Backlog || f == newest {
			break
		}
		info, err := os.Stat(f)
		if err != nil {
			break
		}
		seg, _, _ := s.segment(f)
		if err := os.Remove(f); err != nil {
			break
		}
		delete(s.segs, f)
		n -= info.Size()
		dropped++
		s.log.WithFields(logrus.Fields{"file": filepath.Base(f), "first_seq": seg.First, "last_seq": seg.Last, "backlog_bound": s.cfg.Backlog}).
			Error("audit shipping backlog full: sealed file removed unshipped (fail-open); verify will name this range as missing")
	}
	return n, dropped
}

// Head is a head marker's content: when it was shipped, at Time, the chain had reached seq
// Seq (whose line hashes to Hash, hex) and the store held it up to ShippedSeq. Sealed files
// ship only when sealed; head markers say how far the open file had gone between two seals,
// so that a chain that never closes (its pod deleted while the store was unreachable, or
// its node lost) is known to have lost at least ShippedSeq+1..Seq of the newest marker.
type Head struct {
	Chain      string    `json:"chain"`
	Seq        uint64    `json:"seq"`
	Hash       string    `json:"hash"`
	ShippedSeq uint64    `json:"shipped_seq"`
	Time       time.Time `json:"time"`
}

// headRead bounds what ShipHead reads of the open file's end to find its last line.
const headRead = 64 << 10

// ShipHead ships a head marker when the open file holds chained lines past the last one
// shipped (and past the last marker), at most every HeadEvery. Run calls it after every
// successful round; it never blocks the writer (it reads the file's end).
func (s *Shipper) ShipHead(ctx context.Context) error {
	if s.cfg.HeadEvery < 0 || (!s.headAt.IsZero() && time.Since(s.headAt) < s.cfg.HeadEvery) {
		return nil
	}
	seg, ok := openHead(s.cfg.Log)
	if !ok || seg.Last <= max(s.st.LastSeq, s.headSeq) {
		return nil
	}
	h := Head{Chain: s.st.Chain, Seq: seg.Last, Hash: hex.EncodeToString(seg.LastHash[:]), ShippedSeq: s.st.LastSeq, Time: time.Now().UTC()}
	b, _ := json.Marshal(h)
	if err := s.putVerified(ctx, s.Dir()+HeadName(h.Seq), append(b, '\n')); err != nil {
		s.fail(err)
		return err
	}
	s.headSeq, s.headAt = h.Seq, time.Now()
	s.log.WithFields(logrus.Fields{"seq": h.Seq, "shipped_seq": h.ShippedSeq, "to": s.cfg.Store.String() + "/" + s.Dir()}).Info("audit head shipped")
	return nil
}

// openHead reads the last complete chained line of the open log file from its end (at most
// headRead bytes); ok is false when there is none there.
func openHead(path string) (audit.Segment, bool) {
	f, err := os.Open(path)
	if err != nil {
		return audit.Segment{}, false
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return audit.Segment{}, false
	}
	off := max(0, info.Size()-headRead)
	buf := make([]byte, info.Size()-off)
	n, _ := f.ReadAt(buf, off)
	buf = buf[:n]
	if off > 0 { // the first line read may be partial
		_, buf, _ = bytes.Cut(buf, []byte{'\n'})
	}
	if i := bytes.LastIndexByte(buf, '\n'); i >= 0 { // a line being written is not a head yet
		buf = buf[:i+1]
	} else {
		return audit.Segment{}, false
	}
	return audit.SegmentOf(buf)
}

// unshipped names the chain range on the volume not shipped yet ("seq A..B"), for the
// shutdown error: the sidecar's last word on what the store will miss.
func (s *Shipper) unshipped() string {
	last := s.st.LastSeq
	for _, f := range audit.RotatedFiles(s.cfg.Log) {
		if seg, ok, err := s.segment(f); err == nil && ok {
			last = max(last, seg.Last)
		}
	}
	if seg, ok := openHead(s.cfg.Log); ok {
		last = max(last, seg.Last)
	}
	if last <= s.st.LastSeq {
		return "the closing marker"
	}
	return fmt.Sprintf("seq %d..%d", s.st.LastSeq+1, last)
}

// Closing is the closing marker's content: the chain ended at LastSeq, whose line hashes
// to LastHash, and this is the last object shipped for it.
type Closing struct {
	Closed   bool      `json:"closed"`
	Chain    string    `json:"chain"`
	LastSeq  uint64    `json:"last_seq"`
	LastHash string    `json:"last_hash"`
	Time     time.Time `json:"time"`
}

// Finish ships every sealed file left (the Logger sealed its tail at Close) and then the
// closing marker, within ctx (the pod's termination grace period). It is called after the
// audit log is closed; an error means the chain stays open in the store.
func (s *Shipper) Finish(ctx context.Context) error {
	backoff := s.cfg.MinBackoff
	for {
		err := s.ShipSealed(ctx)
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("audit shipping at shutdown: %s not shipped, lost with the volume unless it survives the pod: %w", s.unshipped(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, s.cfg.MaxBackoff)
	}
	if s.st.LastSeq == 0 {
		return nil // nothing was ever written
	}
	c := Closing{Closed: true, Chain: s.st.Chain, LastSeq: s.st.LastSeq, LastHash: s.st.LastHash, Time: time.Now().UTC()}
	b, _ := json.Marshal(c)
	for {
		err := s.putVerified(ctx, s.Dir()+ClosedName(c.LastSeq), append(b, '\n'))
		if err == nil {
			s.log.WithFields(logrus.Fields{"last_seq": c.LastSeq, "to": s.cfg.Store.String() + "/" + s.Dir()}).Info("audit chain closed and shipped")
			return nil
		}
		s.fail(err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("audit shipping: closing marker: %w", err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, s.cfg.MaxBackoff)
	}
}
