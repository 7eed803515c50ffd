package main

import (
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestDocsRunFlagDefaults holds the defaults docs/cli.md's table of `airlock run` flags states
// to the flags' real defaults (which the proxy package's Default* constants provide), for
// every row whose default is one literal value. tools/docgen generates the table from
// `airlock run --help`; this test reads the flag set itself.
func TestDocsRunFlagDefaults(t *testing.T) {
	b, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	fs, _ := runFlags(io.Discard)
	row := regexp.MustCompile("(?m)^\\| `--([a-z0-9-]+)` \\| [^|]* \\| `([^`]*)` \\|")
	checked := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(string(b), -1) {
		name, want := m[1], m[2]
		f := fs.Lookup(name)
		if f == nil || checked[name] {
			continue // a flag of another subcommand's table
		}
		checked[name] = true
		got := f.DefValue
		if d, err := time.ParseDuration(got); err == nil && strings.ContainsAny(want, "smh") {
			if w, err := time.ParseDuration(want); err != nil || w != d {
				t.Errorf("--%s: docs/cli.md says %q, the flag defaults to %s", name, want, d)
			}
			continue
		}
		if got != want {
			t.Errorf("--%s: docs/cli.md says %q, the flag defaults to %q", name, want, got)
		}
	}
	for _, name := range []string{"max-tunnels", "dial-timeout", "idle-timeout", "response-header-timeout", "max-header-bytes", "max-request-body"} {
		if !checked[name] {
			t.Errorf("docs/cli.md's run flag table has no literal default for --%s", name)
		}
	}
}
