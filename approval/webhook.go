package approval

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/policy"
)

// The webhook protocol (docs/policy.md, "Approval webhook"). The sidecar POSTs a JSON
// WebhookAsk to the receiver, with headers X-Airlock-Timestamp (Unix seconds) and
// X-Airlock-Signature ("v1=" and the hex HMAC-SHA256, under the policy's secret, of the
// timestamp, ".", and the body). The receiver answers 200 with a JSON WebhookAnswer signed
// over its fields (SignAnswer). While it answers "pending", the same ask is POSTed again
// with "type": "poll" every pollInterval until askTTL. Anything else denies: an unreachable
// or slow receiver, a status other than 200, a body that is not a WebhookAnswer, a missing
// or wrong signature, an answer for another ask or another request (each request carries a
// fresh nonce the answer must repeat: an answer replayed from an earlier request fails), and
// a timestamp off by more than AnswerSkew.

// Header names of the webhook protocol.
const (
	HeaderTimestamp = "X-Airlock-Timestamp"
	HeaderSignature = "X-Airlock-Signature"
)

// AnswerSkew is how far an answer's timestamp may be from the sidecar's clock.
const AnswerSkew = 5 * time.Minute

// maxAnswerBytes bounds a webhook answer.
const maxAnswerBytes = 64 << 10

// WebhookAsk is the body the sidecar posts.
type WebhookAsk struct {
	Type    string    `json:"type"` // "ask", then "poll" while pending
	ID      string    `json:"id"`
	Nonce   string    `json:"nonce"` // fresh per request; the answer repeats it
	Sandbox string    `json:"sandbox"`
	Policy  string    `json:"policy"`
	Host    string    `json:"host"`
	Port    int       `json:"port"` // 0: a DNS ask, which a grant answers for 80 and 443
	Ports   []int     `json:"ports"`
	Via     string    `json:"via"`
	Method  string    `json:"method,omitempty"`
	Path    string    `json:"path,omitempty"`
	Time    time.Time `json:"time"`
	Expires time.Time `json:"expires"`
}

// WebhookAnswer is the receiver's answer.
type WebhookAnswer struct {
	ID        string `json:"id"`
	Nonce     string `json:"nonce"`           // the nonce of the request answered
	Decision  string `json:"decision"`        // grant, deny or pending
	Scope     Scope  `json:"scope,omitempty"` // once (default), duration or sandbox
	For       string `json:"for,omitempty"`   // a Go duration, for scope duration
	Approver  string `json:"approver"`        // who answered, e.g. "alice (chat)"
	Timestamp int64  `json:"timestamp"`       // Unix seconds when the answer was made
	Signature string `json:"signature"`       // SignAnswer
}

// SignBody returns the X-Airlock-Signature value of a request body sent at ts.
func SignBody(key []byte, ts int64, body []byte) string {
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "%d.", ts)
	m.Write(body)
	return "v1=" + hex.EncodeToString(m.Sum(nil))
}

// SignAnswer returns the signature of an answer: "v1=" and the hex HMAC-SHA256 of its id,
// nonce, decision, scope, for, approver and timestamp, each followed by a newline.
func SignAnswer(key []byte, a WebhookAnswer) string {
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "%s\n%s\n%s\n%s\n%s\n%s\n%d\n", a.ID, a.Nonce, a.Decision, a.Scope, a.For, a.Approver, a.Timestamp)
	return "v1=" + hex.EncodeToString(m.Sum(nil))
}

// runWebhook asks the webhook about a and polls while it answers pending; it answers the
// ask with the result, denying on any failure (fail closed).
func (s *Stage) runWebhook(w policy.WebhookApprover, a Ask) {
	ctx, cancel := context.WithDeadline(s.ctx, a.Expires)
	defer cancel()
	typ := "ask"
	for {
		ans, err := s.exchange(ctx, w, a, typ)
		if !s.pending(a.ID) || s.ctx.Err() != nil {
			return // answered meanwhile (the CLI, a reload), or the stage is closing
		}
		switch {
		case err != nil:
			s.metrics.webhookFailures.Inc()
			s.cfg.Logger.WithField("ask", a.ID).WithField("error", err.Error()).Warn("approval webhook failed; denying (fail closed)")
			_, _ = s.Answer(a.ID, Answer{Approver: "webhook", Detail: "webhook failed (fail closed): " + err.Error()})
			return
		case ans != nil:
			if _, err := s.Answer(a.ID, *ans); err != nil && !errors.Is(err, ErrAnswered) && !errors.Is(err, ErrNotFound) {
				_, _ = s.Answer(a.ID, Answer{Approver: ans.Approver, Detail: "webhook grant refused: " + err.Error()})
			}
			return
		}
		typ = "poll"
		t := time.NewTimer(w.PollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return // the ask expires unanswered (Sweep)
		case <-t.C:
		}
	}
}

