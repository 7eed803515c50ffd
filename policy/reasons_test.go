package policy

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// docsReasons parses the table of reason codes in docs/audit.md (the rows after the header
// "| code | from | HTTP status | what happened | remedy |"). tools/docgen writes the table
// from the catalogue; this test holds the committed page to it without running the generator.
func docsReasons(t *testing.T) []ReasonInfo {
	t.Helper()
	b, err := os.ReadFile("../docs/audit.md")
	if err != nil {
		t.Fatal(err)
	}
	const header = "| code | from | HTTP status | what happened | remedy |"
	text := string(b)
	i := strings.Index(text, header)
	if i < 0 {
		t.Fatalf("docs/audit.md has no table of reason codes (header %q)", header)
	}
	lines := strings.Split(text[i:], "\n")[2:] // past the header and the |---| line
	var out []ReasonInfo
	for _, line := range lines {
		if !strings.HasPrefix(line, "| `") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) != 5 {
			t.Fatalf("docs/audit.md reason row has %d cells, want 5: %s", len(cells), line)
		}
		for j := range cells {
			cells[j] = unescapeCell.Replace(strings.TrimSpace(cells[j]))
		}
		status := 0
		if cells[2] != "—" {
			if status, err = strconv.Atoi(cells[2]); err != nil {
				t.Fatalf("docs/audit.md reason row: status %q: %v", cells[2], err)
			}
		}
		out = append(out, ReasonInfo{Code: Reason(strings.Trim(cells[0], "`")), Emitter: Emitter(cells[1]),
			HTTPStatus: status, Sentence: cells[3], Remedy: cells[4]})
	}
	return out
}

// unescapeCell undoes what tools/docgen escapes in a table cell.
var unescapeCell = strings.NewReplacer(`\|`, "|", "&lt;", "<", "&gt;", ">")

// TestDocsReasonTableMatchesCatalogue holds docs/audit.md's table of reasons to the catalogue,
// both ways: every catalogue code is in the table with the same emitter, status, sentence
// and remedy, and the table has no code the catalogue lacks.
func TestDocsReasonTableMatchesCatalogue(t *testing.T) {
	rows := docsReasons(t)
	inDocs := map[Reason]ReasonInfo{}
	for _, r := range rows {
		if _, dup := inDocs[r.Code]; dup {
			t.Errorf("docs/audit.md lists %q twice", r.Code)
		}
		inDocs[r.Code] = r
		if _, ok := r.Code.Info(); !ok {
			t.Errorf("docs/audit.md lists %q, which is not in the catalogue", r.Code)
		}
	}
	for _, want := range Reasons() {
		got, ok := inDocs[want.Code]
		if !ok {
			t.Errorf("catalogue code %q is missing from docs/audit.md's table (go generate ./tools/docgen/)", want.Code)
			continue
		}
		if got != want {
			t.Errorf("docs/audit.md row of %q:\n got %+v\nwant %+v", want.Code, got, want)
		}
	}
}

func TestCatalogueEntriesAreComplete(t *testing.T) {
	seen := map[Reason]bool{}
	for _, e := range Reasons() {
		if e.Code == "" || e.Emitter == "" || e.Sentence == "" || e.Remedy == "" {
			t.Errorf("incomplete entry %+v", e)
		}
		if seen[e.Code] {
			t.Errorf("code %q twice", e.Code)
		}
		seen[e.Code] = true
		if e.HTTPStatus != 0 && (e.HTTPStatus < 400 || e.HTTPStatus > 599) {
			t.Errorf("%s: status %d is not an error status", e.Code, e.HTTPStatus)
		}
		if got, ok := e.Code.Info(); !ok || got != e {
			t.Errorf("Info(%q): got %+v, %v", e.Code, got, ok)
		}
	}
	if _, ok := Reason("no_such_reason").Info(); ok {
		t.Error("Info of an unknown code: got ok")
	}
	if got := KernelReason("not_allowed"); got != ReasonKernelNotAllowed {
		t.Errorf("KernelReason: got %q, want %q", got, ReasonKernelNotAllowed)
	}
}
