package learn

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/airlock-dev/airlock/policy"
)

// knownMethods are the methods an L7 rule may name, in the order Learn lists them.
var knownMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"}

// pattern is one learned path pattern and the requests behind it.
type pattern struct {
	path  string
	stats stats
}

// httpEntry is one learned L7 rule: methods that share the same patterns.
type httpEntry struct {
	methods  []string
	patterns []pattern
}

// learnedRule is one rule of the candidate.
type learnedRule struct {
	name       string
	t          *hostTraffic
	http       []httpEntry        // nil: every method and path
	noL7       string             // why http is nil, for the comment
	extra      string             // a note on how the rule was fitted under the parent
	drop       string             // why the host cannot be a rule at all ("" when it can)
	parentHTTP []policy.HTTPMatch // the parent rule's L7 rules, copied when the host's were not learned
}

// ports returns the rule's ports, sorted.
func (r *learnedRule) ports() []int {
	return slices.Sorted(maps.Keys(r.t.ports))
}

// buildRules makes one rule per host, in host order.
func (l *learner) buildRules() []*learnedRule {
	names := map[string]bool{}
	var out []*learnedRule
	for _, host := range slices.Sorted(maps.Keys(l.hosts)) {
		t := l.hosts[host]
		r := &learnedRule{name: ruleName(t, names), t: t}
		r.http, r.noL7, r.drop = learnL7(t)
		out = append(out, r)
	}
	return out
}

// ruleName derives a unique rule name from the host: rule names allow letters, digits,
// ".", "_" and "-", so an IPv6 literal's ":" becomes "-".
func ruleName(t *hostTraffic, taken map[string]bool) string {
	base := t.host.Name
	if t.host.IsIP() {
		base = "ip-" + strings.ReplaceAll(base, ":", "-")
	}
	name := base
	for i := 2; taken[name]; i++ {
		name = fmt.Sprintf("%s-%d", base, i)
	}
	taken[name] = true
	return name
}

// learnL7 returns the host's L7 rules, or nil and why there are none; or, when requests
// were seen but none can be named, why the host cannot be a rule (drop). It never widens:
// requests left out (expressible) and tunnels whose requests were not seen are denied by
// the rules learned from the others, and only a host whose traffic was tunnels alone gets
// no L7 rules (the connections are all that was seen of it).
func learnL7(t *hostTraffic) (http []httpEntry, noL7, drop string) {
	switch {
	case len(t.requests) == 0 && t.leftOut > 0:
		return nil, "", fmt.Sprintf("none of its %d requests can be named by an L7 rule (each is listed), "+
			"and a rule without L7 rules would allow every method and path", t.leftOut)
	case len(t.requests) == 0:
		return nil, "no request was seen inside its connections (tunnels not intercepted, or refused)", ""
	}
	bySet := map[string]*httpEntry{} // key: the method's patterns joined
	var order []string
	for _, m := range knownMethods {
		byPath := t.requests[m]
		if byPath == nil {
			continue
		}
		pats := methodPatterns(byPath)
		key := ""
		for _, p := range pats {
			key += p.path + "\x00"
		}
		if e := bySet[key]; e != nil {
			e.methods = append(e.methods, m)
			for i := range e.patterns {
				e.patterns[i].stats.merge(pats[i].stats)
			}
			continue
		}
		bySet[key] = &httpEntry{methods: []string{m}, patterns: pats}
		order = append(order, key)
	}
	out := make([]httpEntry, len(order))
	for i, k := range order {
		out[i] = *bySet[k]
	}
	return out, "", ""
}

// methodPatterns collapses the paths seen with one method into sorted patterns.
func methodPatterns(byPath map[string]*stats) []pattern {
	collapsed := map[string]string{}
	for p := range byPath {
		collapsed[p] = CollapsePath(p)
	}
	merged := mergeSiblings(uniqueValues(collapsed))
	agg := map[string]*stats{}
	for p, s := range byPath {
		final := merged[collapsed[p]]
		if agg[final] == nil {
			agg[final] = &stats{}
		}
		agg[final].merge(*s)
	}
	out := make([]pattern, 0, len(agg))
	for _, p := range slices.Sorted(maps.Keys(agg)) {
		out = append(out, pattern{path: p, stats: *agg[p]})
	}
	return out
}

// literalL7 is the host's L7 rules without collapsing: every path as seen, for a parent
// whose patterns do not cover a collapsed one.
func literalL7(t *hostTraffic) []httpEntry {
	var out []httpEntry
	for _, m := range knownMethods {
		byPath := t.requests[m]
		if byPath == nil {
			continue
		}
		e := httpEntry{methods: []string{m}}
		for _, p := range slices.Sorted(maps.Keys(byPath)) {
			if strings.Contains(p, "*") {
				return nil // a literal "*" would be read as a glob
			}
			e.patterns = append(e.patterns, pattern{path: p, stats: *byPath[p]})
		}
		out = append(out, e)
	}
	return out
}
