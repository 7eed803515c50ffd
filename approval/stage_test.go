package approval

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/airlock-dev/airlock/policy"
)

// TestNeverAskable holds one case per class of the issue that is never asked about: each is
// refused at once, with its own reason, and makes no ask event.
func TestNeverAskable(t *testing.T) {
	for _, tc := range []struct {
		name       string
		approval   string
		host       string
		port       int
		method     string
		path       string
		wantReason policy.Reason
	}{
		{"never list", askAll, "x.pastebin.example", 443, "GET", "/", policy.ReasonNoRule},
		{"ip literal", askAll, "198.18.0.10", 443, "GET", "/", policy.ReasonNoRule},
		{"private answer", askAll, "private.example", 443, "GET", "/", policy.ReasonNoRule},
		{"loopback answer", askAll, "loop.example", 443, "GET", "/", policy.ReasonNoRule},
		{"metadata answer", askAll, "meta.example", 443, "GET", "/", policy.ReasonNoRule},
		{"mixed answer", askAll, "mixed.example", 443, "GET", "/", policy.ReasonNoRule},
		{"embedded v4 answer", askAll, "mapped.example", 443, "GET", "/", policy.ReasonNoRule},
		{"does not resolve", askAll, "nxdomain.example", 443, "GET", "/", policy.ReasonNoRule},
		{"sidecar's own address", askAll, "self.example", 443, "GET", "/", policy.ReasonNoRule},
		{"single label", askAll, "intranet", 443, "GET", "/", policy.ReasonNoRule},
		{"search-list expansion", askAll, "pypi.org.ns.svc.cluster.local", 443, "GET", "/", policy.ReasonNoRule},
		{"search-list expansion outside the cluster", askAll, "pypi.org.corp.example", 443, "GET", "/", policy.ReasonNoRule},
		{"cluster domain", askAll, "db.cluster.local", 443, "GET", "/", policy.ReasonNoRule},
		{"svc name", askAll, "db.ns.svc", 443, "GET", "/", policy.ReasonNoRule},
		{"internal name", askAll, "metadata.google.internal", 80, "GET", "/", policy.ReasonNoRule},
		{"port refusal on a named host", askAll, "api.example.com", 8443, "GET", "/v1/x", policy.ReasonPortNotAllowed},
		{"method refusal on a named host", askAll, "api.example.com", 443, "DELETE", "/v1/x", policy.ReasonMethodNotAllowed},
		{"path refusal on a named host", askAll, "api.example.com", 443, "GET", "/admin", policy.ReasonPathNotAllowed},
		{"asking off", "  approval: {mode: \"off\"}\n", "new.example.org", 443, "GET", "/", policy.ReasonNoRule},
		{"no approval section", "", "new.example.org", 443, "GET", "/", policy.ReasonNoRule},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.approval, nil)
			req := policy.Request{Scheme: "https", Host: tc.host, Port: tc.port, Method: tc.method, Path: tc.path}
			pol := f.s.Current()
			d0 := pol.Decide(req)
			_, d := f.s.Settle(context.Background(), pol, req, d0, ViaHTTP)
			if d.Allowed() || d.Reason != tc.wantReason || d.Ask != "" {
				t.Fatalf("got %v %s ask %q (%s), want a %s denial without an ask", d.Verdict, d.Reason, d.Ask, d.Detail, tc.wantReason)
			}
			if n := len(f.ev.of(EventAsk)); n != 0 {
				t.Fatalf("got %d ask events, want none", n)
			}
			if len(f.asked) != 0 {
				t.Fatal("the approvers were asked")
			}
		})
	}
}

// TestFrontingRefusalsNeverReachTheStage: a host_mismatch or smuggling refusal is decided
// before the policy, and such a reason is passed through untouched.
func TestFrontingRefusalsNeverReachTheStage(t *testing.T) {
	f := newFixture(t, askAll, nil)
	for _, r := range []policy.Reason{policy.ReasonHostMismatch, policy.ReasonSelfAddress, policy.ReasonInvalidHost, policy.ReasonInternalAddress} {
		d := policy.Decision{Verdict: policy.Deny, Reason: r, Host: "new.example.org", Port: 443}
		_, got := f.s.Settle(context.Background(), f.s.Current(), policy.Request{Host: "new.example.org", Port: 443}, d, ViaConnect)
		if got.Reason != r || got.Ask != "" {
			t.Errorf("%s: got %s ask %q, want it unchanged", r, got.Reason, got.Ask)
		}
	}
	if n := len(f.ev.of(EventAsk)); n != 0 {
		t.Fatalf("got %d ask events, want none", n)
	}
}

