package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// rotatedTime is the suffix layout of a rotated audit file: FILE.<UTC time>, which sorts in
// the order the files were written.
const rotatedTime = "20060102T150405.000000000Z"

// logFile is the audit file the chain is written to. Only the writer goroutine uses it
// after openLogFile.
type logFile struct {
	path   string
	now    func() time.Time
	f      *os.File
	size   int64
	opened time.Time
	torn   bool // the file ends in a partial line: end it before the next write
	// seq and prev are where the chain stood when the file was opened.
	seq  uint64
	prev [32]byte
}

// openLogFile opens (creating 0600) the audit file at path and finds the last complete line
// of the chain: in it, or else in the newest rotated file beside it.
func openLogFile(path string, now func() time.Time) (*logFile, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open audit log: %w", err)
	}
	lf := &logFile{path: path, now: now, f: f, opened: now()}
	if err := lf.resume(); err != nil {
		_ = f.Close()
		return nil, err
	}
	return lf, nil
}

// resume reads where the chain left off.
func (lf *logFile) resume() error {
	st, err := lf.f.Stat()
	if err != nil {
		return fmt.Errorf("stat audit log: %w", err)
	}
	lf.size = st.Size()
	last, torn, err := lastLine(lf.path)
	if err != nil {
		return err
	}
	lf.torn = torn
	if last == nil {
		if prev := newestRotated(lf.path); prev != "" {
			if last, _, err = lastLine(prev); err != nil {
				return err
			}
		}
	}
	if last != nil {
		if seq, ok := lineSeq(last); ok {
			lf.seq, lf.prev = seq, sha256.Sum256(last)
		}
	}
	return nil
}

// lineSeq returns the sequence number of a chained audit line.
func lineSeq(line []byte) (uint64, bool) {
	var c struct {
		Seq *uint64 `json:"seq"`
		Msg string  `json:"msg"`
	}
	if json.Unmarshal(line, &c) != nil || c.Seq == nil || c.Msg != "audit" {
		return 0, false
	}
	return *c.Seq, true
}

// lastLine returns the last complete chained audit line of the file at path (without its
// newline; nil when there is none or the file is absent) and whether the file ends in a
// partial line. It reads backwards, maxLine bytes at a time, past lines of any length and
// past lines it cannot read (not JSON, not chained): a restart continues the chain from the
// last line that holds it, never from scratch because of one line (Verify reads what lies
// between as torn when the chain resumes after it). Memory is bounded by the longest line.
func lastLine(path string) ([]byte, bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("open audit log: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, false, fmt.Errorf("stat audit log: %w", err)
	}
	var buf []byte // the file's bytes from pos not yet split into lines
	pos, torn, tailSplit := st.Size(), false, false
	for {
		for {
			i := bytes.LastIndexByte(buf, '\n')
			if i < 0 {
				break
			}
			line := buf[i+1:]
			buf = buf[:i]
			if !tailSplit { // what follows the last newline is a partial line
				torn, tailSplit = len(line) > 0, true
				continue
			}
			if _, ok := lineSeq(line); ok {
				return bytes.Clone(line), torn, nil
			}
		}
		if pos == 0 {
			if !tailSplit {
				return nil, len(buf) > 0, nil // no newline at all: one partial line
			}
			if _, ok := lineSeq(buf); ok {
				return bytes.Clone(buf), torn, nil
			}
			return nil, torn, nil
		}
		n := min(pos, int64(maxLine))
		pos -= n
		chunk := make([]byte, n, n+int64(len(buf)))
		if _, err := f.ReadAt(chunk, pos); err != nil && !errors.Is(err, io.EOF) {
			return nil, false, fmt.Errorf("read audit log: %w", err)
		}
		buf = append(chunk, buf...)
	}
}

// newestRotated returns the newest rotated file beside path, or "".
func newestRotated(path string) string {
	names := rotatedFiles(path)
	if len(names) == 0 {
		return ""
	}
	return names[len(names)-1]
}

// rotatedFiles lists the rotated files of path, oldest first.
func rotatedFiles(path string) []string {
	matches, _ := filepath.Glob(path + ".*")
	var out []string
	for _, m := range matches {
		suffix := strings.TrimPrefix(m, path+".")
		if _, err := time.Parse(rotatedTime, suffix); err == nil {
			out = append(out, m)
		}
	}
	sort.Strings(out)
	return out
}

// due reports whether the file should be rotated before the next write.
func (lf *logFile) due(maxBytes int64, maxAge time.Duration) bool {
	if lf.size == 0 {
		return false
	}
	return (maxBytes > 0 && lf.size >= maxBytes) || (maxAge > 0 && lf.now().Sub(lf.opened) >= maxAge)
}

// write appends batch. On failure it cuts the file back to where it was, so that a retry
// writes the batch whole; when it cannot, the partial line is ended before the next write.
func (lf *logFile) write(batch []byte) error {
	if lf.torn {
		if _, err := lf.f.Write([]byte{'\n'}); err != nil {
			return err
		}
		lf.size++
		lf.torn = false
	}
	n, err := lf.f.Write(batch)
	if err == nil {
		lf.size += int64(n)
		return nil
	}
	if n > 0 {
		if terr := lf.f.Truncate(lf.size); terr != nil {
			lf.size += int64(n)
			lf.torn = batch[n-1] != '\n'
		}
	}
	return err
}

// rotate renames the file to path.<UTC time> and opens a new one.
func (lf *logFile) rotate() error {
	dst := lf.path + "." + lf.now().UTC().Format(rotatedTime)
	if err := os.Rename(lf.path, dst); err != nil {
		return fmt.Errorf("rotate audit log: %w", err)
	}
	f, err := os.OpenFile(lf.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		// Put the file back, so that the retry rotates it again rather than finding it gone.
		if rerr := os.Rename(dst, lf.path); rerr != nil {
			return errors.Join(fmt.Errorf("open audit log: %w", err), fmt.Errorf("restore audit log: %w", rerr))
		}
		return fmt.Errorf("open audit log: %w", err)
	}
	_ = lf.f.Close()
	lf.f, lf.size, lf.opened, lf.torn = f, 0, lf.now(), false
	return nil
}

// base is the file's name without its directory.
func (lf *logFile) base() string { return filepath.Base(lf.path) }

func (lf *logFile) close() error { return lf.f.Close() }

// sha256Line hashes one line, without its newline.
func sha256Line(line []byte) [32]byte {
	return sha256.Sum256(bytes.TrimSuffix(line, []byte{'\n'}))
}
