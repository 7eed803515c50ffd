package audit

import (
	"bytes"
	"crypto/ed25519"
	hexenc "encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Problem kinds Verify reports.
const (
	ProblemChanged   = "changed"   // a line's content differs from what the chain or a checkpoint holds
	ProblemRemoved   = "removed"   // lines are missing from the middle of the chain
	ProblemReordered = "reordered" // lines are out of order or repeated
	ProblemTruncated = "truncated" // lines are missing from the end (a checkpoint signed more)
	ProblemUnchained = "unchained" // an audit line without chain fields among chained ones
	ProblemSignature = "signature" // a checkpoint's signature does not verify with the key
	ProblemTorn      = "torn"      // a partial line a crash left behind (not tampering)
	// ProblemUnanchored: with a key, nothing was found tampered, but the key's checkpoints do
	// not prove the whole trail (Report.Unanchored). Not tampering; not intact either.
	ProblemUnanchored = "unanchored"
)

// Problem is one finding of Verify: where (file and line, from 1) and what.
type Problem struct {
	Kind   string
	File   string
	Line   int
	Detail string
}

// String formats p as "file:line: kind: detail".
func (p Problem) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Kind, p.Detail)
}

// Report is what Verify found.
type Report struct {
	// Files are the audit files in chain order; CheckpointFiles the checkpoint files read.
	Files           []string
	CheckpointFiles []string
	// Events is how many chained lines were read; FirstSeq and LastSeq their range.
	Events            int
	FirstSeq, LastSeq uint64
	// Checkpoints is how many checkpoints were checked; SignedSeq the highest sequence
	// number a valid checkpoint covers; KeyGiven whether they were checked against a key
	// the caller supplied (else only against the key each names).
	Checkpoints int
	SignedSeq   uint64
	KeyGiven    bool
	// Tampered is the first sign of tampering, nil when there is none.
	Tampered *Problem
	// Torn lists partial lines a crash left behind: not tampering.
	Torn []Problem
	// Unanchored is set, with a key and when nothing was found tampered, when the key's
	// checkpoints do not prove the whole trail (see VerifyWith). Nil without a key.
	Unanchored *Problem `json:",omitempty"`

	// cps are the checkpoints whose signature verified, in the order read.
	cps []Checkpoint
}

// Intact reports whether no tampering was found. With a key, a trail can be intact and
// still unanchored: Proven says both.
func (r Report) Intact() bool { return r.Tampered == nil }

// Proven reports whether the trail is intact and, with a key, anchored: every line from the
// first to the last is tied to checkpoints the key signed.
func (r Report) Proven() bool { return r.Tampered == nil && r.Unanchored == nil }

// VerifyOptions configures VerifyWith.
type VerifyOptions struct {
	// Key is the public key every checkpoint must be signed with. Nil checks each
	// checkpoint against the key it names, and anchors nothing.
	Key ed25519.PublicKey
	// Keys are further keys a checkpoint may be signed with (the keys before and after a
	// rotation); each checkpoint is checked against the one among Key and Keys that it
	// names. With Keys, Key may be nil.
	Keys []ed25519.PublicKey
	// CheckpointEvery is the checkpoint period the log was written with (--audit-checkpoint-
	// every); zero means DefaultCheckpointEvery. Lines written more than this plus
	// CrashGrace after the last checkpoint are more than a crash explains.
	CheckpointEvery time.Duration
}

// CrashGrace is what a verifier allows, beyond the checkpoint period, between the last
// checkpoint and the last line: a crash loses at most one period's checkpoint, and the
// writer's batching and clock steps add a little.
const CrashGrace = time.Minute

// vline is one line of an audit file as Verify sees it.
type vline struct {
	file    string
	no      int
	text    []byte
	chained bool
	seq     uint64
	prev    string
	hash    [32]byte
	time    time.Time
	junk    bool // not JSON: a torn or mangled line
	skip    bool // JSON but not an audit line (a logrus line on stderr)
}

// Verify is VerifyWith with Key pub and the default checkpoint period.
func Verify(paths []string, pub ed25519.PublicKey) (Report, error) {
	return VerifyWith(paths, VerifyOptions{Key: pub})
}

