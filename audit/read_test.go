package audit

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestReadRoundTrip writes events with a Logger and reads them back: every field survives.
func TestReadRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 22, 10, 0, 0, 123456000, time.UTC)
	in := []Event{
		{Time: at, Sandbox: "sb", Kind: KindHTTP, Decision: DecisionReport, Rule: "r", Reason: "no_rule",
			Detail: "d \"q\"\n", Destination: "a.test:443", Addr: "198.18.0.1:443", Method: "GET",
			Path: "/x%20y", Status: 200, BytesUp: 1, BytesDown: 2, Duration: 1500 * time.Microsecond,
			Secrets: []string{"tok"}, Client: "127.0.0.1:5000", Policy: "p", Error: "e"},
		{Time: at, Sandbox: "sb", Kind: KindLLM, Decision: DecisionAllow, Model: "m", Provider: "openai",
			InputTokens: 3, OutputTokens: 4, CostUSD: 0.5},
	}
	var buf bytes.Buffer
	l, err := New(Options{Writer: &buf})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range in {
		l.Log(e)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// A logrus line among the audit lines is skipped.
	trail := `{"level":"info","msg":"policy loaded","time":"2026-11-22T10:00:00Z"}` + "\n\n" + buf.String()
	var got []Event
	var lines []int
	err = Read(strings.NewReader(trail), "trail", func(e Event, n int) error {
		got, lines = append(got, e), append(lines, n)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, in) {
		t.Errorf("got %+v, want %+v", got, in)
	}
	if !reflect.DeepEqual(lines, []int{3, 4}) {
		t.Errorf("line numbers: got %v, want [3 4]", lines)
	}
}

func TestReadErrors(t *testing.T) {
	tests := []struct {
		name, trail, want string
	}{
		{"not json", `{"kind":"http","decision":"allow","msg":"audit"}` + "\nnot json\n", "trail:2: decode audit line"},
		{"wrong type", `{"kind":"http","decision":"allow","msg":"audit","status":"x"}`, "trail:1: decode audit line"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Read(strings.NewReader(tc.trail), "trail", func(Event, int) error { return nil })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	stop := errors.New("stop")
	err := Read(strings.NewReader(`{"kind":"http","decision":"allow","msg":"audit"}`), "t", func(Event, int) error { return stop })
	if !errors.Is(err, stop) {
		t.Errorf("fn's error: got %v, want it wrapped", err)
	}
	if _, err := Decode([]byte(`{"msg":"audit","kind":"http"}`)); !errors.Is(err, ErrNotEvent) {
		t.Errorf("line without decision: got %v, want ErrNotEvent", err)
	}
}
