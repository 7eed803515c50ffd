package credentials

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// naiveContains is contains without the skip table: one search per pattern.
func naiveContains(b []byte, pats []pattern) bool {
	for _, p := range pats {
		if bytes.Contains(b, p.find) {
			return true
		}
	}
	return false
}

// redactorPatterns are the patterns a Redactor scrubs for values.
func redactorPatterns(values ...string) []pattern {
	r := NewRedactor()
	for _, v := range values {
		r.Add(v)
	}
	return r.Replacer().pats
}

// TestSkipTableFindsEveryPlacement puts each pattern of a Redactor's set (a secret's
// encodings) at every offset of texts of every length up to a few windows, alone, twice,
// and cut short by one byte at either end, and holds contains to the per-pattern search.
func TestSkipTableFindsEveryPlacement(t *testing.T) {
	pats := redactorPatterns("bench-secret-value-0123456789abcdef", "another/secret+value=")
	r := newReplacer(pats)
	if r.skip == nil {
		t.Fatal("no skip table for two long secrets")
	}
	fill := []byte(`{"time":"2026-11-27T21:40:11.123456789Z","kind":"http","path":"/x"}`)
	for _, p := range r.pats {
		for _, find := range [][]byte{p.find, p.find[1:], p.find[:len(p.find)-1]} {
			for n := 0; n <= len(find)+3*r.skip.m; n++ {
				for at := 0; at <= n; at++ {
					text := append(append(bytes.Clone(fill[:at%len(fill)]), find...), fill[:(n-at)%len(fill)]...)
					if got, want := r.contains(text), naiveContains(text, r.pats); got != want {
						t.Fatalf("contains(%q): got %v, want %v", text, got, want)
					}
				}
			}
		}
	}
}

// TestSkipTableRandom holds contains to the per-pattern search over random pattern sets
// (small alphabets, so that near misses and hash collisions are common) and texts.
func TestSkipTableRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	word := func(n int, alpha string) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = alpha[rng.IntN(len(alpha))]
		}
		return b
	}
	for round := range 3000 {
		alpha := "abcdefghijklmnopqrstuvwxyz0123456789"[:2+rng.IntN(34)]
		var pats []pattern
		for range 1 + rng.IntN(20) {
			pats = append(pats, pattern{find: word(minSkipLen+rng.IntN(40), alpha), with: []byte("x")})
		}
		r := newReplacer(pats)
		for range 20 {
			text := word(rng.IntN(300), alpha)
			if rng.IntN(2) == 0 && len(text) > 0 {
				p := r.pats[rng.IntN(len(r.pats))].find
				at := rng.IntN(len(text))
				text = append(text[:at], append(bytes.Clone(p), text[at:]...)...)
			}
			if got, want := r.contains(text), naiveContains(text, r.pats); got != want {
				t.Fatalf("round %d: contains(%q) with %v: got %v, want %v", round, text, r.pats, got, want)
			}
		}
	}
}

func FuzzSkipTable(f *testing.F) {
	f.Add([]byte("x bench-secret-value-0123456789abcdef y"), []byte("bench-secret-value"), []byte("0123456789abcdef"))
	f.Add([]byte("aaaaaaaaaaaaaaaaab"), []byte("aaaaaaaab"), []byte("aaaaaaaaa"))
	f.Fuzz(func(t *testing.T, text, p1, p2 []byte) {
		r := newReplacer([]pattern{{find: p1, with: []byte("x")}, {find: p2, with: []byte("y")}})
		if got, want := r.contains(text), naiveContains(text, r.pats); got != want {
			t.Fatalf("contains(%q) with %q, %q: got %v, want %v", text, p1, p2, got, want)
		}
	})
}

var benchAuditLine = []byte(`{"time":"2026-11-27T21:40:11.123456789Z","sandbox":"bench","kind":"http","decision":"allow","would_deny":false,"rule":"inject","reason":"rule_matched","destination":"inject.bench.test:443","addr":"127.0.0.1:42553","method":"GET","path":"/","status":200,"bytes_up":0,"bytes_down":17,"duration_ms":0.123,"secrets":["bench-token"],"client":"127.0.0.1:51234","policy":"bench","request_id":"0123456789abcdef0123456789abcdef"}`)

// BenchmarkRedactAuditLine is the Redactor's pass over one audit line holding no secret,
// with one and with ten secrets known (each scrubbed in its encodings).
func BenchmarkRedactAuditLine(b *testing.B) {
	for _, n := range []int{1, 10} {
		b.Run(map[int]string{1: "one-secret", 10: "ten-secrets"}[n], func(b *testing.B) {
			r := NewRedactor()
			for i := range n {
				r.Add("bench-secret-value-0123456789abcdef" + string(rune('a'+i)))
			}
			for b.Loop() {
				if out := r.Bytes(benchAuditLine); &out[0] != &benchAuditLine[0] {
					b.Fatal("a line without a secret was copied")
				}
			}
		})
	}
}
