package learn

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// Change is what replaying one recorded event under a candidate found.
type Change string

// The changes Replay reports.
const (
	Unchanged   Change = "unchanged"
	AllowToDeny Change = "allow-to-deny" // went through when recorded; the candidate denies it
	DenyToAllow Change = "deny-to-allow" // denied when recorded; the candidate allows it
	Undecidable Change = "undecidable"   // the recording lacks what the candidate decides on
)

// Recorded is one event of a trail and where it was read (file:line).
type Recorded struct {
	Event  audit.Event
	Source string
}

// Replayed is one recorded event decided again.
type Replayed struct {
	Source      string    `json:"source"`
	Time        time.Time `json:"time"`
	Kind        string    `json:"kind"`
	Destination string    `json:"destination"`
	Method      string    `json:"method,omitempty"`
	Path        string    `json:"path,omitempty"`
	Change      Change    `json:"change"`
	// Before is "allow" (allowed or reported when recorded: the request went through) or
	// "deny"; BeforeRule and BeforeReason are the recorded rule and reason.
	Before       string `json:"before"`
	BeforeRule   string `json:"before_rule"`
	BeforeReason string `json:"before_reason"`
	// After is the candidate's verdict as enforce mode would apply it ("" when undecidable),
	// with its rule, reason and detail (for an undecidable event, why).
	After       string `json:"after,omitempty"`
	AfterRule   string `json:"after_rule"`
	AfterReason string `json:"after_reason,omitempty"`
	Detail      string `json:"detail"`
}

// Group counts the events of one change for one rule and destination.
type Group struct {
	Change      Change `json:"change"`
	Rule        string `json:"rule"` // the candidate's rule ("" for none)
	Destination string `json:"destination"`
	Reason      string `json:"reason"` // the candidate's reason, or why undecidable
	Count       int    `json:"count"`
}

// Report is the result of Replay.
type Report struct {
	// Policy is the candidate's name.
	Policy string `json:"policy"`
	// Events counts every event read; Replayed those decided again (http, connect, dns).
	Events   int `json:"events"`
	Replayed int `json:"replayed"`
	// Counts holds the number of replayed events per change.
	Counts map[Change]int `json:"counts"`
	// Skipped counts the events of other kinds (llm, credential, policy) by kind.
	Skipped map[string]int `json:"skipped"`
	// Groups counts the changed and undecidable events per change, rule and destination.
	Groups []Group `json:"groups"`
	// Changes lists every changed or undecidable event, in trail order.
	Changes []Replayed `json:"changes"`
}

// ruleDecision reports whether a recorded reason is one the policy's decision function gives
// (the catalogue's policy reasons). A recorded deny with any other reason (a Host/SNI
// mismatch, a misplaced credential) was not a rule decision and stays denied under any
// candidate.
func ruleDecision(reason string) bool {
	info, ok := policy.Reason(reason).Info()
	return ok && info.Emitter == policy.EmitPolicy
}

// Replay decides every recorded http, connect and dns event again under cand, as enforce
// mode would (a candidate in report mode is replayed as if it enforced), and reports what
// changed. A recorded "report" decision counts as allowed: the request went through.
//
//   - http: the method, host, port and path as recorded; an allowed request whose dialled
//     address was recorded is checked against it too (CheckAddr).
//   - connect: the connection-level decision. A tunnel that was not intercepted when
//     recorded (no http event from the same client connection) is undecidable when the
//     candidate allows it but would intercept it: the candidate then decides each request by
//     method and path, and the recording never saw them.
//   - dns: by name only: allowed when a rule names the host (Policy.HostPorts).
func Replay(events []Recorded, cand *policy.Policy) Report {
	rep := Report{Policy: cand.Name(), Counts: map[Change]int{}, Skipped: map[string]int{}}
	seenInside := map[string]bool{}
	for _, r := range events {
		if e := r.Event; e.Kind == audit.KindHTTP && e.Client != "" {
			seenInside[e.Client+" "+e.Destination] = true
		}
	}
	groups := map[Group]int{}
	for _, r := range events {
		rep.Events++
		e := r.Event
		switch e.Kind {
		case audit.KindHTTP, audit.KindConnect, audit.KindDNS:
		default:
			rep.Skipped[string(e.Kind)]++
			continue
		}
		rep.Replayed++
		x := replayOne(r, cand, seenInside[e.Client+" "+e.Destination])
		rep.Counts[x.Change]++
		if x.Change == Unchanged {
			continue
		}
		rep.Changes = append(rep.Changes, x)
		reason := x.AfterReason
		if x.Change == Undecidable {
			reason = x.Detail
		}
		groups[Group{Change: x.Change, Rule: x.AfterRule, Destination: x.Destination, Reason: reason}]++
	}
	for _, g := range slices.SortedFunc(maps.Keys(groups), compareGroups) {
		g.Count = groups[g]
		rep.Groups = append(rep.Groups, g)
	}
	return rep
}