// VerifyWith checks audit files and their checkpoints. paths may name audit files (current
// and rotated, in any order: they are put in chain order) and checkpoint files; the
// checkpoint file beside each audit file (FILE.checkpoints) is read too when present. With
// a key, every checkpoint must be signed by it, and the trail must be anchored
// (Report.Unanchored): some checkpoint signed by the key; the chain starting at seq 1 or
// right after a rotation the key signed (its hash the first line's prev), every checkpoint
// before that start being tampering otherwise; and no line written longer after the last
// checkpoint than the checkpoint period plus CrashGrace. It returns an error only when a
// file cannot be read.
func VerifyWith(paths []string, opt VerifyOptions) (Report, error) {
	keys := opt.Keys
	if opt.Key != nil {
		keys = append([]ed25519.PublicKey{opt.Key}, keys...)
	}
	pub := keyring(keys)
	rep := Report{KeyGiven: len(keys) > 0}
	logs, cps, err := classify(paths)
	if err != nil {
		return rep, err
	}
	var lines []vline
	for _, f := range logs {
		rep.Files = append(rep.Files, f.path)
		lines = append(lines, f.lines...)
	}
	rep.CheckpointFiles = cps
	bySeq := rep.walk(lines)
	if rep.Tampered == nil {
		if err := rep.checkpoints(cps, pub, bySeq); err != nil {
			return rep, err
		}
	}
	if rep.Tampered == nil && len(keys) > 0 {
		every := opt.CheckpointEvery
		if every <= 0 {
			every = DefaultCheckpointEvery
		}
		rep.anchor(bySeq, every)
	}
	rep.cps = nil
	return rep, nil
}

// anchor checks, with a key, that the key's checkpoints prove the whole trail; it sets
// Unanchored, or Tampered when a checkpoint shows lines missing from the start.
func (r *Report) anchor(bySeq map[uint64]vline, every time.Duration) {
	if r.Events == 0 {
		return
	}
	first, last := bySeq[r.FirstSeq], bySeq[r.LastSeq]
	if len(r.cps) == 0 {
		r.Unanchored = &Problem{ProblemUnanchored, first.file, first.no,
			"no checkpoint signed by the key: the lines cannot be shown to be the ones written (the checkpoint file is missing or empty)"}
		return
	}
	if r.FirstSeq != 1 && !r.startAnchored(first) {
		return
	}
	var newest Checkpoint
	for _, c := range r.cps {
		if c.Seq <= r.LastSeq && c.Seq >= newest.Seq {
			newest = c
		}
	}
	if r.SignedSeq < r.LastSeq && last.time.Sub(newest.Time) > every+CrashGrace {
		r.Unanchored = &Problem{ProblemUnanchored, last.file, last.no, fmt.Sprintf(
			"seq %d..%d come after the last checkpoint (seq %d, %s) and were written until %s later, more than the checkpoint period (%s) and a crash explain",
			r.SignedSeq+1, r.LastSeq, newest.Seq, newest.Time.UTC().Format(time.RFC3339), last.time.Sub(newest.Time).Round(time.Second), every)}
	}
}

// startAnchored checks a chain that starts after seq 1: it must start right after a rotation
// the key signed. A checkpoint the key signed for an earlier line otherwise shows that lines
// were removed from the start (Tampered); without one the start is Unanchored.
func (r *Report) startAnchored(first vline) bool {
	var before *Checkpoint
	for i, c := range r.cps {
		switch {
		case c.Seq == r.FirstSeq-1 && c.Boundary():
			if hexenc.EncodeToString(c.Hash[:]) != first.prev {
				r.Tampered = &Problem{ProblemChanged, first.file, first.no, fmt.Sprintf(
					"the chain starts at seq %d, but its prev is not the hash the key signed for the rotation at seq %d", r.FirstSeq, c.Seq)}
				return false
			}
			return true
		case c.Seq == r.FirstSeq-1 && c.Why == "rotate" && hexenc.EncodeToString(c.Hash[:]) == first.prev:
			// An older (v1) checkpoint: its kind is not signed, so it cannot prove a rotation.
			r.Unanchored = &Problem{ProblemUnanchored, first.file, first.no, fmt.Sprintf(
				"the chain starts at seq %d after a rotation whose checkpoint is in the older form that does not sign its kind: give the earlier files too", r.FirstSeq)}
			return false
		case c.Seq > 0 && c.Seq < r.FirstSeq && before == nil:
			before = &r.cps[i]
		}
	}
	if before != nil {
		r.Tampered = &Problem{ProblemRemoved, first.file, first.no, fmt.Sprintf(
			"the chain starts at seq %d, but the key signed a checkpoint of seq %d, and no rotation at seq %d: lines were removed from the start (or the earlier files were not given)",
			r.FirstSeq, before.Seq, r.FirstSeq-1)}
		return false
	}
	r.Unanchored = &Problem{ProblemUnanchored, first.file, first.no, fmt.Sprintf(
		"the chain starts at seq %d, not 1, and the key signed no rotation at seq %d: what came before cannot be shown complete", r.FirstSeq, r.FirstSeq-1)}
	return false
}

