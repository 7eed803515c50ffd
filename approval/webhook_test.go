package approval

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/policy"
)

type keySecrets string

func (k keySecrets) Value(_ context.Context, name string) (string, error) {
	if name != "hook-key" {
		return "", fmt.Errorf("no secret %q", name)
	}
	return string(k), nil
}

const hookKey = "s3cret-hmac-key"

// receiver is a webhook receiver; answer decides what it sends for each request (n counts
// the requests for one ask, from 1).
type receiver struct {
	t      *testing.T
	mu     sync.Mutex
	n      map[string]int
	bodies []WebhookAsk
	answer func(a WebhookAsk, n int) (status int, body any)
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	raw, _ := io.ReadAll(req.Body)
	ts, _ := strconv.ParseInt(req.Header.Get(HeaderTimestamp), 10, 64)
	if req.Header.Get(HeaderSignature) != SignBody([]byte(hookKey), ts, raw) {
		r.t.Errorf("ask not signed correctly")
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var a WebhookAsk
	if err := json.Unmarshal(raw, &a); err != nil {
		r.t.Errorf("ask body: %v", err)
	}
	r.mu.Lock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[a.ID]++
	n := r.n[a.ID]
	r.bodies = append(r.bodies, a)
	r.mu.Unlock()
	status, body := r.answer(a, n)
	w.WriteHeader(status)
	switch b := body.(type) {
	case string:
		io.WriteString(w, b)
	default:
		_ = json.NewEncoder(w).Encode(b)
	}
}

// signed is a signed answer to id made now.
func signed(ask WebhookAsk, decision string, scope Scope, dur string) WebhookAnswer {
	a := WebhookAnswer{ID: ask.ID, Nonce: ask.Nonce, Decision: decision, Scope: scope, For: dur, Approver: "alice (chat)", Timestamp: time.Now().Unix()}
	a.Signature = SignAnswer([]byte(hookKey), a)
	return a
}

func webhookFixture(t *testing.T, ans func(a WebhookAsk, n int) (int, any), timeout string) (*fixture, *receiver) {
	rc := &receiver{t: t, answer: ans}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	approval := fmt.Sprintf("  approval:\n    hold: 1m\n    approvers:\n      webhook: {url: %q, secret: hook-key, timeout: %s, pollInterval: 1ms}\n", srv.URL, timeout)
	f := newFixture(t, approval, func(c *Config) {
		c.Transport, c.Secrets, c.Now = http.DefaultTransport.(*http.Transport).Clone(), keySecrets(hookKey), time.Now
	})
	return f, rc
}

func TestWebhook(t *testing.T) {
	old := signed(WebhookAsk{ID: "000000000000", Nonce: "n"}, "grant", ScopeOnce, "")
	for _, tc := range []struct {
		name       string
		answer     func(a WebhookAsk, n int) (int, any)
		timeout    string
		wantReason policy.Reason
		wantDetail string
	}{
		{name: "grant", answer: func(a WebhookAsk, _ int) (int, any) { return 200, signed(a, "grant", ScopeDuration, "10m") },
			wantReason: policy.ReasonRuleMatched},
		{name: "deny", answer: func(a WebhookAsk, _ int) (int, any) { return 200, signed(a, "deny", "", "") },
			wantReason: policy.ReasonApprovalDenied, wantDetail: "denied by webhook:alice (chat)"},
		{name: "pending then grant", answer: func(a WebhookAsk, n int) (int, any) {
			if n < 4 {
				return 200, signed(a, "pending", "", "")
			}
			if a.Type != "poll" {
				t.Errorf("request %d has type %q, want poll", n, a.Type)
			}
			return 200, signed(a, "grant", "", "")
		}, wantReason: policy.ReasonRuleMatched},
		{name: "unsigned", answer: func(a WebhookAsk, _ int) (int, any) {
			s := signed(a, "grant", "", "")
			s.Signature = ""
			return 200, s
		}, wantReason: policy.ReasonApprovalDenied, wantDetail: "unsigned"},
		{name: "bad signature", answer: func(a WebhookAsk, _ int) (int, any) {
			s := signed(a, "grant", "", "")
			s.Scope = ScopeSandbox // changed after signing
			return 200, s
		}, wantReason: policy.ReasonApprovalDenied, wantDetail: "bad signature"},
		{name: "replay of another ask's answer", answer: func(WebhookAsk, int) (int, any) { return 200, old },
			wantReason: policy.ReasonApprovalDenied, wantDetail: "a replay"},
		{name: "replay of an answer seen before", answer: func() func(a WebhookAsk, n int) (int, any) {
			var first WebhookAnswer
			return func(a WebhookAsk, n int) (int, any) {
				if n == 1 {
					first = signed(a, "pending", "", "")
				} else {
					first.Decision = "grant"
					first.Signature = SignAnswer([]byte(hookKey), first)
				}
				return 200, first
			}
		}(), wantReason: policy.ReasonApprovalDenied, wantDetail: "earlier request"},
		{name: "stale timestamp", answer: func(a WebhookAsk, _ int) (int, any) {
			s := WebhookAnswer{ID: a.ID, Nonce: a.Nonce, Decision: "grant", Timestamp: time.Now().Add(-time.Hour).Unix()}
			s.Signature = SignAnswer([]byte(hookKey), s)
			return 200, s
		}, wantReason: policy.ReasonApprovalDenied, wantDetail: "stale"},
		{name: "malformed", answer: func(WebhookAsk, int) (int, any) { return 200, "{grant" },
			wantReason: policy.ReasonApprovalDenied, wantDetail: "not a JSON answer"},
		{name: "error status", answer: func(WebhookAsk, int) (int, any) { return 500, "oops" },
			wantReason: policy.ReasonApprovalDenied, wantDetail: "status 500"},
		{name: "scope over maxGrant", answer: func(a WebhookAsk, _ int) (int, any) { return 200, signed(a, "grant", ScopeDuration, "100h") },
			wantReason: policy.ReasonApprovalDenied, wantDetail: "webhook grant refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, _ := webhookFixture(t, tc.answer, cmpOr(tc.timeout, "5s"))
			d := f.settle(context.Background(), "new.example.org", 443)
			if d.Reason != tc.wantReason || !strings.Contains(d.Detail, tc.wantDetail) {
				t.Fatalf("got %s (%s), want %s containing %q", d.Reason, d.Detail, tc.wantReason, tc.wantDetail)
			}
			if tc.wantReason == policy.ReasonApprovalDenied {
				ev := f.ev.of(EventDeny)
				if len(ev) != 1 || !strings.Contains(ev[0].Detail, tc.wantDetail) {
					t.Fatalf("deny events %+v, want the reason in one", ev)
				}
			}
		})
	}
}