func compareGroups(a, b Group) int {
	for _, c := range [][2]string{{string(a.Change), string(b.Change)}, {a.Rule, b.Rule},
		{a.Destination, b.Destination}, {a.Reason, b.Reason}} {
		if c[0] != c[1] {
			if c[0] < c[1] {
				return -1
			}
			return 1
		}
	}
	return 0
}

// replayOne decides one event again. intercepted says whether requests from the event's
// client connection were recorded (for a connect event: the tunnel was intercepted).
func replayOne(r Recorded, cand *policy.Policy, intercepted bool) Replayed {
	e := r.Event
	x := Replayed{Source: r.Source, Time: e.Time, Kind: string(e.Kind), Destination: e.Destination,
		Method: e.Method, Path: e.Path, Before: "allow", BeforeRule: e.Rule, BeforeReason: e.Reason}
	if e.Decision == audit.DecisionDeny {
		x.Before = "deny"
		if !ruleDecision(e.Reason) {
			x.After, x.Change, x.Detail = "deny", Unchanged, "denied for "+e.Reason+", which is not a rule decision"
			return x
		}
	}
	var d policy.Decision
	switch e.Kind {
	case audit.KindDNS:
		d = decideName(cand, e.Destination)
	default:
		host, port, err := splitDestination(e.Destination)
		if err != nil {
			x.Change, x.Detail = Undecidable, err.Error()
			return x
		}
		d = cand.Decide(policy.Request{Host: host, Port: port, Method: e.Method, Path: e.Path})
		if d.Allowed() && !d.WouldDeny && e.Kind == audit.KindConnect && d.Intercept && !intercepted {
			x.Change, x.AfterRule = Undecidable, d.Rule
			x.Detail = "the tunnel was not intercepted when recorded; the candidate would intercept it and decide each request by method and path, which the recording never saw"
			return x
		}
		if ap, err := netip.ParseAddrPort(e.Addr); err == nil && d.Allowed() && !d.WouldDeny {
			if a := cand.CheckAddr(host, port, ap.Addr()); !a.Allowed() || a.WouldDeny {
				d = a
			}
		}
	}
	x.After, x.AfterRule, x.AfterReason, x.Detail = "allow", d.Rule, string(d.Reason), d.Detail
	if !d.Allowed() || d.WouldDeny {
		x.After = "deny"
	}
	switch {
	case x.Before == x.After:
		x.Change = Unchanged
	case x.Before == "allow":
		x.Change = AllowToDeny
	default:
		x.Change = DenyToAllow
	}
	return x
}

// decideName is the DNS filter's question, by name only: does any rule name the host?
func decideName(cand *policy.Policy, name string) policy.Decision {
	h, err := policy.NormalizeHost(name)
	if err != nil {
		return policy.Decision{Reason: policy.ReasonInvalidHost, Detail: err.Error()}
	}
	if ports := cand.HostPorts(h.Name); len(ports) > 0 {
		return policy.Decision{Verdict: policy.Allow, Reason: policy.ReasonRuleMatched, Host: h.Name,
			Detail: fmt.Sprintf("a rule names %s (ports %v)", h.Name, ports)}
	}
	return policy.Decision{Reason: policy.ReasonNoRule, Host: h.Name,
		Detail: fmt.Sprintf("host %q is not named by any egress rule", h.Name)}
}

// splitDestination splits a recorded host:port.
func splitDestination(dest string) (string, int, error) {
	host, ps, err := net.SplitHostPort(dest)
	if err != nil {
		return "", 0, fmt.Errorf("destination %q is not host:port", dest)
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("destination %q has no valid port", dest)
	}
	return host, port, nil
}