// logFileLines is one audit file's lines and the first sequence number in it.
type logFileLines struct {
	path  string
	first uint64
	lines []vline
}

// classify reads every path, tells audit files from checkpoint files, finds the checkpoint
// files beside audit files, and orders audit files by their first sequence number.
func classify(paths []string) ([]logFileLines, []string, error) {
	var logs []logFileLines
	var cps []string
	seen := map[string]bool{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, nil, fmt.Errorf("read audit file: %w", err)
		}
		seen[p] = true
		if isCheckpointFile(b) {
			cps = append(cps, p)
			continue
		}
		f := logFileLines{path: p, lines: splitLines(p, b)}
		for _, l := range f.lines {
			if l.chained {
				f.first = l.seq
				break
			}
		}
		logs = append(logs, f)
	}
	sort.SliceStable(logs, func(i, j int) bool { return logs[i].first < logs[j].first })
	for _, f := range logs {
		cp := checkpointPath(f.path)
		if _, err := os.Stat(cp); err == nil && !seen[cp] {
			seen[cp] = true
			cps = append(cps, cp)
		}
	}
	return logs, cps, nil
}

// checkpointPath is the checkpoint file a Logger writes beside audit file p (or beside the
// file p was rotated from).
func checkpointPath(p string) string {
	dir, base := filepath.Split(p)
	if i := strings.LastIndexByte(base, '.'); i > 0 {
		if _, err := time.Parse(rotatedTime, base[i+1:]); err == nil {
			base = base[:i]
		}
	}
	return filepath.Join(dir, base+".checkpoints")
}

func isCheckpointFile(b []byte) bool {
	first, _, _ := bytes.Cut(bytes.TrimSpace(b), []byte{'\n'})
	_, err := ParseCheckpoint(first)
	return err == nil
}

// splitLines parses each line of an audit file. A last line without a newline is kept (it
// may be torn).
func splitLines(path string, b []byte) []vline {
	var out []vline
	for no := 1; len(b) > 0; no++ {
		text, rest, _ := bytes.Cut(b, []byte{'\n'})
		b = rest
		if len(bytes.TrimSpace(text)) == 0 {
			continue
		}
		out = append(out, parseVLine(path, no, text))
	}
	return out
}

func parseVLine(path string, no int, text []byte) vline {
	l := vline{file: path, no: no, text: text, hash: sha256Line(text)}
	var c struct {
		Seq  *uint64   `json:"seq"`
		Prev string    `json:"prev"`
		Msg  string    `json:"msg"`
		Time time.Time `json:"time"`
	}
	switch {
	case !bytes.HasPrefix(bytes.TrimSpace(text), []byte{'{'}):
		l.skip = true // not JSON: another program's output on a captured stderr
	case json.Unmarshal(text, &c) != nil:
		l.junk = true // a torn line, or one edited into invalid JSON
	case c.Msg != "audit":
		l.skip = true
	case c.Seq != nil:
		l.chained, l.seq, l.prev, l.time = true, *c.Seq, c.Prev, c.Time
	}
	return l
}

// walk follows the chain through lines, recording the first tampering and the torn lines,
// and returns the chained lines by sequence number.
func (r *Report) walk(lines []vline) map[uint64]vline {
	bySeq := map[uint64]vline{}
	later := map[uint64]vline{} // every chained line, to tell a reordering from a removal
	for _, l := range lines {
		if l.chained {
			if _, dup := later[l.seq]; !dup {
				later[l.seq] = l
			}
		}
	}
	var last *vline
	for i := range lines {
		l := lines[i]
		switch {
		case l.skip:
			continue
		case l.junk:
			if p := r.junkLine(lines, i, last); p != nil {
				r.Tampered = p
				return bySeq
			}
			continue
		case !l.chained:
			r.Tampered = &Problem{ProblemUnchained, l.file, l.no, "an audit line without seq and prev: inserted, or written before the log was chained"}
			return bySeq
		}
		if p := link(last, l, later); p != nil {
			r.Tampered = p
			return bySeq
		}
		if r.Events == 0 {
			r.FirstSeq = l.seq
		}
		r.Events++
		r.LastSeq = l.seq
		bySeq[l.seq] = l
		last = &lines[i]
	}
	return bySeq
}

