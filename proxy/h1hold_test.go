package proxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/policy"
)

// holdingApprovals holds every plain miss until its context ends or release is closed, and
// reports each hold's context and what ended it.
type holdingApprovals struct {
	held    chan context.Context
	ended   chan string
	release chan struct{}
}

func (a *holdingApprovals) Settle(ctx context.Context, pol *policy.Policy, req policy.Request, d policy.Decision, via string) (*policy.Policy, policy.Decision) {
	if d.Reason != policy.ReasonNoRule {
		return pol, d
	}
	a.held <- ctx
	select {
	case <-ctx.Done():
		a.ended <- "client gone"
	case <-a.release:
		a.ended <- "released"
	}
	return pol, policy.Decision{Reason: policy.ReasonApprovalPending, Host: req.Host, Port: req.Port}
}

// TestHeldRequestEndsWithItsClient: a request held for an approval ends when its client goes,
// on the strict path as on net/http's (before, the strict path held it until the hold's end
// and could still send it upstream on a late grant); a pipelined request that arrives during
// the hold is served after it, not lost to the watch.
func TestHeldRequestEndsWithItsClient(t *testing.T) {
	pol := mustPolicy(t, policyDoc("h1", "enforce", h1Egress))
	for _, fast := range []bool{true, false} {
		a := &holdingApprovals{held: make(chan context.Context, 4), ended: make(chan string, 4), release: make(chan struct{})}
		h := newHarness(t, pol, func(c *Config) { c.Approvals = a; c.DisableHTTP1FastPath = !fast })
		plain := newRawUpstream(t, h, addrPlain, 80, nil)
		name := map[bool]string{true: "strict", false: "net/http"}[fast]

		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, "GET http://unlisted.test/x HTTP/1.1\r\nHost: unlisted.test\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		<-a.held
		c.Close()
		select {
		case why := <-a.ended:
			if why != "client gone" {
				t.Errorf("%s: the hold ended %s, want by its client going", name, why)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s: the held request's context did not end within 10s of its client closing", name)
		}

		c, err = net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "GET http://unlisted.test/y HTTP/1.1\r\nHost: unlisted.test\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		<-a.held
		if _, err := io.WriteString(c, "GET http://plain.test/ok/next HTTP/1.1\r\nHost: plain.test\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		// The pipelined bytes are on the connection before the hold ends: read them back here
		// only through the proxy's answers.
		close(a.release)
		br := bufio.NewReader(c)
		first, err := http.ReadResponse(br, nil)
		if err != nil || first.StatusCode != http.StatusForbidden {
			t.Fatalf("%s: held request answered %v, %v; want 403 approval_pending", name, first, err)
		}
		_, _ = io.Copy(io.Discard, first.Body)
		second, err := http.ReadResponse(br, nil)
		if err != nil || second.StatusCode != http.StatusOK {
			t.Fatalf("%s: pipelined request after the hold: %v, %v; want 200", name, second, err)
		}
		body, _ := io.ReadAll(second.Body)
		if why := <-a.ended; why != "released" {
			t.Errorf("%s: the hold ended %s while its client stayed", name, why)
		}
		if got := plain.requests(); len(got) != 1 || !strings.Contains(got[0], "/ok/next") {
			t.Errorf("%s: upstream got %q, want the pipelined request only; body %q", name, got, body)
		}
	}
}

// TestH1BodyAfterIdleDeadline: the strict path leaves a whole head's idle deadline on the
// client connection (one deadline call per request); it must be cleared before the body is
// read, so a body that comes later than IdleTimeout after its head is still forwarded, on
// both paths, and the connection still serves the next request.
func TestH1BodyAfterIdleDeadline(t *testing.T) {
	const idle = 150 * time.Millisecond
	pol := mustPolicy(t, policyDoc("h1", "enforce", h1Egress))
	for _, fast := range []bool{false, true} {
		name := map[bool]string{true: "strict", false: "net/http"}[fast]
		h := newHarness(t, pol, func(c *Config) { c.IdleTimeout = idle; c.DisableHTTP1FastPath = !fast })
		plain := newRawUpstream(t, h, addrPlain, 80, nil)
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "POST http://plain.test/ok/late HTTP/1.1\r\nHost: plain.test\r\nContent-Length: 5\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * idle) // not synchronisation: the body is meant to come after the deadline
		if _, err := io.WriteString(c, "hello"+"GET http://plain.test/ok/next HTTP/1.1\r\nHost: plain.test\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		for _, path := range []string{"/ok/late", "/ok/next"} {
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("%s: %s answered %v, %v; want 200", name, path, resp, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
		}
		if got := plain.requests(); len(got) != 2 || !strings.HasSuffix(got[0], "\r\n\r\nhello") {
			t.Errorf("%s: upstream got %q, want the late body forwarded, then the next request", name, got)
		}
	}
}