func TestHeldRequestGrantedOnce(t *testing.T) {
	f := newFixture(t, askAll, nil)
	res := f.settleAsync("new.example.org", 443)
	a := <-f.asked
	if a.Host != "new.example.org" || a.Port != 443 || a.Method != "GET" || a.Path != "/x" || a.Via != ViaHTTP {
		t.Fatalf("ask %+v", a)
	}
	// A second miss while the first is held shares its ask.
	res2 := f.settleAsync("new.example.org", 443)
	if j := <-f.joined; j.ID != a.ID || j.Misses != 2 {
		t.Fatalf("second miss joined %+v", j)
	}
	g, err := f.s.Answer(a.ID, Answer{Grant: true, Approver: "uid:0"})
	if err != nil {
		t.Fatal(err)
	}
	if g.Scope != ScopeOnce {
		t.Fatalf("grant without scope: got %s, want once", g.Scope)
	}
	d1, d2 := <-res, <-res2
	allowed := 0
	for _, d := range []policy.Decision{d1, d2} {
		if d.Allowed() {
			allowed++
			if d.Grant != a.ID {
				t.Errorf("allowed by %q, want grant %s", d.Grant, a.ID)
			}
		}
	}
	if allowed != 1 {
		t.Fatalf("a once grant served %d held requests, want exactly 1 (%+v / %+v)", allowed, d1, d2)
	}
	if _, grants := f.s.List(); len(grants) != 0 {
		t.Fatalf("a used once grant is still listed: %+v", grants)
	}
	if len(f.ev.of(EventGrant)) != 1 || len(f.ev.of(EventExpire)) != 1 {
		t.Fatalf("want one grant and one expire (used once) event, got %+v", f.ev.ev)
	}
}

func TestPendingThenRetryServedByLaterAnswer(t *testing.T) {
	f := newFixture(t, "  approval: {hold: 1ms, askTTL: 10m}\n", nil)
	d := f.settle(context.Background(), "new.example.org", 443)
	if d.Reason != policy.ReasonApprovalPending || d.Ask == "" || !strings.Contains(d.Detail, d.Ask) {
		t.Fatalf("got %s ask %q (%s), want approval_pending with the ask id", d.Reason, d.Ask, d.Detail)
	}
	if _, err := f.s.Answer(d.Ask, Answer{Grant: true, Scope: ScopeDuration, For: 10 * time.Minute, Approver: "uid:0"}); err != nil {
		t.Fatal(err)
	}
	if d := f.settle(context.Background(), "new.example.org", 443); !d.Allowed() || d.Grant == "" {
		t.Fatalf("retry after the grant: got %+v", d)
	}
	if d := f.settle(context.Background(), "new.example.org", 80); d.Allowed() {
		t.Fatalf("a grant for port 443 serves port 80: %+v", d)
	}
}

func TestDenied(t *testing.T) {
	f := newFixture(t, askAll, nil)
	res := f.settleAsync("new.example.org", 443)
	a := <-f.asked
	if _, err := f.s.Answer(a.ID, Answer{Approver: "uid:1000"}); err != nil {
		t.Fatal(err)
	}
	d := <-res
	if d.Reason != policy.ReasonApprovalDenied || d.Ask != a.ID {
		t.Fatalf("got %s %q, want approval_denied", d.Reason, d.Ask)
	}
	// The denial stands for askTTL: a retry is denied at once, without a new ask.
	if d := f.settle(context.Background(), "new.example.org", 443); d.Reason != policy.ReasonApprovalDenied {
		t.Fatalf("retry: got %s", d.Reason)
	}
	if _, err := f.s.Answer(a.ID, Answer{Grant: true}); err == nil {
		t.Fatal("an answered ask was answered again")
	}
	ev := f.ev.of(EventDeny)
	if len(ev) != 1 || !strings.Contains(ev[0].Detail, "approver=uid:1000") {
		t.Fatalf("deny events %+v, want one naming the approver", ev)
	}
}