// link checks that l follows last in the chain.
func link(last *vline, l vline, later map[uint64]vline) *Problem {
	if last == nil {
		if l.seq == 1 && l.prev != strings.Repeat("0", 64) {
			return &Problem{ProblemChanged, l.file, l.no, "the first line of the chain does not start from the zero hash"}
		}
		return nil
	}
	want := last.seq + 1
	switch {
	case l.seq == want && l.prev == hexenc.EncodeToString(last.hash[:]):
		return nil
	case l.seq == want:
		return &Problem{ProblemChanged, last.file, last.no, fmt.Sprintf("line (seq %d) does not hash to the prev recorded by %s:%d", last.seq, l.file, l.no)}
	case l.seq > want:
		if m, ok := later[want]; ok {
			return &Problem{ProblemReordered, l.file, l.no, fmt.Sprintf("holds seq %d where seq %d belongs (it is at %s:%d)", l.seq, want, m.file, m.no)}
		}
		return &Problem{ProblemRemoved, l.file, l.no, fmt.Sprintf("seq %d..%d missing before this line (after %s:%d)", want, l.seq-1, last.file, last.no)}
	}
	return &Problem{ProblemReordered, l.file, l.no, fmt.Sprintf("holds seq %d after seq %d (out of order or repeated)", l.seq, last.seq)}
}

// junkLine judges a line that is not JSON: a crash-torn line (the last line of all, or one
// the chain resumes after, as the Logger does when it reopens a file ending in a partial
// line) is recorded in r.Torn; anything else is tampering.
func (r *Report) junkLine(lines []vline, i int, last *vline) *Problem {
	l := lines[i]
	next := -1
	for j := i + 1; j < len(lines); j++ {
		if !lines[j].skip {
			next = j
			break
		}
	}
	torn := Problem{ProblemTorn, l.file, l.no, "a partial line, as a crash while writing leaves (not tampering)"}
	if next < 0 {
		r.Torn = append(r.Torn, torn)
		return nil
	}
	n := lines[next]
	if n.chained && last != nil && n.seq == last.seq+1 && n.prev == hexenc.EncodeToString(last.hash[:]) {
		torn.Detail += "; the chain resumes on the next line"
		r.Torn = append(r.Torn, torn)
		return nil
	}
	return &Problem{ProblemChanged, l.file, l.no, "not an audit line, and the chain does not resume after it"}
}

// checkpoints checks every checkpoint's signature and that the lines it covers are there
// with the hash it signed.
func (r *Report) checkpoints(files []string, pub keyring, bySeq map[uint64]vline) error {
	for _, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("read audit checkpoints: %w", err)
		}
		for no, text := range bytes.Split(b, []byte{'\n'}) {
			if len(bytes.TrimSpace(text)) == 0 {
				continue
			}
			if p := r.checkpoint(path, no+1, text, pub, bySeq); p != nil {
				r.Tampered = p
				return nil
			}
		}
	}
	return nil
}

// checkpoint checks one checkpoint line.
func (r *Report) checkpoint(path string, no int, text []byte, pub keyring, bySeq map[uint64]vline) *Problem {
	c, err := ParseCheckpoint(text)
	if err != nil {
		return &Problem{ProblemChanged, path, no, err.Error()}
	}
	if !pub.verify(c) {
		return &Problem{ProblemSignature, path, no, fmt.Sprintf("the checkpoint of seq %d is not signed by the key", c.Seq)}
	}
	r.Checkpoints++
	r.cps = append(r.cps, c)
	if c.Seq == 0 || c.Seq < r.FirstSeq { // nothing written yet, or in a file not given
		return nil
	}
	if c.Seq > r.LastSeq || r.Events == 0 {
		where := "the log is empty"
		if r.Events > 0 {
			l := bySeq[r.LastSeq]
			where = fmt.Sprintf("the log ends at seq %d (%s:%d)", r.LastSeq, l.file, l.no)
		}
		return &Problem{ProblemTruncated, path, no, fmt.Sprintf("%s but this checkpoint signed seq %d: lines were removed from the end", where, c.Seq)}
	}
	l := bySeq[c.Seq]
	if l.hash != c.Hash {
		return &Problem{ProblemChanged, l.file, l.no, fmt.Sprintf("seq %d does not match the hash signed by %s:%d (the line, or the chain up to it, was rewritten)", c.Seq, path, no)}
	}
	r.SignedSeq = max(r.SignedSeq, c.Seq)
	return nil
}

// keyring is the keys a verifier trusts; empty trusts the key each checkpoint names.
type keyring []ed25519.PublicKey

// verify checks c against the trusted key it names (or, with no trusted key, its own).
func (k keyring) verify(c Checkpoint) bool {
	if len(k) == 0 {
		return c.Verify(nil)
	}
	for _, pub := range k {
		if pub.Equal(c.Key) {
			return c.Verify(pub)
		}
	}
	return false
}
