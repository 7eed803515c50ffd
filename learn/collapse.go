package learn

import (
	"regexp"
	"strings"
	"unicode/utf8"
)

// MaxDepth is the deepest path pattern Learn writes: a path with more segments becomes its
// first MaxDepth-1 collapsed segments followed by "**".
const MaxDepth = 8

// FanOut is how many patterns of one method on one host, equal but for one segment, Learn
// merges into one with "*" in that segment.
const FanOut = 5

var (
	uuidRE    = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
	hexRE     = regexp.MustCompile(`^[0-9a-fA-F]{7,}$`)
	versionRE = regexp.MustCompile(`\d+\.\d+`)
	tokenRE   = regexp.MustCompile(`^[A-Za-z0-9_\-=.~+]{16,}$`)
)

// VariableSegment reports whether a path segment is one that varies from request to request
// and so becomes "*" in a learned pattern. A segment varies when it is
//
//   - a number ("1234");
//   - a UUID ("3f2c...-...");
//   - a hex string of 7 or more characters holding a digit (a commit or content hash);
//   - or holds a dotted version anywhere ("1.2.3", "v2.0", "requests-2.31.0.tar.gz");
//     a bare API version such as "v1" names an API, not a release, and stays;
//   - an opaque token: 16 or more letters, digits and "_-=.~+", with both a letter and a
//     digit (a session id, a base64 digest);
//   - or holds "*", which a pattern cannot say literally, or bytes that are not UTF-8
//     (YAML cannot carry them).
func VariableSegment(s string) bool {
	switch {
	case s == "":
		return false
	case strings.Contains(s, "*") || !utf8.ValidString(s):
		return true
	case strings.Trim(s, "0123456789") == "":
		return true
	case uuidRE.MatchString(s), versionRE.MatchString(s):
		return true
	case hexRE.MatchString(s) && strings.ContainsAny(s, "0123456789"):
		return true
	case tokenRE.MatchString(s) && strings.ContainsAny(s, "0123456789") &&
		strings.ContainsFunc(s, func(r rune) bool { return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' }):
		return true
	}
	return false
}

// CollapsePath turns a normalised path (policy.NormalizePath) into a pattern: every
// VariableSegment becomes "*", and a path deeper than MaxDepth segments keeps its first
// MaxDepth-1 and ends in "**".
func CollapsePath(path string) string {
	if path == "/" || path == "" {
		return "/"
	}
	segs := strings.Split(strings.TrimPrefix(path, "/"), "/")
	if len(segs) > MaxDepth {
		segs = append(segs[:MaxDepth-1:MaxDepth-1], "**")
	}
	for i, s := range segs {
		if s != "**" && VariableSegment(s) {
			segs[i] = "*"
		}
	}
	return "/" + strings.Join(segs, "/")
}

// mergeSiblings applies the sibling rule to a set of patterns (of one method on one host):
// for each segment position, left to right, patterns of equal length that agree everywhere
// but there, FanOut or more of them, become one pattern with "*" at that position. counts
// maps each input pattern to the pattern it became.
func mergeSiblings(patterns []string) map[string]string {
	to := make(map[string]string, len(patterns))
	for _, p := range patterns {
		to[p] = p
	}
	for pos := 0; pos < MaxDepth; pos++ {
		groups := make(map[string][]string) // key: the pattern with position pos blanked
		for _, cur := range uniqueValues(to) {
			segs := strings.Split(cur[1:], "/")
			if pos >= len(segs) || segs[pos] == "*" || segs[pos] == "**" {
				continue
			}
			segs[pos] = "\x00"
			key := strings.Join(segs, "/")
			groups[key] = append(groups[key], cur)
		}
		for key, members := range groups {
			if len(members) < FanOut {
				continue
			}
			merged := "/" + strings.Replace(key, "\x00", "*", 1)
			for in, cur := range to {
				for _, m := range members {
					if cur == m {
						to[in] = merged
					}
				}
			}
		}
	}
	return to
}

// uniqueValues returns the distinct values of m.
func uniqueValues(m map[string]string) []string {
	seen := make(map[string]bool, len(m))
	var out []string
	for _, v := range m {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}