func TestGrantDurationExpiresWithClock(t *testing.T) {
	f := newFixture(t, askAll, nil)
	res := f.settleAsync("new.example.org", 443)
	a := <-f.asked
	if _, err := f.s.Answer(a.ID, Answer{Grant: true, Scope: ScopeDuration, For: 2 * time.Second, Approver: "uid:0"}); err != nil {
		t.Fatal(err)
	}
	if d := <-res; !d.Allowed() {
		t.Fatalf("held request: %+v", d)
	}
	f.clk.Add(time.Second)
	if d := f.settle(context.Background(), "new.example.org", 443); !d.Allowed() {
		t.Fatal("a 2s grant stopped serving after 1s")
	}
	drain(f.change)
	f.clk.Add(time.Second)
	// Before the sweep, Current already leaves the expired grant out.
	if d := f.s.Current().Decide(policy.Request{Host: "new.example.org", Port: 443}); d.Allowed() {
		t.Fatal("an expired grant still allows")
	}
	f.s.Sweep()
	if len(f.change) == 0 {
		t.Fatal("the end of a grant did not tell the wiring (the kernel allow map would keep its addresses)")
	}
	if ev := f.ev.of(EventExpire); len(ev) != 1 || ev[0].RequestID != a.ID {
		t.Fatalf("expire events %+v", ev)
	}
}

func TestGrantScopesChecked(t *testing.T) {
	f := newFixture(t, "  approval: {hold: 1ms, maxGrant: 10m}\n", nil)
	d := f.settle(context.Background(), "new.example.org", 443)
	for _, ans := range []Answer{
		{Grant: true, Scope: ScopeDuration, For: time.Hour},
		{Grant: true, Scope: ScopeDuration},
		{Grant: true, Scope: ScopeSandbox},
		{Grant: true, Scope: "forever"},
	} {
		if _, err := f.s.Answer(d.Ask, ans); err == nil {
			t.Errorf("%+v: granted, want a scope error", ans)
		}
	}
	if _, err := f.s.Answer(d.Ask, Answer{Grant: true, Scope: ScopeDuration, For: 10 * time.Minute}); err != nil {
		t.Fatalf("a grant of exactly maxGrant: %v", err)
	}
}

func TestGrantSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, askAll, func(c *Config) { c.StateDir = dir })
	res := f.settleAsync("new.example.org", 443)
	a := <-f.asked
	if _, err := f.s.Answer(a.ID, Answer{Grant: true, Scope: ScopeSandbox, Approver: "uid:0"}); err != nil {
		t.Fatal(err)
	}
	<-res
	fi, err := os.Stat(filepath.Join(dir, GrantsFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("grants file: %v %v, want mode 0600", err, fi)
	}
	f2 := newFixture(t, askAll, func(c *Config) { c.StateDir = dir })
	if err := f2.s.Load(); err != nil {
		t.Fatal(err)
	}
	if d := f2.settle(context.Background(), "new.example.org", 443); !d.Allowed() || d.Grant != a.ID {
		t.Fatalf("after a restart: got %+v, want allowed by grant %s", d, a.ID)
	}
	if len(f2.asked) != 0 {
		t.Fatal("asked again after a restart")
	}
}

func TestGrantExpiredWhileDownEndsOnLoad(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, askAll, func(c *Config) { c.StateDir = dir })
	res := f.settleAsync("new.example.org", 443)
	a := <-f.asked
	if _, err := f.s.Answer(a.ID, Answer{Grant: true, Scope: ScopeDuration, For: time.Minute}); err != nil {
		t.Fatal(err)
	}
	<-res
	f2 := newFixture(t, askAll, func(c *Config) { c.StateDir = dir })
	f2.clk.Add(2 * time.Minute)
	if err := f2.s.Load(); err != nil {
		t.Fatal(err)
	}
	if _, grants := f2.s.List(); len(grants) != 0 {
		t.Fatalf("grants %+v, want the expired one gone", grants)
	}
	if ev := f2.ev.of(EventExpire); len(ev) != 1 {
		t.Fatalf("expire events %+v", ev)
	}
}

func TestRevoke(t *testing.T) {
	f := newFixture(t, askAll, nil)
	res := f.settleAsync("new.example.org", 443)
	a := <-f.asked
	if _, err := f.s.Answer(a.ID, Answer{Grant: true, Scope: ScopeSandbox, Approver: "uid:0"}); err != nil {
		t.Fatal(err)
	}
	<-res
	drain(f.change)
	if err := f.s.Revoke(a.ID, "uid:0"); err != nil {
		t.Fatal(err)
	}
	if len(f.change) == 0 {
		t.Fatal("a revocation did not tell the wiring")
	}
	if d := f.s.Current().Decide(policy.Request{Host: "new.example.org", Port: 443}); d.Allowed() {
		t.Fatal("a revoked grant still allows")
	}
	if err := f.s.Revoke(a.ID, "uid:0"); err == nil {
		t.Fatal("revoked twice")
	}
	if ev := f.ev.of(EventRevoke); len(ev) != 1 || !strings.Contains(ev[0].Detail, "revoked by uid:0") {
		t.Fatalf("revoke events %+v", ev)
	}
}