// pending reports whether ask id still waits for an answer.
func (s *Stage) pending(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.asks[id]
	return a != nil && a.Status == StatusPending
}

// exchange posts one ask or poll and checks the answer: an Answer, nil for pending, or why
// the answer is refused.
func (s *Stage) exchange(ctx context.Context, w policy.WebhookApprover, a Ask, typ string) (*Answer, error) {
	if s.cfg.Transport == nil || s.cfg.Secrets == nil {
		return nil, errors.New("no operator dial path or credential broker for the webhook")
	}
	key, err := s.cfg.Secrets.Value(ctx, w.Secret)
	if err != nil {
		return nil, fmt.Errorf("webhook secret %q: %v", w.Secret, err)
	}
	nonce := newID() + newID()
	body, _ := json.Marshal(WebhookAsk{Type: typ, ID: a.ID, Nonce: nonce, Sandbox: a.Sandbox, Policy: a.Policy, Host: a.Host, Port: a.Port,
		Ports: a.Ports(), Via: a.Via, Method: a.Method, Path: a.Path, Time: a.Created.UTC(), Expires: a.Expires.UTC()})
	raw, err := s.post(ctx, w, []byte(key), body)
	if err != nil {
		return nil, err
	}
	return checkAnswer([]byte(key), raw, a.ID, nonce, s.cfg.Now())
}

// post sends one signed request and returns the answer's body.
func (s *Stage) post(ctx context.Context, w policy.WebhookApprover, key, body []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, w.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("webhook request: %v", err)
	}
	ts := s.cfg.Now().Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(HeaderSignature, SignBody(key, ts, body))
	resp, err := (&http.Client{Transport: s.cfg.Transport}).Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("webhook did not answer within %s", w.Timeout)
		}
		return nil, fmt.Errorf("webhook unreachable: %v", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("webhook answer unread: %v", err)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("webhook answered status %d", resp.StatusCode)
	case len(raw) > maxAnswerBytes:
		return nil, fmt.Errorf("webhook answer over %d bytes", maxAnswerBytes)
	}
	return raw, nil
}

// decodeStrict decodes one JSON value with no unknown fields and nothing after it.
func decodeStrict(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the answer")
	}
	return nil
}

// checkAnswer verifies a webhook answer to ask a: nil for pending. Errors wrap ErrBadAnswer.
func checkAnswer(key, raw []byte, id, nonce string, now time.Time) (*Answer, error) {
	var ans WebhookAnswer
	if err := decodeStrict(raw, &ans); err != nil {
		return nil, fmt.Errorf("%w: not a JSON answer: %v", ErrBadAnswer, err)
	}
	at := time.Unix(ans.Timestamp, 0)
	switch {
	case ans.Signature == "":
		return nil, fmt.Errorf("%w: unsigned", ErrBadAnswer)
	case !hmac.Equal([]byte(ans.Signature), []byte(SignAnswer(key, ans))):
		return nil, fmt.Errorf("%w: bad signature", ErrBadAnswer)
	case ans.ID != id:
		return nil, fmt.Errorf("%w: answer for ask %q, not %q (a replay)", ErrBadAnswer, ans.ID, id)
	case ans.Nonce != nonce:
		return nil, fmt.Errorf("%w: answer to an earlier request (nonce differs: a replay)", ErrBadAnswer)
	case at.Sub(now).Abs() > AnswerSkew:
		return nil, fmt.Errorf("%w: timestamp %s is stale or from the future", ErrBadAnswer, at.UTC().Format(time.RFC3339))
	}
	approver := "webhook:" + strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return -1
		}
		return r
	}, ans.Approver)
	switch ans.Decision {
	case "pending":
		return nil, nil
	case "deny":
		return &Answer{Approver: approver, Detail: "denied by " + approver}, nil
	case "grant":
		out := &Answer{Grant: true, Scope: ans.Scope, Approver: approver}
		if ans.For != "" {
			d, err := time.ParseDuration(ans.For)
			if err != nil {
				return nil, fmt.Errorf("%w: for %q is not a duration", ErrBadAnswer, ans.For)
			}
			out.For = d
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: decision %q; want grant, deny or pending", ErrBadAnswer, ans.Decision)
}
