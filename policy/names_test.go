package policy

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// TestNameMatchersAgreeWithTheirRegexps checks the hand-written name checks against the
// regular expressions they replace, on edge cases and random strings.
func TestNameMatchersAgreeWithTheirRegexps(t *testing.T) {
	ruleRE := regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)
	policyRE := regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$`)
	cases := []string{"", "a", "A", "-", "a-", "-a", "a-b", "a.b", "a_b", "A_B", "a..b", "ä", "a b",
		strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a", 253), strings.Repeat("a", 254)}
	r := rand.New(rand.NewPCG(1, 2))
	const alphabet = "aZ09._- /ä"
	for range 20000 {
		n := r.IntN(70)
		if r.IntN(10) == 0 {
			n = 240 + r.IntN(20)
		}
		var b strings.Builder
		for range n {
			b.WriteByte(alphabet[r.IntN(len(alphabet))])
		}
		cases = append(cases, b.String())
	}
	for _, c := range cases {
		if got, want := ruleNameRE.MatchString(c), ruleRE.MatchString(c); got != want {
			t.Errorf("rule name %q: %v, regexp says %v", c, got, want)
		}
		if got, want := policyNameRE.MatchString(c), policyRE.MatchString(c); got != want {
			t.Errorf("policy name %q: %v, regexp says %v", c, got, want)
		}
	}
}
