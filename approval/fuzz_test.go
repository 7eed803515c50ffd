package approval

import (
	"testing"
	"time"
)

// FuzzCheckAnswer feeds webhook answers (untrusted input) to the checker: it never panics,
// and it accepts an answer only when it is signed for the ask and request asked.
func FuzzCheckAnswer(f *testing.F) {
	key := []byte(hookKey)
	now := time.Unix(1764242633, 0)
	good := WebhookAnswer{ID: "abc", Nonce: "n1", Decision: "grant", Scope: ScopeDuration, For: "5m", Approver: "a", Timestamp: now.Unix()}
	good.Signature = SignAnswer(key, good)
	for _, seed := range []string{
		`{"id":"abc","nonce":"n1","decision":"grant","scope":"duration","for":"5m","approver":"a","timestamp":1764242633,"signature":"` + good.Signature + `"}`,
		`{"id":"abc","decision":"pending"}`, `{}`, `[]`, `null`, `{"id":"abc","extra":1}`, "",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		ans, err := checkAnswer(key, raw, "abc", "n1", now)
		if err == nil && ans != nil {
			// Accepted: it must carry a valid signature over the ask and nonce asked.
			var w WebhookAnswer
			if jsonErr := decodeStrict(raw, &w); jsonErr != nil || w.ID != "abc" || w.Nonce != "n1" || w.Signature != SignAnswer(key, w) {
				t.Fatalf("accepted %q", raw)
			}
		}
	})
}
