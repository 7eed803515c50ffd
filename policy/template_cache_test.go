package policy

import (
	"fmt"
	"reflect"
	"testing"
)

// TestParseTemplateCached: the memoised parse gives what parseTemplate gives, good values
// and bad, and the memo stops growing at its bound.
func TestParseTemplateCached(t *testing.T) {
	for _, v := range []string{`Bearer {{ secret "tok" }}`, `{{ basic "u" "tok" }}`, `x {{ secret tok }}`, `}} {{`, `plain`} {
		for range 2 { // the second read comes from the memo
			p1, r1 := parseTemplateCached(v)
			p2, r2 := parseTemplate(v)
			if !reflect.DeepEqual(p1, p2) || r1 != r2 {
				t.Fatalf("%q: cached %v %q, parsed %v %q", v, p1, r1, p2, r2)
			}
		}
	}
	for i := range maxParsedTemplates + 10 {
		parseTemplateCached(fmt.Sprintf(`Bearer {{ secret "s%d" }}`, i))
	}
	parsedTemplates.RLock()
	n := len(parsedTemplates.m)
	parsedTemplates.RUnlock()
	if n > maxParsedTemplates {
		t.Fatalf("%d templates remembered, want at most %d", n, maxParsedTemplates)
	}
}
