package audit

import (
	"bytes"
	"crypto/sha256"
)

// RotatedFiles lists the sealed (rotated) files of the audit log at path, oldest first: the
// files FILE.<UTC time> a Logger renamed at rotation (or at Close with SealOnClose). They
// are never written again, which is what makes them safe to ship.
func RotatedFiles(path string) []string { return rotatedFiles(path) }

// Segment is the chain range one audit file holds.
type Segment struct {
	// First and Last are the sequence numbers of the file's first and last chained lines;
	// Lines counts its chained lines.
	First, Last uint64
	Lines       int
	// LastHash is the SHA-256 of the last chained line (what the next line's prev holds).
	LastHash [32]byte
}

// SegmentOf reads the chain range of an audit file's bytes. ok is false when it holds no
// chained line.
func SegmentOf(b []byte) (s Segment, ok bool) {
	for len(b) > 0 {
		line, rest, _ := bytes.Cut(b, []byte{'\n'})
		b = rest
		seq, chained := lineSeq(line)
		if !chained {
			continue
		}
		if !ok {
			s.First, ok = seq, true
		}
		s.Last, s.LastHash = seq, sha256.Sum256(line)
		s.Lines++
	}
	return s, ok
}
