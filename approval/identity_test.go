package approval

import (
	"context"
	"testing"

	"github.com/airlock-dev/airlock/policy"
)

// TestGrantServesItsIdentityOnly: an ask records the identity whose request missed, and its
// grant allows that identity's requests only: never another identity's, nor the sandbox's own.
func TestGrantServesItsIdentityOnly(t *testing.T) {
	f := newFixture(t, askAll+"  identities:\n    reviewer: {}\n    author: {}\n", nil)
	req := policy.Request{Scheme: "https", Host: "new.example.org", Port: 443, Method: "GET", Path: "/x"}
	as := func(name string) *policy.Policy {
		p, ok := f.s.Current().Identity(name)
		if !ok {
			t.Fatalf("no identity %s", name)
		}
		return p
	}
	res := make(chan policy.Decision, 1)
	go func() {
		pol := as("author")
		_, d := f.s.Settle(context.Background(), pol, req, pol.Decide(req), ViaHTTP)
		res <- d
	}()
	a := <-f.asked
	if a.Identity != "author" {
		t.Fatalf("ask %+v, want identity author", a)
	}
	g, err := f.s.Answer(a.ID, Answer{Grant: true, Scope: ScopeSandbox, Approver: "uid:0"})
	if err != nil {
		t.Fatal(err)
	}
	if g.Identity != "author" {
		t.Errorf("grant %+v, want identity author", g)
	}
	if d := <-res; !d.Allowed() || d.Grant != a.ID || d.Identity != "author" {
		t.Fatalf("author's held request: %+v, want allowed by grant %s", d, a.ID)
	}
	if d := as("author").Decide(req); !d.Allowed() {
		t.Errorf("author's next request: %s, want allowed by its grant", d.Reason)
	}
	for _, pol := range []*policy.Policy{as("reviewer"), f.s.Current()} {
		if d := pol.Decide(req); d.Allowed() {
			t.Errorf("identity %q allowed by author's grant", pol.IdentityName())
		}
	}
	// reviewer's miss is an ask of its own, not author's answered one.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		pol := as("reviewer")
		f.s.Settle(ctx, pol, req, pol.Decide(req), ViaHTTP)
	}()
	if b := <-f.asked; b.Identity != "reviewer" || b.ID == a.ID {
		t.Errorf("reviewer's miss: ask %+v, want a new ask for reviewer", b)
	}
	cancel()
	<-done
}

// TestNameGrantServesItsIdentityOnly: a DNS query's ask is for the identity that asked, and
// the held query is decided, once granted, by that identity's policy with its new grant.
func TestNameGrantServesItsIdentityOnly(t *testing.T) {
	f := newFixture(t, askAll+"  identities:\n    reviewer: {}\n    author: {}\n", nil)
	author, ok := f.s.Current().Identity("author")
	if !ok {
		t.Fatal("no identity author")
	}
	type settled struct {
		pol *policy.Policy
		nd  policy.NameDecision
	}
	res := make(chan settled, 1)
	go func() {
		pol, nd := f.s.SettleName(context.Background(), author, author.DecideName("new.example.org"))
		res <- settled{pol, nd}
	}()
	a := <-f.asked
	if a.Identity != "author" || a.Via != ViaDNS {
		t.Fatalf("ask %+v, want a DNS ask for identity author", a)
	}
	if _, err := f.s.Answer(a.ID, Answer{Grant: true, Scope: ScopeSandbox, Approver: "uid:0"}); err != nil {
		t.Fatal(err)
	}
	got := <-res
	if !got.nd.Allowed() || got.pol.IdentityName() != "author" {
		t.Fatalf("author's held query: %+v under identity %q, want allowed as author", got.nd, got.pol.IdentityName())
	}
	for _, name := range []string{"reviewer", ""} {
		pol := f.s.Current()
		if name != "" {
			pol, _ = pol.Identity(name)
		}
		if nd := pol.DecideName("new.example.org"); nd.Allowed() {
			t.Errorf("identity %q may resolve by author's grant", name)
		}
	}
}
