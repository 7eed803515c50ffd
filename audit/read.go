package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// ErrNotEvent is returned by Decode for a JSON line that is not an audit event: a line of
// the sidecar's own logrus log, which shares stderr with the audit lines.
var ErrNotEvent = errors.New("not an audit event")

// maxLine is more than the longest line a Logger writes (every field is bounded:
// MaxFieldBytes, escaped at most six bytes a byte). Readers take longer lines too (an older
// airlock bounded nothing): it is the window lastChained reads at a time.
const maxLine = 4 << 20

// line is the JSON form of an Event, as appendJSON writes it.
type line struct {
	Time         time.Time `json:"time"`
	Sandbox      string    `json:"sandbox"`
	Kind         Kind      `json:"kind"`
	Decision     string    `json:"decision"`
	Rule         string    `json:"rule"`
	Reason       string    `json:"reason"`
	Detail       string    `json:"detail"`
	Destination  string    `json:"destination"`
	Addr         string    `json:"addr"`
	Method       string    `json:"method"`
	Path         string    `json:"path"`
	Status       int       `json:"status"`
	BytesUp      int64     `json:"bytes_up"`
	BytesDown    int64     `json:"bytes_down"`
	DurationMS   float64   `json:"duration_ms"`
	Secrets      []string  `json:"secrets"`
	Client       string    `json:"client"`
	Policy       string    `json:"policy"`
	Identity     string    `json:"identity"`
	Error        string    `json:"error"`
	Model        string    `json:"model"`
	Provider     string    `json:"provider"`
	InputTokens  int64     `json:"input_tokens"`
	OutputTokens int64     `json:"output_tokens"`
	CostUSD      float64   `json:"cost_usd"`
	Prompt       string    `json:"prompt"`
	RequestID    string    `json:"request_id"`
	Phase        string    `json:"phase"`
	Count        int64     `json:"count"`
	Msg          string    `json:"msg"`
}

// Decode parses one JSON line written by a Logger back into an Event. It returns ErrNotEvent
// for a JSON object that is not an audit line (its "msg" is not "audit", or it has no kind or
// decision), and a decode error for anything that is not a JSON object.
func Decode(b []byte) (Event, error) {
	var l line
	if err := json.Unmarshal(b, &l); err != nil {
		return Event{}, fmt.Errorf("decode audit line: %w", err)
	}
	if l.Msg != "audit" || l.Kind == "" || l.Decision == "" {
		return Event{}, ErrNotEvent
	}
	return Event{
		Time: l.Time, Sandbox: l.Sandbox, Kind: l.Kind, Decision: l.Decision, Rule: l.Rule,
		Reason: l.Reason, Detail: l.Detail, Destination: l.Destination, Addr: l.Addr,
		Method: l.Method, Path: l.Path, Status: l.Status, BytesUp: l.BytesUp, BytesDown: l.BytesDown,
		Duration: time.Duration(l.DurationMS * float64(time.Millisecond)), Secrets: l.Secrets,
		Client: l.Client, Policy: l.Policy, Identity: l.Identity, Error: l.Error, Model: l.Model, Provider: l.Provider,
		InputTokens: l.InputTokens, OutputTokens: l.OutputTokens, CostUSD: l.CostUSD, Prompt: l.Prompt,
		RequestID: l.RequestID, Phase: l.Phase, Count: l.Count,
	}, nil
}

// Read reads an audit trail (an --audit-log file, or the sidecar's stderr, where audit lines
// sit among log lines) and calls fn with each event and its line number (from 1), in order.
// Blank lines, JSON lines that are not audit events and decision-phase events (PhaseDecision:
// each is followed by its request's canonical event, so every request is read once) are
// skipped; a line that is not JSON at all is an error naming the line, as is an error fn
// returns. Read does not check the hash chain: Verify does.
func Read(r io.Reader, name string, fn func(e Event, lineNo int) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for n := 1; ; n++ {
		raw, rerr := br.ReadBytes('\n') // any length: a line an older airlock wrote unbounded too
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return fmt.Errorf("read %s: %w", name, rerr)
		}
		if err := readLine(raw, name, n, fn); err != nil {
			return err
		}
		if rerr != nil {
			return nil
		}
	}
}

// readLine decodes one line for Read and hands it to fn.
func readLine(raw []byte, name string, n int, fn func(e Event, lineNo int) error) error {
	b := bytes.TrimSpace(raw)
	if len(b) == 0 {
		return nil
	}
	e, err := Decode(b)
	if errors.Is(err, ErrNotEvent) || (err == nil && e.Phase == PhaseDecision) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s:%d: %w", name, n, err)
	}
	if err := fn(e, n); err != nil {
		return fmt.Errorf("%s:%d: %w", name, n, err)
	}
	return nil
}
