package audit

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
)

// encoderCases are events the encoder must write exactly as the reference encoder
// (encode_ref_test.go) did: every field, every kind, hostile and oversized strings.
func encoderCases() map[string]Event {
	at := time.Date(2026, 11, 27, 21, 40, 11, 123456789, time.FixedZone("x", 3600))
	long := strings.Repeat("é", MaxFieldBytes) // cut inside a rune
	many := make([]string, maxSecrets+3)
	for i := range many {
		many[i] = "secret-" + strconv.Itoa(i)
	}
	llm := Event{Time: at, Sandbox: "s", Kind: KindLLM, Decision: DecisionAllow, Rule: "r", Model: "gpt\n\"x\"",
		Provider: "openai", InputTokens: 12, OutputTokens: 34, CostUSD: 0.000123, OutputClamped: 7,
		Prompt: "hello \u2028 world \xff", Phase: PhaseDecision, RequestID: "id"}
	return map[string]Event{
		"zero":     {},
		"bench":    benchEvent,
		"report":   {Time: at, Kind: KindHTTP, Decision: DecisionReport, Rule: "r", Reason: "no_rule", Count: 1},
		"flood":    {Time: at, Kind: KindConnect, Decision: DecisionDeny, Count: 42, Detail: "42 denials"},
		"llm":      llm,
		"llm-zero": {Kind: KindLLM},
		"every-field": {Time: at, Sandbox: "sb", Kind: KindHTTP, Decision: DecisionAllow, Rule: "rule",
			Reason: "rule_matched", Detail: "detail", Destination: "api.test:443", Addr: "198.18.0.1:443",
			Method: "POST", Path: "/v1/x", Status: 201, BytesUp: 1 << 40, BytesDown: -1, Duration: 1234567890,
			Secrets: []string{"a", "b\"c"}, Client: "198.18.0.2:5000", Policy: "p", Identity: "id",
			Error: "dial: refused", RequestID: "req", Phase: PhaseDecision},
		"hostile": {Kind: KindHTTP, Path: "/a\n{\"decision\":\"allow\"}\x00\x1f\x7f\u2028\u2029\xff\xfe\\\t\r",
			Detail: "\xe2\x80", Destination: "é.test:443", Method: "G\"ET", Error: "\u2029\u2028"},
		"long":              {Kind: KindHTTP, Path: long, Detail: strings.Repeat("a", MaxFieldBytes+1), Secrets: []string{long}},
		"secrets":           {Kind: KindCredential, Secrets: many},
		"durations-sub-µs":  {Duration: 999},
		"duration-negative": {Duration: -1500 * time.Microsecond},
		"duration-huge":     {Duration: 1<<63 - 1},
		"duration-boundary": {Duration: time.Duration(maxExactMS) * time.Microsecond},
		"duration-below":    {Duration: time.Duration(maxExactMS-1) * time.Microsecond},
	}
}

func TestEncoderMatchesReference(t *testing.T) {
	for name, e := range encoderCases() {
		t.Run(name, func(t *testing.T) {
			got, want := appendTail(e.appendBody(nil), 9, &[32]byte{1, 0xff}), refAppendTail(e.refAppendBody(nil), 9, &[32]byte{1, 0xff})
			if !bytes.Equal(got, want) {
				t.Fatalf("got  %s\nwant %s", got, want)
			}
			line := got
			var m map[string]any
			if err := json.Unmarshal(line, &m); err != nil {
				t.Fatalf("not JSON: %v: %s", err, line)
			}
			if e.Path != "" && m["path"] != string([]rune(boundField(e.Path, MaxFieldBytes))) {
				t.Errorf("path: got %q, want %q (encoding/json's reading)", m["path"], e.Path)
			}
		})
	}
}

// TestAppendMSMatchesStrconv holds appendMS to strconv's shortest formatting of the same
// float64, across the values a request's duration takes and the edges.
func TestAppendMSMatchesStrconv(t *testing.T) {
	check := func(us int64) {
		t.Helper()
		got := string(appendMS(nil, us))
		want := strconv.FormatFloat(float64(us)/1000, 'f', -1, 64)
		if got != want {
			t.Fatalf("appendMS(%d): got %s, want %s", us, got, want)
		}
	}
	for us := int64(-2000); us <= 200000; us++ {
		check(us)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		check(r.Int64N(maxExactMS))
		check(maxExactMS - 1 - r.Int64N(1e6))
	}
	for _, us := range []int64{maxExactMS - 1, maxExactMS, maxExactMS + 1, 1<<63 - 1, -1 << 63} {
		check(us)
	}
}

// TestPlain8 holds the word test to the byte-at-a-time rule for every byte value, alone and
// in pairs, at every position of the word.
func TestPlain8(t *testing.T) {
	plain := func(c byte) bool { return c >= 0x20 && c != '"' && c != '\\' && c < 0x80 }
	w := []byte("abcdefgh")
	for p := range 8 {
		for c := range 256 {
			w[p] = byte(c)
			for q := range 8 {
				if q == p {
					continue
				}
				for d := range 256 {
					w[q] = byte(d)
					want := plain(byte(c)) && plain(byte(d))
					if got := plain8(load64(string(w), 0)); got != want {
						t.Fatalf("plain8(%q): got %v, want %v", w, got, want)
					}
				}
				w[q] = "abcdefgh"[q]
			}
		}
		w[p] = "abcdefgh"[p]
	}
}

func FuzzEncoder(f *testing.F) {
	for _, s := range []string{"", "/a", "\x00", "\\\"", "\u2028", "\xff", "abcdefgh\"ijklmnop", "é.test\x1f"} {
		f.Add(s, s, s, int64(len(s))*999, 200)
	}
	f.Fuzz(func(t *testing.T, path, detail, model string, dur int64, status int) {
		for _, e := range []Event{
			{Kind: KindHTTP, Decision: DecisionDeny, Path: path, Detail: detail, Secrets: []string{detail, model},
				Duration: time.Duration(dur), Status: status, Method: model, Error: path + detail},
			{Kind: KindLLM, Decision: DecisionReport, Model: model, Prompt: path, CostUSD: float64(dur) / 7,
				InputTokens: dur, Duration: time.Duration(dur) * time.Microsecond},
		} {
			got, want := appendTail(e.appendBody(nil), 9, &[32]byte{1, 0xff}), refAppendTail(e.refAppendBody(nil), 9, &[32]byte{1, 0xff})
			if !bytes.Equal(got, want) {
				t.Fatalf("got  %s\nwant %s", got, want)
			}
			if !json.Valid(got) {
				t.Fatalf("not JSON: %s", got)
			}
		}
	})
}

// TestAppendTailMatchesReference holds the chain fields to the reference encoder's, for
// hashes of every byte value and sequence numbers of every length, onto buffers of every
// spare capacity.
func TestAppendTailMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := range 2000 {
		var prev [32]byte
		for j := range prev {
			prev[j] = byte(r.IntN(256))
		}
		seq := r.Uint64() >> (i % 64)
		start := make([]byte, i%70, i%70+i%200)
		got := appendTail(bytes.Clone(start), seq, &prev)
		want := refAppendTail(bytes.Clone(start), seq, &prev)
		if !bytes.Equal(got, want) {
			t.Fatalf("got  %q\nwant %q", got, want)
		}
	}
}
