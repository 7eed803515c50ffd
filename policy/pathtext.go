package policy

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// pathSpecials are the ASCII characters that give a path its structure, or change how a
// server splits or decodes it. Text a server could turn into one of them is ambiguous.
const pathSpecials = `./\%;?#`

// lookalikes are runes that NFKC leaves alone but that servers or their platforms have been
// seen to read as "/", "\" or "." (Windows "best fit" mappings, IDNA's full stops).
var lookalikes = map[rune]bool{
	'\u2215': true, // DIVISION SLASH
	'\u2044': true, // FRACTION SLASH
	'\u29F8': true, // BIG SOLIDUS
	'\u29F5': true, // REVERSE SOLIDUS OPERATOR
	'\u29F9': true, // BIG REVERSE SOLIDUS
	'\u2216': true, // SET MINUS
	'\u3002': true, // IDEOGRAPHIC FULL STOP (IDNA maps it to ".")
	'\uFF61': true, // HALFWIDTH IDEOGRAPHIC FULL STOP
	'\u2027': true, // HYPHENATION POINT
	'\u00B7': true, // MIDDLE DOT
}

// ambiguousText says why a once-decoded path could be read as another path by a server that
// does more than the policy does, or "" when it cannot:
//   - bytes that are not UTF-8: overlong forms (%C0%AE, %E0%80%AE are "." to a lenient
//     decoder, %C0%AF is "/"), surrogates, stray continuation bytes;
//   - a rune whose compatibility normalisation (NFKC, which some frameworks and file systems
//     apply) holds one of pathSpecials: FULLWIDTH FULL STOP "．" and SOLIDUS "／", ONE DOT
//     LEADER "․", TWO DOT LEADER "‥", SMALL FULL STOP "﹒"; or a known look-alike;
//   - an escape left after one decode whose byte is one of pathSpecials, a control byte or
//     not ASCII (%252e, %25c0%25ae): a server that decodes twice sees it.
func ambiguousText(s string) string {
	if !utf8.ValidString(s) {
		return "holds bytes that are not valid UTF-8 (an overlong or broken encoding)"
	}
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			c := unhex(s[i+1])<<4 | unhex(s[i+2])
			if c < 0x20 || c >= 0x7f || strings.IndexByte(pathSpecials, c) >= 0 {
				return fmt.Sprintf("double-encoded %q", s[i:i+3])
			}
		}
	}
	for _, r := range s {
		if r < utf8.RuneSelf {
			continue
		}
		if lookalikes[r] {
			return fmt.Sprintf("holds %U, which servers may read as a path separator or dot", r)
		}
		if n := norm.NFKC.String(string(r)); strings.ContainsAny(n, pathSpecials) {
			return fmt.Sprintf("holds %U, which normalises (NFKC) to %q", r, n)
		}
	}
	return ""
}
