package learn

import (
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// FuzzLearn feeds Learn requests with hostile hosts, methods and paths (they come from the
// sandbox): whatever they hold, the candidate loads (Learn checks it and fails otherwise),
// and replaying the requests under it denies none that it learned a rule for.
func FuzzLearn(f *testing.F) {
	f.Add("api.test:443", "GET", "/repos/1234/x")
	f.Add("api.test:80", "POST", "/a%20b/c*d/\u2028/%ff")
	f.Add("xn--bcher-kva.test:8443", "PUT", "/\"quoted\"/#/\n")
	f.Add("[2001:db8::1]:443", "DELETE", "/v1.2/**/x")
	f.Add("198.18.0.1:80", "PROPFIND", "/")
	f.Fuzz(func(t *testing.T, dest, method, path string) {
		if !validMethod(method) {
			t.Skip("the proxy's HTTP parser refuses a request with this method before it is decided")
		}
		at := time.Date(2026, 11, 23, 20, 0, 0, 0, time.UTC)
		evs := []Recorded{
			{Event: audit.Event{Time: at, Kind: audit.KindHTTP, Decision: audit.DecisionReport, Reason: "no_rule",
				Destination: dest, Method: method, Path: path, Client: "127.0.0.1:1"}},
			{Event: audit.Event{Time: at, Kind: audit.KindConnect, Decision: audit.DecisionReport, Reason: "no_rule",
				Destination: dest, Client: "127.0.0.1:1"}},
		}
		out, err := Learn(evs, Options{Filename: "fuzz.yaml"})
		if err != nil {
			t.Fatalf("learn: %v", err)
		}
		cand, err := policy.Parse("fuzz.yaml", out)
		if err != nil {
			t.Fatalf("candidate does not load: %v\n%s", err, out)
		}
		if len(cand.Rules()) == 0 {
			return // left out
		}
		rep := Replay(evs, cand)
		if rep.Counts[AllowToDeny] > 0 {
			t.Errorf("replaying the learned requests denies some: %+v\n%s", rep.Changes, out)
		}
	})
}

// validMethod reports whether m is an HTTP token (RFC 9110 §5.6.2), as a parsed request's
// method is.
func validMethod(m string) bool {
	return m != "" && !strings.ContainsFunc(m, func(r rune) bool {
		return r > 0x7e || r <= ' ' || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r)
	})
}
