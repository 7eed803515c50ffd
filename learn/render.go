package learn

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// candidate builds the rules, fits each under the parent, and renders the policy.
func (l *learner) candidate() ([]byte, error) {
	var rules []*learnedRule
	for _, r := range l.buildRules() {
		if r.drop != "" {
			l.leftOut[r.t.host.Name+"\x00"+r.drop] = &note{key: r.t.host.Name, why: r.drop, stats: r.t.all}
			continue
		}
		if r.t.passthrough > 0 && r.http != nil {
			r.extra = fmt.Sprintf("%d of %d tunnels were not intercepted, so their requests were not seen: "+
				"these rules decide them", r.t.passthrough, r.t.tunnels)
		}
		if l.fit(r) {
			rules = append(rules, r)
		}
	}
	if l.opt.Parent != nil && len(rules) == 0 {
		return nil, fmt.Errorf("learn: %w: a child without rules would inherit all of %s's", ErrNothingLearned, l.opt.ParentRef)
	}
	out := l.render(rules)
	if _, err := policy.Parse(l.opt.Filename, out); err != nil {
		return nil, fmt.Errorf("learn: the candidate does not load (a bug): %w", err)
	}
	l.report()
	return out, nil
}

// report writes what was left out to Options.Report.
func (l *learner) report() {
	if l.opt.Report == nil {
		return
	}
	for _, notes := range []map[string]*note{l.leftOut, l.parentNo} {
		for _, k := range slices.Sorted(maps.Keys(notes)) {
			n := notes[k]
			fmt.Fprintf(l.opt.Report, "left out: %s (%s): %s\n", comment(n.key), n.stats, comment(n.why))
		}
	}
}

// fit checks that r loads on its own (under the parent, when there is one). When it does
// not, it tries the paths as seen instead of collapsed patterns, then the parent rule's own
// L7 rules; a rule that still does not load becomes a comment and fit returns false.
func (l *learner) fit(r *learnedRule) bool {
	var first error
	try := func() bool {
		_, err := policy.Parse(l.opt.Filename, l.render([]*learnedRule{r}))
		if first == nil {
			first = err
		}
		return err == nil
	}
	if try() {
		return true
	}
	if r.http != nil {
		if lit := literalL7(r.t); lit != nil {
			collapsed := r.http
			r.http, r.extra = lit, "paths as seen: the parent does not allow the collapsed patterns"
			if try() {
				return true
			}
			r.http = collapsed
		}
	}
	if l.opt.Parent != nil && r.t.parentRule != "" {
		if pr, ok := l.opt.Parent.Rule(r.t.parentRule); ok && len(pr.HTTP) > 0 {
			saved, savedNoL7 := r.http, r.noL7
			r.http, r.noL7 = nil, ""
			r.extra = fmt.Sprintf("L7 rules copied from parent rule %q: %s", pr.Name, savedNoL7)
			r.parentHTTP = pr.HTTP
			if try() {
				return true
			}
			r.http, r.noL7, r.parentHTTP = saved, savedNoL7, nil
		}
	}
	msg := strings.ReplaceAll(strings.TrimSpace(first.Error()), "\n", "; ")
	if l.opt.Parent == nil {
		l.noteOut(l.leftOut, r.t.host.Name, "no rule learned from it loads (a bug): "+msg, audit.Event{})
		return false
	}
	l.noteOut(l.parentNo, r.t.host.Name, "no rule fits under the parent: "+msg, audit.Event{})
	return false
}

// render writes the candidate as YAML with comments.
func (l *learner) render(rules []*learnedRule) []byte {
	var b bytes.Buffer
	l.header(&b)
	fmt.Fprintf(&b, "apiVersion: %s\nkind: %s\nmetadata:\n  name: %s\nspec:\n  mode: enforce\n",
		policy.APIVersion, policy.Kind, quote(l.opt.Name))
	if l.opt.Parent != nil {
		fmt.Fprintf(&b, "  extends: [%s]\n", quote(l.opt.ParentRef))
	}
	if len(rules) == 0 {
		b.WriteString("  egress: []\n")
	} else {
		b.WriteString("  egress:\n")
	}
	for _, r := range rules {
		writeRule(&b, r)
	}
	l.footer(&b)
	return b.Bytes()
}

func (l *learner) header(b *bytes.Buffer) {
	b.WriteString("# Candidate policy written by `airlock policy learn`")
	if len(l.opt.Sources) > 0 {
		fmt.Fprintf(b, " from %s", strings.Join(l.opt.Sources, ", "))
	}
	fmt.Fprintf(b, "\n# (%s).\n", l.all)
	b.WriteString("# It allows what the sandbox did, not what it should do: review every rule, then\n")
	b.WriteString("# check it with `airlock policy replay` against the same trail.\n")
	b.WriteString("# Path patterns: ids, hashes, UUIDs, numbers and versions became \"*\", as did a segment\n")
	fmt.Fprintf(b, "# with %d or more siblings; paths deeper than %d segments end in \"**\".\n", FanOut, MaxDepth)
}