func TestWebhookSlowAndDown(t *testing.T) {
	release := make(chan struct{})
	f, _ := webhookFixture(t, func(WebhookAsk, int) (int, any) { <-release; return 200, "{}" }, "50ms")
	defer close(release)
	if d := f.settle(context.Background(), "new.example.org", 443); d.Reason != policy.ReasonApprovalDenied || !strings.Contains(d.Detail, "did not answer within") {
		t.Fatalf("slow receiver: got %s (%s)", d.Reason, d.Detail)
	}

	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // down
	approval := fmt.Sprintf("  approval:\n    approvers:\n      webhook: {url: %q, secret: hook-key}\n", url)
	f2 := newFixture(t, approval, func(c *Config) {
		c.Transport, c.Secrets, c.Now = http.DefaultTransport.(*http.Transport).Clone(), keySecrets(hookKey), time.Now
	})
	if d := f2.settle(context.Background(), "new.example.org", 443); d.Reason != policy.ReasonApprovalDenied || !strings.Contains(d.Detail, "unreachable") {
		t.Fatalf("receiver down: got %s (%s)", d.Reason, d.Detail)
	}
	f3 := newFixture(t, approval, nil) // no operator dial path, no broker
	if d := f3.settle(context.Background(), "new.example.org", 443); d.Reason != policy.ReasonApprovalDenied {
		t.Fatalf("no dial path: got %s (%s)", d.Reason, d.Detail)
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
