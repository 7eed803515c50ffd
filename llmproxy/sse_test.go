package llmproxy

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestSSEReader(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		names   []string
		data    []string
		lastErr error
	}{
		{"openai", "data: {\"a\":1}\n\ndata: [DONE]\n\n", []string{"", ""}, []string{`{"a":1}`, "[DONE]"}, io.EOF},
		{"anthropic crlf", "event: message_start\r\ndata: {}\r\n\r\nevent: ping\r\ndata: {\"type\": \"ping\"}\r\n\r\n",
			[]string{"message_start", "ping"}, []string{"{}", `{"type": "ping"}`}, io.EOF},
		{"multi-line data and comment", ": keep-alive\ndata: a\ndata: b\n\n", []string{""}, []string{"a\nb"}, io.EOF},
		{"torn last event", "data: x\n\ndata: y", []string{"", ""}, []string{"x", ""}, io.ErrUnexpectedEOF},
		{"leading blank lines", "\n\ndata: z\n\n", []string{""}, []string{"z"}, io.EOF},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newSSEReader(strings.NewReader(tc.in))
			var raw bytes.Buffer
			for i := 0; ; i++ {
				ev, err := r.next()
				if err != nil && len(ev.raw) == 0 {
					if !errors.Is(err, tc.lastErr) && !(errors.Is(err, io.EOF) && tc.lastErr == io.ErrUnexpectedEOF) {
						t.Errorf("end: got %v, want %v", err, tc.lastErr)
					}
					break
				}
				raw.Write(ev.raw)
				if i >= len(tc.names) {
					t.Fatalf("extra event %q", ev.raw)
				}
				if err == nil && (ev.name != tc.names[i] || string(ev.data) != tc.data[i]) {
					t.Errorf("event %d: got %q %q, want %q %q", i, ev.name, ev.data, tc.names[i], tc.data[i])
				}
				if err != nil {
					if !errors.Is(err, tc.lastErr) {
						t.Errorf("got %v, want %v", err, tc.lastErr)
					}
					break
				}
			}
			// Passthrough is byte-exact (leading blank lines aside, which carry no event).
			if got := raw.String(); got != strings.TrimLeft(tc.in, "\n") {
				t.Errorf("raw bytes %q, want %q", got, tc.in)
			}
		})
	}
}

// FuzzSSEReader: whatever a provider sends, the reader neither panics nor loses or invents
// bytes: the events' raw bytes are the input, less blank lines that carry no event.
func FuzzSSEReader(f *testing.F) {
	f.Add("data: {\"a\":1}\n\ndata: [DONE]\n\n")
	f.Add("event: message_start\r\ndata: {}\r\n\r\n")
	f.Add("\n\n: c\ndata: a\ndata\n\nevent:x")
	f.Fuzz(func(t *testing.T, in string) {
		r := newSSEReader(strings.NewReader(in))
		var raw bytes.Buffer
		for range len(in) + 2 {
			ev, err := r.next()
			raw.Write(ev.raw)
			m := &streamMeter{ep: epMessages}
			m.observe(ev.name, ev.data)
			(&streamMeter{ep: epChat}).observe(ev.name, ev.data)
			(&streamMeter{ep: epResponses}).observe(ev.name, ev.data)
			if err != nil {
				break
			}
		}
		if norm(raw.String()) != norm(in) {
			t.Errorf("raw %q lost or invented bytes of %q", raw.String(), in)
		}
	})
}

// norm drops CRs and blank lines, the only bytes the reader may skip.
func norm(s string) string {
	s = strings.ReplaceAll(s, "\r", "")
	for strings.Contains(s, "\n\n") {
		s = strings.ReplaceAll(s, "\n\n", "\n")
	}
	return strings.TrimPrefix(s, "\n")
}
