package policy

import (
	"fmt"
	"strings"
)

// pathError is the error NormalizePath returns; it unwraps to ErrInvalidPath.
type pathError struct{ path, reason string }

// Error says which input is invalid and why.
func (e *pathError) Error() string { return fmt.Sprintf("invalid path %q: %s", e.path, e.reason) }

// Unwrap returns the sentinel error.
func (e *pathError) Unwrap() error { return ErrInvalidPath }

// NormalizePath turns a raw request path into the form path patterns are matched against:
// the query and fragment dropped, percent-decoded once (a decoded "%2F" is a "/"), and
// dot-segments removed (RFC 3986 §5.2.4). It rejects, with an error wrapping ErrInvalidPath,
// what an upstream could read differently from the policy: invalid escapes, NUL and other
// control bytes, backslashes (Windows servers read them as "/"), escapes left after one
// decode (%2e, %2f, %5c: a server that decodes twice would see dots or slashes), ".." above
// the root, "..;" and ".;" segments (servlet containers strip ";" parameters before resolving
// dots), and "//" together with ".." (servers that merge slashes resolve those dots
// differently), and what a server that normalises Unicode could read as another path (see
// ambiguousText). An empty path is "/".
func NormalizePath(raw string) (string, error) {
	p, reason, _ := normalizePath(raw)
	if reason != "" {
		return "", &pathError{path: raw, reason: reason}
	}
	return p, nil
}

// normalizePath is NormalizePath returning a reason instead of an error, and the reason
// code a denial carries: ReasonAmbiguousPath for text a server could read as another path
// (bytes that are not UTF-8, look-alikes of "." and "/", escapes left after one decode),
// ReasonInvalidPath for the rest.
func normalizePath(raw string) (string, string, Reason) {
	p := raw
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	if p == "" {
		return "/", "", ""
	}
	if p[0] != '/' {
		return "", `does not start with "/"`, ReasonInvalidPath
	}
	decoded, reason := percentDecode(p)
	if reason != "" {
		return "", reason, ReasonInvalidPath
	}
	if reason := ambiguousText(decoded); reason != "" {
		return "", reason, ReasonAmbiguousPath
	}
	out, reason := removeDotSegments(decoded)
	if reason != "" {
		return "", reason, ReasonInvalidPath
	}
	return out, "", ""
}

// percentDecode decodes %XX escapes once and rejects control bytes and backslashes, raw or
// decoded.
func percentDecode(p string) (string, string) {
	if plainPath(p) {
		return p, "" // nothing to decode or refuse: the common case, without a copy
	}
	return decodeEscapes(p)
}

// decodeEscapes is percentDecode's work on a path that is not plain.
func decodeEscapes(p string) (string, string) {
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '%' {
			if i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2]) {
				return "", "invalid percent-encoding"
			}
			c = unhex(p[i+1])<<4 | unhex(p[i+2])
			i += 2
		}
		switch {
		case c < 0x20 || c == 0x7f:
			return "", "contains a control byte"
		case c == '\\':
			return "", "contains a backslash"
		}
		b.WriteByte(c)
	}
	return b.String(), ""
}