func writeRule(b *bytes.Buffer, r *learnedRule) {
	fmt.Fprintf(b, "    # %s: %s\n", r.t.host.Name, r.t.all)
	for _, g := range r.t.grants {
		fmt.Fprintf(b, "    # %s\n", comment(g))
	}
	if r.http == nil && r.parentHTTP == nil && r.noL7 != "" {
		fmt.Fprintf(b, "    # every method and path: %s\n", comment(r.noL7))
	}
	if r.extra != "" {
		fmt.Fprintf(b, "    # %s\n", comment(r.extra))
	}
	fmt.Fprintf(b, "    - name: %s\n", quote(r.name))
	if r.t.host.IsIP() {
		bits := 32
		if r.t.host.Addr.Is6() {
			bits = 128
		}
		fmt.Fprintf(b, "      cidrs: [%s]\n", quote(r.t.host.Name+"/"+strconv.Itoa(bits)))
	} else {
		fmt.Fprintf(b, "      hosts: [%s]\n", quote(r.t.host.Name))
	}
	ports := make([]string, 0, len(r.t.ports))
	for _, p := range r.ports() {
		ports = append(ports, strconv.Itoa(p))
	}
	fmt.Fprintf(b, "      ports: [%s]\n", strings.Join(ports, ", "))
	switch {
	case r.http != nil:
		b.WriteString("      http:\n")
		for _, e := range r.http {
			fmt.Fprintf(b, "        - methods: [%s]\n          paths:\n", strings.Join(e.methods, ", "))
			for _, p := range e.patterns {
				fmt.Fprintf(b, "            - %s # %s\n", quote(p.path), p.stats)
			}
		}
	case r.parentHTTP != nil:
		b.WriteString("      http:\n")
		for _, m := range r.parentHTTP {
			var fields []string
			if len(m.Methods) > 0 {
				fields = append(fields, fmt.Sprintf("methods: [%s]", quoteAll(m.Methods)))
			}
			if len(m.Paths) > 0 {
				fields = append(fields, fmt.Sprintf("paths: [%s]", quoteAll(m.Paths)))
			}
			fmt.Fprintf(b, "        - {%s}\n", strings.Join(fields, ", "))
		}
	}
}

// quoteAll quotes each of ss and joins them with ", ".
func quoteAll(ss []string) string {
	qs := make([]string, len(ss))
	for i, s := range ss {
		qs[i] = quote(s)
	}
	return strings.Join(qs, ", ")
}

// footer lists, as comments, what was left out and why.
func (l *learner) footer(b *bytes.Buffer) {
	section := func(title string, notes map[string]*note) {
		if len(notes) == 0 {
			return
		}
		fmt.Fprintf(b, "\n# %s\n", title)
		for _, k := range slices.Sorted(maps.Keys(notes)) {
			n := notes[k]
			fmt.Fprintf(b, "#   %s (%s): %s\n", comment(n.key), n.stats, comment(n.why))
		}
	}
	section("Left out, never a rule (the candidate denies these):", l.leftOut)
	if l.opt.Parent != nil {
		section(fmt.Sprintf("Denied by the parent %s, so not rules (a child only narrows):", comment(l.opt.ParentRef)), l.parentNo)
	}
	if len(l.dnsOnly) > 0 {
		b.WriteString("\n# Looked up in DNS but never connected to through the proxy (no rule written):\n")
		for _, n := range slices.Sorted(maps.Keys(l.dnsOnly)) {
			fmt.Fprintf(b, "#   %s (%s)\n", comment(n), l.dnsOnly[n])
		}
	}
	if len(l.ignored) > 0 {
		b.WriteString("\n# Not egress, not read:")
		for _, k := range slices.Sorted(maps.Keys(l.ignored)) {
			fmt.Fprintf(b, " %d %s", l.ignored[k], k)
		}
		b.WriteString(" events.\n")
	}
}

// quote writes s as a YAML double-quoted scalar: strconv.Quote's escapes (\", \\, \n, \xNN,
// \uNNNN) are all YAML escapes too.
func quote(s string) string { return strconv.Quote(s) }

// comment makes s safe inside a one-line YAML comment: recorded hosts and paths come from
// the sandbox, so a line break in them must not end the comment and start YAML, and YAML
// refuses control characters and invalid UTF-8 anywhere. Every rune that is not printable
// (or not UTF-8) is written as its Go escape.
func comment(s string) string {
	var b strings.Builder
	for i, r := range s {
		if (r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD")) || !unicode.IsPrint(r) {
			q := strconv.QuoteRune(r)
			if r == utf8.RuneError {
				q = fmt.Sprintf("'\\x%02x'", s[i])
			}
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