func TestReloadEndsGrants(t *testing.T) {
	for _, tc := range []struct {
		name, approval, extraRule string
		ended                     string // a host whose grant the reload ends
	}{
		{"host under never", "  approval: {sandboxGrants: true, never: [new.example.org]}\n", "", "new.example.org"},
		{"asking off", "  approval: {mode: \"off\"}\n", "", "other.example.org"},
		{"approval removed", "", "", "other.example.org"},
		{"rule names the host", askAll, "    - name: now\n      hosts: [new.example.org]\n", "new.example.org"},
		{"maxGrant shortened", "  approval: {maxGrant: 10m, sandboxGrants: true}\n", "", "new.example.org"},
		{"sandbox grants off", "  approval: {maxGrant: 1h}\n", "", "other.example.org"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, askAll, nil)
			ids := map[Scope]string{}
			for _, sc := range []struct {
				host  string
				scope Scope
				d     time.Duration
			}{{"new.example.org", ScopeDuration, 30 * time.Minute}, {"other.example.org", ScopeSandbox, 0}} {
				res := f.settleAsync(sc.host, 443)
				a := <-f.asked
				if _, err := f.s.Answer(a.ID, Answer{Grant: true, Scope: sc.scope, For: sc.d}); err != nil {
					t.Fatal(err)
				}
				<-res
				ids[sc.scope] = a.ID
			}
			doc := tc.approval
			p := mustPolicy(t, doc)
			if tc.extraRule != "" {
				var err error
				p, err = policy.Parse("asks.yaml", []byte(strings.Replace(policyDoc(doc), "  secrets:", tc.extraRule+"  secrets:", 1)))
				if err != nil {
					t.Fatal(err)
				}
			}
			f.src.set(p)
			n := f.s.PolicyChanged(p)
			if n == 0 {
				t.Fatal("the reload ended no grant")
			}
			if d := f.s.Current().Decide(policy.Request{Host: tc.ended, Port: 443}); d.Allowed() && d.Grant != "" {
				t.Fatalf("after the reload, a grant still allows: %+v", d)
			}
			if len(f.ev.of(EventRevoke)) != n {
				t.Fatalf("got %d revoke events for %d ended grants", len(f.ev.of(EventRevoke)), n)
			}
		})
	}
}

func drain(ch chan struct{}) {
	for len(ch) > 0 {
		<-ch
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("internal/poll.runtime_pollWait")); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func TestOnceGrantUnusedExpires(t *testing.T) {
	f := newFixture(t, "  approval: {hold: 1ms, askTTL: 10m}\n", nil)
	d := f.settle(context.Background(), "new.example.org", 443)
	g, err := f.s.Answer(d.Ask, Answer{Grant: true, Approver: "uid:0"})
	if err != nil || g.Until.IsZero() {
		t.Fatalf("once grant %+v, %v: want an end askTTL away", g, err)
	}
	f.clk.Add(10 * time.Minute)
	f.s.Sweep()
	if _, grants := f.s.List(); len(grants) != 0 {
		t.Fatalf("an unused once grant outlived askTTL: %+v", grants)
	}
	if ev := f.ev.of(EventExpire); len(ev) != 1 {
		t.Fatalf("expire events %+v", ev)
	}
}

// TestHeldRequestsBounded: with MaxWaiting requests held, a miss on an open ask is answered
// at once instead of waiting.
func TestHeldRequestsBounded(t *testing.T) {
	f := newFixture(t, askAll, func(c *Config) { c.MaxWaiting = 1 })
	f.s.waiting <- struct{}{} // the one slot is taken
	done := make(chan policy.Decision, 1)
	go func() { done <- f.settle(context.Background(), "new.example.org", 443) }()
	d := <-done // with hold 1m, this returns only because it did not wait
	if d.Reason != policy.ReasonApprovalPending || d.Ask == "" {
		t.Fatalf("got %s (%s), want approval_pending at once", d.Reason, d.Detail)
	}
	<-f.s.waiting
}
