package ship

import (
	"fmt"
	"path"
	"strconv"
	"strings"
)

// Object names inside one chain's directory, <prefix>/<KeyPrefix>/<chain id>/:
//
//	seg-<first seq>-<last seq>.jsonl   one sealed audit file, byte for byte
//	checkpoints-<last seq>.jsonl       the checkpoint file as it stood after that segment
//	closed-<last seq>.json             the closing marker: the chain ended at <last seq>
//	head-<seq>.json                    a head marker: the chain had reached <seq> (Head)
//
// Sequence numbers are zero-padded to 20 digits, so that names sort in chain order.
const (
	segPrefix    = "seg-"
	cpPrefix     = "checkpoints-"
	closedPrefix = "closed-"
	headPrefix   = "head-"
)

func pad(n uint64) string { return fmt.Sprintf("%020d", n) }

// SegmentName is the object name of a segment holding seq first..last.
func SegmentName(first, last uint64) string {
	return segPrefix + pad(first) + "-" + pad(last) + ".jsonl"
}

// CheckpointsName is the object name of the checkpoint file shipped after seq last.
func CheckpointsName(last uint64) string { return cpPrefix + pad(last) + ".jsonl" }

// ClosedName is the object name of the closing marker of a chain that ended at seq last.
func ClosedName(last uint64) string { return closedPrefix + pad(last) + ".json" }

// HeadName is the object name of a head marker saying the chain had reached seq.
func HeadName(seq uint64) string { return headPrefix + pad(seq) + ".json" }

// nameKind says what an object name in a chain directory is; first and last are its range
// (last only for checkpoints, closing and head markers).
func nameKind(name string) (kind string, first, last uint64, ok bool) {
	num := func(s string) (uint64, bool) {
		n, err := strconv.ParseUint(s, 10, 64)
		return n, err == nil && len(s) == 20
	}
	switch {
	case strings.HasPrefix(name, segPrefix) && strings.HasSuffix(name, ".jsonl"):
		a, b, found := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(name, segPrefix), ".jsonl"), "-")
		f, ok1 := num(a)
		l, ok2 := num(b)
		return "segment", f, l, found && ok1 && ok2 && f <= l
	case strings.HasPrefix(name, cpPrefix) && strings.HasSuffix(name, ".jsonl"):
		l, ok := num(strings.TrimSuffix(strings.TrimPrefix(name, cpPrefix), ".jsonl"))
		return "checkpoints", 0, l, ok
	case strings.HasPrefix(name, closedPrefix) && strings.HasSuffix(name, ".json"):
		l, ok := num(strings.TrimSuffix(strings.TrimPrefix(name, closedPrefix), ".json"))
		return "closed", 0, l, ok
	case strings.HasPrefix(name, headPrefix) && strings.HasSuffix(name, ".json"):
		l, ok := num(strings.TrimSuffix(strings.TrimPrefix(name, headPrefix), ".json"))
		return "head", 0, l, ok
	}
	return "", 0, 0, false
}

// ChainDir is the directory (key prefix, ending in "/") of one chain.
func ChainDir(prefix, keyPrefix, chain string) string {
	return strings.TrimPrefix(path.Join(prefix, keyPrefix, chain)+"/", "/")
}

// validName checks a path element of the layout (a chain id, a part of KeyPrefix).
func validName(s string) bool {
	if s == "" || s == "." || s == ".." {
		return false
	}
	for _, r := range s {
		ok := r == '-' || r == '_' || r == '.' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')
		if !ok {
			return false
		}
	}
	return true
}
