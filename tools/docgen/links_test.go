package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// repoRoot is the repository's root as seen from this package's directory.
const repoRoot = "../.."

// manualFiles are the Markdown files whose links are checked: the README, every page of
// docs/, and the other READMEs of the repository.
func manualFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "tools/bench/README.md"}
	for _, pattern := range []string{"docs/*.md", "deploy/*/*.md", "test/*/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(repoRoot, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			rel, _ := filepath.Rel(repoRoot, f)
			files = append(files, filepath.ToSlash(rel))
		}
	}
	if !slices.Contains(files, "docs/README.md") {
		t.Fatal("docs/README.md is missing: the manual's index")
	}
	return files
}

var (
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
	inlineLink = regexp.MustCompile(`\]\(([^()\s]*(?:\([^()\s]*\)[^()\s]*)*)\)`)
	heading    = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
)

// proseLines are a Markdown file's lines outside fenced code blocks.
func proseLines(text string) []string {
	var out []string
	in := false
	for _, line := range strings.Split(text, "\n") {
		if fence.MatchString(line) {
			in = !in
			continue
		}
		if !in {
			out = append(out, line)
		}
	}
	return out
}

// slug is the anchor GitHub gives a heading: its text without markup, lower-case, every
// character but letters, digits, spaces, '-' and '_' dropped, spaces turned into '-'.
func slug(text string) string {
	text = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(text, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors are the fragment names a Markdown file defines: one per heading (the second
// heading of the same text gets "-1", and so on) and one per <a id> or <a name>.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range proseLines(text) {
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// links are the targets of a file's inline links, outside code.
func links(text string) []string {
	var out []string
	for _, line := range proseLines(text) {
		line = codeSpan.ReplaceAllString(line, "code")
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// TestManualLinksResolve holds every relative link of the manual to a file or directory of
// the repository, and every #fragment to a heading or anchor of the page it names.
func TestManualLinksResolve(t *testing.T) {
	absRoot, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	cache := map[string]map[string]bool{}
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := cache[path]; ok {
			return a, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		cache[path] = anchors(string(b))
		return cache[path], nil
	}
	checked := 0
	for _, file := range manualFiles(t) {
		src := filepath.Join(absRoot, filepath.FromSlash(file))
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		for _, target := range links(string(b)) {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			if err := checkLink(absRoot, src, target, anchorsOf); err != nil {
				t.Errorf("%s: link (%s): %v", file, target, err)
			}
		}
	}
	if checked < 50 {
		t.Errorf("checked only %d relative links: the link finder is broken", checked)
	}
}

func checkLink(root, src, target string, anchorsOf func(string) (map[string]bool, error)) error {
	path, frag, _ := strings.Cut(target, "#")
	dest := src
	if path != "" {
		if strings.HasPrefix(path, "/") {
			return fmt.Errorf("absolute path: write it relative to the page")
		}
		dest = filepath.Join(filepath.Dir(src), filepath.FromSlash(path))
		if rel, err := filepath.Rel(root, dest); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			return fmt.Errorf("points outside the repository")
		}
		if _, err := os.Stat(dest); err != nil {
			return fmt.Errorf("no such file or directory")
		}
	}
	if frag == "" {
		return nil
	}
	if !strings.HasSuffix(dest, ".md") {
		return fmt.Errorf("a fragment on a file that is not Markdown")
	}
	a, err := anchorsOf(dest)
	if err != nil {
		return err
	}
	if !a[frag] {
		return fmt.Errorf("%s has no heading or anchor %q", filepath.Base(dest), frag)
	}
	return nil
}

func TestSlugAndAnchors(t *testing.T) {
	for in, want := range map[string]string{
		"`airlock run --policy FILE [flags]`":                           "airlock-run---policy-file-flags",
		"`llm.budget`: what a call may cost":                            "llmbudget-what-a-call-may-cost",
		"HTTP/2, gRPC and WebSocket":                                    "http2-grpc-and-websocket",
		"Enforcement: the node agent (`airlock node`)":                  "enforcement-the-node-agent-airlock-node",
		"`airlock sandbox create\\|list\\|delete --backend kubernetes`": "airlock-sandbox-createlistdelete---backend-kubernetes",
		"Local sandboxes ([`airlock sandbox`](x.md))":                   "local-sandboxes-airlock-sandbox",
		"spec_x Über": "spec_x-über",
	} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
	doc := "# A\n## A\n```\n# not a heading\n```\n<a id=\"x\"></a>text\n"
	got := anchors(doc)
	for _, want := range []string{"a", "a-1", "x"} {
		if !got[want] {
			t.Errorf("anchors: %q missing from %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Error("a line in a code block counted as a heading")
	}
	if l := links("see [`x`](a.md#b) and `[y](c.md)` and [z](d.md)\n```\n[w](e.md)\n```\n"); !slices.Equal(l, []string{"a.md#b", "d.md"}) {
		t.Errorf("links: got %v", l)
	}
}

// cells counts the cells of a Markdown table row: GitHub splits a row at every | that is not
// escaped, inside code spans too.
func cells(row string) int {
	n := 0
	for i := 0; i < len(row); i++ {
		switch row[i] {
		case '\\':
			i++
		case '|':
			n++
		}
	}
	return n - 1
}

// TestManualTablesAreWhole holds every row of every table in the manual to its header's
// number of cells: an unescaped | in a cell (a command's a|b|c, say) splits it in two.
func TestManualTablesAreWhole(t *testing.T) {
	tables := 0
	for _, file := range manualFiles(t) {
		b, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(file)))
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		for _, line := range proseLines(string(b)) {
			if !strings.HasPrefix(line, "|") {
				want = 0
				continue
			}
			if want == 0 {
				want = cells(line)
				tables++
				continue
			}
			if got := cells(line); got != want {
				t.Errorf("%s: a table row has %d cells, its header %d (escape | as \\|): %s", file, got, want, line)
			}
		}
	}
	if tables < 20 {
		t.Errorf("found only %d tables in the manual: the table finder is broken", tables)
	}
}
