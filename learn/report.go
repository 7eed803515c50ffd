package learn

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// Fails reports whether the report holds an event of one of the changes in failOn.
func (r Report) Fails(failOn []Change) bool {
	return slices.ContainsFunc(failOn, func(c Change) bool { return r.Counts[c] > 0 })
}

// changeTitles are the section titles of WriteText, in order.
var changeTitles = []struct {
	c     Change
	title string
}{
	{AllowToDeny, "allow → deny (went through when recorded; the candidate denies it)"},
	{DenyToAllow, "deny → allow (denied when recorded; the candidate allows it)"},
	{Undecidable, "undecidable (the recording lacks what the candidate decides on)"},
}

// WriteText prints the report for a person: the totals, then per change the counts per rule
// and destination, then every event of that change with where it was read.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "replayed %d of %d events against policy %q: %d unchanged, %d allow → deny, %d deny → allow, %d undecidable\n",
		r.Replayed, r.Events, r.Policy, r.Counts[Unchanged], r.Counts[AllowToDeny], r.Counts[DenyToAllow], r.Counts[Undecidable])
	if len(r.Skipped) > 0 {
		var parts []string
		for _, k := range sortedKeys(r.Skipped) {
			parts = append(parts, fmt.Sprintf("%d %s", r.Skipped[k], k))
		}
		fmt.Fprintf(&b, "not replayed (not egress decisions): %s\n", strings.Join(parts, ", "))
	}
	for _, s := range changeTitles {
		if r.Counts[s.c] == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n%s: %d\n", s.title, r.Counts[s.c])
		for _, g := range r.Groups {
			if g.Change == s.c {
				fmt.Fprintf(&b, "  %5d  %-30s rule %-20s %s\n", g.Count, g.Destination, orNone(g.Rule), g.Reason)
			}
		}
		for _, x := range r.Changes {
			if x.Change == s.c {
				fmt.Fprintf(&b, "    %s  %s\n", x.Source, x.describe())
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// describe says what the event was: "GET files.test:443/simple/a/" or "connect pypi.test:443".
func (x Replayed) describe() string {
	if x.Method != "" {
		return fmt.Sprintf("%s %s%s", x.Method, x.Destination, x.Path)
	}
	return x.Kind + " " + x.Destination
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