// plainPath reports whether p holds no escape, control byte or backslash (percentDecode
// returns it as it is).
func plainPath(p string) bool {
	for i := 0; i < len(p); i++ {
		if c := p[i]; c == '%' || c < 0x20 || c == 0x7f || c == '\\' {
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// removeDotSegments applies RFC 3986 §5.2.4 to an absolute path, except that ".." above the
// root is an error rather than ignored.
func removeDotSegments(p string) (string, string) {
	if !strings.Contains(p, "/.") {
		return p, "" // no segment starts with ".": nothing to remove or refuse
	}
	return resolveDotSegments(p)
}

// resolveDotSegments is removeDotSegments' work on a path with a segment starting with ".".
func resolveDotSegments(p string) (string, string) {
	segs := strings.Split(p[1:], "/")
	hasDotDot, hasEmpty := false, false
	for i, s := range segs {
		switch {
		case s == "..":
			hasDotDot = true
		case s == "" && i < len(segs)-1:
			hasEmpty = true
		case strings.HasPrefix(s, ".;") || strings.HasPrefix(s, "..;"):
			return "", fmt.Sprintf("ambiguous segment %q", s)
		}
	}
	if hasDotDot && hasEmpty {
		return "", `ambiguous: "//" together with ".."`
	}
	out := make([]string, 0, len(segs))
	for i, s := range segs {
		last := i == len(segs)-1
		switch s {
		case ".":
		case "..":
			if len(out) == 0 {
				return "", `".." climbs above the root`
			}
			out = out[:len(out)-1]
		default:
			out = append(out, s)
			continue
		}
		if last {
			out = append(out, "") // "/a/." and "/a/b/.." keep the trailing slash
		}
	}
	return "/" + strings.Join(out, "/"), ""
}

// pathPattern is one compiled entry of an L7 rule's paths.
type pathPattern struct {
	raw  string
	segs []string // the segments after the leading "/"; "**" is a whole segment
}

// parsePathPattern compiles a path pattern, or says what is wrong and the fix.
func parsePathPattern(s string) (pathPattern, string) {
	switch {
	case !strings.HasPrefix(s, "/"):
		return pathPattern{}, fmt.Sprintf("path patterns start with \"/\"; use %q", "/"+s)
	case strings.ContainsAny(s, "?#"):
		return pathPattern{}, fmt.Sprintf("patterns match the path without its query; use %q",
			s[:strings.IndexAny(s, "?#")])
	case strings.Contains(s, "%"):
		if dec, reason := percentDecode(s); reason == "" {
			return pathPattern{}, fmt.Sprintf("patterns match the decoded path; use %q", dec)
		}
		return pathPattern{}, "patterns match the decoded path; write characters, not %-escapes"
	case strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' }):
		return pathPattern{}, "path patterns cannot hold control characters or backslashes"
	}
	segs := strings.Split(s[1:], "/")
	for _, seg := range segs {
		switch {
		case seg == "." || seg == "..":
			return pathPattern{}, "patterns match normalised paths; remove \".\" and \"..\" segments"
		case seg != "**" && strings.Contains(seg, "**"):
			return pathPattern{}, fmt.Sprintf("\"**\" must be a whole segment, e.g. %q", "/repos/**")
		}
	}
	return pathPattern{raw: s, segs: segs}, ""
}

// match reports whether a normalised path matches the pattern.
func (p pathPattern) match(path string) bool {
	return matchSegs(p.segs, strings.Split(path[1:], "/"))
}

// matchSegs matches pattern segments against path segments: a "**" segment matches any
// number of segments including none, other segments match one segment each. It runs in
// O(len(pat)·len(path)) by dynamic programming, so no pattern backtracks exponentially.
func matchSegs(pat, path []string) bool {
	// next[j] says whether pat[i+1:] matches path[j:]; cur is the same for pat[i:].
	next := make([]bool, len(path)+1)
	cur := make([]bool, len(path)+1)
	next[len(path)] = true
	for i := len(pat) - 1; i >= 0; i-- {
		for j := len(path); j >= 0; j-- {
			switch {
			case pat[i] == "**":
				cur[j] = next[j] || (j < len(path) && cur[j+1])
			case j < len(path):
				cur[j] = next[j+1] && matchSeg(pat[i], path[j])
			default:
				cur[j] = false
			}
		}
		next, cur = cur, next
	}
	return next[0]
}

// matchSeg matches one segment against a glob where "*" matches any run of characters. A
// bare "*" needs at least one character: "/a/*/b" does not match "/a//b", which a server
// that merges slashes would read as "/a/b".
func matchSeg(glob, s string) bool {
	if glob == "*" {
		return s != ""
	}
	// Iterative wildcard matching with one backtrack point: linear in practice.
	gi, si, star, mark := 0, 0, -1, 0
	for si < len(s) {
		switch {
		case gi < len(glob) && glob[gi] == '*':
			star, mark = gi, si
			gi++
		case gi < len(glob) && glob[gi] == s[si]:
			gi++
			si++
		case star >= 0:
			mark++
			gi, si = star+1, mark
		default:
			return false
		}
	}
	for gi < len(glob) && glob[gi] == '*' {
		gi++
	}
	return gi == len(glob)
}

// covers reports, conservatively, whether every path the pattern c matches is matched by p:
// true means certainly covered; false means not covered or not provably so.
func (p pathPattern) covers(c pathPattern) bool {
	memo := make(map[[2]int]bool)
	var sub func(i, j int) bool
	sub = func(i, j int) bool {
		key := [2]int{i, j}
		if v, ok := memo[key]; ok {
			return v
		}
		var v bool
		switch {
		case i == len(p.segs):
			v = j == len(c.segs)
		case p.segs[i] == "**":
			// p's "**" matches nothing more, or absorbs c's next segment whatever it is.
			v = sub(i+1, j) || (j < len(c.segs) && sub(i, j+1))
		case j == len(c.segs) || c.segs[j] == "**":
			v = false // one p segment cannot cover "**" or the end of c
		default:
			v = segCovers(p.segs[i], c.segs[j]) && sub(i+1, j+1)
		}
		memo[key] = v
		return v
	}
	return sub(0, 0)
}

// segCovers reports whether glob segment p matches every segment glob segment c matches.
func segCovers(p, c string) bool {
	switch {
	case p == c:
		return true
	case p == "*":
		return c != "" // every non-empty glob segment matches only non-empty segments
	case !strings.Contains(c, "*"):
		return matchSeg(p, c)
	}
	return false // two different globs: not provable here, so not covered
}
