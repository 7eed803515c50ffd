// Command docgen writes the parts of the manual in docs/ that are generated from the code:
// the table of reason codes in docs/audit.md, from the policy package's reason catalogue, and
// the table of `airlock run` flags in docs/cli.md, from `airlock run --help` of a freshly built
// ./cmd/airlock. Each table sits between two marker lines,
//
//	<!-- BEGIN GENERATED name -->
//	<!-- END GENERATED name -->
//
// and docgen rewrites what is between them, nothing else. Run it with `go generate
// ./tools/docgen/` (or `make generate`, which regenerates everything); its test fails when the
// committed pages differ from what it would write.
package main

//go:generate go run . -root ../..

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	root := flag.String("root", ".", "the repository's root directory")
	check := flag.Bool("check", false, "write nothing; exit 1 when a page differs from what would be generated")
	flag.Parse()
	if err := run(*root, *check); err != nil {
		fmt.Fprintln(os.Stderr, "docgen:", err)
		os.Exit(1)
	}
}

func run(root string, check bool) error {
	pages, err := Generate(root)
	if err != nil {
		return err
	}
	var stale []string
	for _, p := range pages {
		if bytes.Equal(p.Old, p.New) {
			continue
		}
		if check {
			stale = append(stale, p.Path)
			continue
		}
		if err := os.WriteFile(filepath.Join(root, p.Path), p.New, 0o644); err != nil {
			return fmt.Errorf("write %s: %w", p.Path, err)
		}
		fmt.Printf("docgen: wrote %s\n", p.Path)
	}
	if len(stale) > 0 {
		return fmt.Errorf("%s: generated tables drifted from the code; run go generate ./tools/docgen/", strings.Join(stale, ", "))
	}
	return nil
}

// Page is one page of the manual: its content as it is (Old) and as generated (New).
type Page struct {
	Path     string // relative to the repository's root, slash-separated
	Old, New []byte
}

// region is one generated part of a page.
type region struct {
	page, name string
	body       func(root string) (string, error)
}

var regions = []region{
	{"docs/audit.md", "reasons", func(string) (string, error) { return reasonTable(), nil }},
	{"docs/cli.md", "runflags", runFlagTable},
}

// Generate computes every generated page from the code and the pages under root, without
// writing anything.
func Generate(root string) ([]Page, error) {
	var pages []Page
	byPath := map[string]int{}
	for _, r := range regions {
		i, ok := byPath[r.page]
		if !ok {
			old, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(r.page)))
			if err != nil {
				return nil, err
			}
			i = len(pages)
			byPath[r.page] = i
			pages = append(pages, Page{Path: r.page, Old: old, New: old})
		}
		body, err := r.body(root)
		if err != nil {
			return nil, fmt.Errorf("%s, region %s: %w", r.page, r.name, err)
		}
		text, err := replaceRegion(string(pages[i].New), r.name, body)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.page, err)
		}
		pages[i].New = []byte(text)
	}
	return pages, nil
}

// replaceRegion replaces the lines between the markers of region name with body (which ends
// in a newline, or is empty). The markers must each appear once, on lines of their own, BEGIN
// first.
func replaceRegion(text, name, body string) (string, error) {
	begin := "<!-- BEGIN GENERATED " + name + " -->\n"
	end := "<!-- END GENERATED " + name + " -->\n"
	if strings.Count(text, begin) != 1 || strings.Count(text, end) != 1 {
		return "", fmt.Errorf("want exactly one line %q and one line %q", strings.TrimSpace(begin), strings.TrimSpace(end))
	}
	i := strings.Index(text, begin)
	j := strings.Index(text, end)
	if j < i || (i > 0 && text[i-1] != '\n') || text[j-1] != '\n' {
		return "", errors.New("the markers of region " + name + " are out of order or not on lines of their own")
	}
	return text[:i+len(begin)] + body + text[j:], nil
}

// cell escapes text for a cell of a Markdown table: a | would end the cell, and <word> would
// be taken for an HTML tag and hidden.
func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;").Replace(s)
}
