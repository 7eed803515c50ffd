//go:build linux

package testnet_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/test/testnet"
)

func TestSumMetric(t *testing.T) {
	const expo = `# HELP airlock_proxy_requests_total Requests.
# TYPE airlock_proxy_requests_total counter
airlock_proxy_requests_total{decision="allow",kind="http"} 3
airlock_proxy_requests_total{decision="deny",kind="connect"} 2.5
airlock_proxy_requests_total_other 100
airlock_up 1
`
	cases := []struct {
		name  string
		found bool
		sum   float64
	}{
		{"airlock_proxy_requests_total", true, 5.5},
		{"airlock_up", true, 1},
		{"airlock_proxy_requests", false, 0},
		{"missing", false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sum, found := testnet.SumMetric(expo, tc.name)
			if sum != tc.sum || found != tc.found {
				t.Errorf("got %v %t, want %v %t", sum, found, tc.sum, tc.found)
			}
		})
	}
}

func TestParseAuditEvent(t *testing.T) {
	cases := []struct {
		name string
		line string
		ok   bool
		want testnet.AuditEvent
	}{
		{"audit line", `{"kind":"http","decision":"deny","rule":"","reason":"no_rule","status":403,"would_deny":false,"msg":"audit"}`,
			true, testnet.AuditEvent{Kind: "http", Decision: "deny", Reason: "no_rule", Status: 403}},
		{"operational log", `{"level":"info","msg":"airlock listening","policy":"x"}`, false, testnet.AuditEvent{}},
		{"not json", `airlock: listening`, false, testnet.AuditEvent{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, ok := testnet.ParseAuditEvent(tc.line)
			if ok != tc.ok {
				t.Fatalf("ok: got %t, want %t", ok, tc.ok)
			}
			if e.Kind != tc.want.Kind || e.Decision != tc.want.Decision || e.Reason != tc.want.Reason || e.Status != tc.want.Status {
				t.Errorf("got %+v, want %+v", e, tc.want)
			}
			if ok && e.Line != tc.line {
				t.Errorf("Line: got %q, want %q", e.Line, tc.line)
			}
		})
	}
}

func TestLinesWait(t *testing.T) {
	l := testnet.NewLines()
	fmt.Fprint(l, "one\ntw")
	if got := l.All(); len(got) != 1 || got[0] != "one" {
		t.Fatalf("All: got %q, want [one]", got)
	}
	found := make(chan string, 1)
	go func() {
		line, _, err := l.Wait(context.Background(), 1, func(s string) bool { return strings.HasPrefix(s, "two") })
		if err != nil {
			line = err.Error()
		}
		found <- line
	}()
	fmt.Fprint(l, "o\nthree\n")
	if got := <-found; got != "two" {
		t.Errorf("Wait: got %q, want %q", got, "two")
	}

	// A line before from is not seen; the wait ends with the context.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, _, err := l.Wait(ctx, 1, func(s string) bool { return s == "one" }); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait for a line before from: got %v, want deadline exceeded", err)
	}
}
