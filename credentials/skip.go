package credentials

import "bytes"

// Every audit line, log line and scrubbed header is searched for every pattern of the
// Redactor: about a dozen per secret (its encodings), each a pass over the text. A
// skipTable answers "does any pattern occur?" in one pass that mostly jumps: the
// Wu-Manber multi-pattern search with two-byte blocks. With m the length of the shortest
// pattern, the scan looks at the two bytes ending a window of m bytes; when no pattern has
// those two bytes among its first m, no occurrence can end its first m bytes within the
// next shift bytes, and the scan jumps that far. Only where the table says 0 are the
// patterns compared. A 40-byte secret's encodings let it jump about 25 bytes at a time,
// whatever the number of secrets.

// Bounds of the skip table: below minSkipLen bytes (the shortest pattern) or minSkipPats
// patterns, the per-pattern search (bytes.Contains, vectorised) is as fast or faster.
const (
	minSkipLen  = 8
	minSkipPats = 2
	skipBits    = 12 // the table has 1<<skipBits entries (4 KiB, one per hashed block)
)

// skipTable is the shift table of a set of patterns. It is immutable once built.
type skipTable struct {
	m     int // the length of the shortest pattern: the window
	shift [1 << skipBits]uint8
}

// newSkipTable builds the table for pats, or returns nil when it would not pay.
func newSkipTable(pats []pattern) *skipTable {
	if len(pats) < minSkipPats {
		return nil
	}
	m := len(pats[0].find)
	for _, p := range pats {
		m = min(m, len(p.find))
	}
	if m < minSkipLen {
		return nil
	}
	t := &skipTable{m: m}
	// The default: no pattern has the block among its first m bytes, so the window may move
	// until the block's second byte is just before it (m-1), capped to what a uint8 holds.
	def := uint8(min(m-1, 255))
	for i := range t.shift {
		t.shift[i] = def
	}
	for _, p := range pats {
		// The block ending at j of the pattern's first m bytes (1 ≤ j ≤ m-1): a window whose
		// last block is this one may be j short of an occurrence's window end, m-1-j bytes.
		// Collisions of the hash keep the smallest shift: never too far.
		for j := 1; j < m; j++ {
			h := blockHash(p.find[j-1], p.find[j])
			t.shift[h] = min(t.shift[h], uint8(min(m-1-j, 255)))
		}
	}
	return t
}

// blockHash maps a two-byte block to its table entry.
func blockHash(a, b byte) uint32 {
	return (uint32(a)<<8 | uint32(b)) * 0x9E3779B1 >> (32 - skipBits)
}

// contains reports whether any of pats (the patterns the table was built from) occurs in b.
func (t *skipTable) contains(b []byte, pats []pattern) bool {
	m := t.m
	for end := m - 1; end < len(b); {
		if s := t.shift[blockHash(b[end-1], b[end])]; s > 0 {
			end += int(s)
			continue
		}
		start := end - m + 1
		for _, p := range pats {
			if bytes.HasPrefix(b[start:], p.find) {
				return true
			}
		}
		end++
	}
	return false
}
