package main

import (
	"strconv"
	"strings"
	"testing"
)

// TestGeneratedTablesUpToDate regenerates every generated table in memory and compares it
// with the committed page: a reason added to the catalogue, or a flag of airlock run added,
// removed or given another default, fails here until go generate ./tools/docgen/ is run.
func TestGeneratedTablesUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds ./cmd/airlock")
	}
	pages, err := Generate("../..")
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) != 2 {
		t.Fatalf("got %d generated pages, want 2 (docs/audit.md, docs/cli.md)", len(pages))
	}
	for _, p := range pages {
		if string(p.Old) != string(p.New) {
			t.Errorf("%s: generated tables drifted from the code; run go generate ./tools/docgen/ and commit\n%s", p.Path, firstDifference(string(p.Old), string(p.New)))
		}
	}
}

// firstDifference shows the first line where two texts differ.
func firstDifference(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return "line " + strconv.Itoa(i+1) + ":\n have: " + x + "\n want: " + y
		}
	}
	return ""
}

func TestReplaceRegion(t *testing.T) {
	doc := "intro\n<!-- BEGIN GENERATED x -->\nold\n<!-- END GENERATED x -->\nafter\n"
	got, err := replaceRegion(doc, "x", "new 1\nnew 2\n")
	if err != nil {
		t.Fatal(err)
	}
	want := "intro\n<!-- BEGIN GENERATED x -->\nnew 1\nnew 2\n<!-- END GENERATED x -->\nafter\n"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	for name, bad := range map[string]string{
		"missing end":       "<!-- BEGIN GENERATED x -->\n",
		"missing begin":     "<!-- END GENERATED x -->\n",
		"twice":             strings.Repeat("<!-- BEGIN GENERATED x -->\n<!-- END GENERATED x -->\n", 2),
		"reversed":          "<!-- END GENERATED x -->\n<!-- BEGIN GENERATED x -->\n",
		"not on own line":   "text <!-- BEGIN GENERATED x -->\n<!-- END GENERATED x -->\n",
		"other region only": "<!-- BEGIN GENERATED y -->\n<!-- END GENERATED y -->\n",
	} {
		if _, err := replaceRegion(bad, "x", "body\n"); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

const sampleHelp = `Usage: airlock run --policy FILE [flags]

Every flag can also be set from the environment: --proxy-addr from AIRLOCK_PROXY_ADDR, and so
on.

Flags:
  --admin-pprof
      serve Go profiles
  --audit-key string
      signing key; created when absent; default: audit-signing.key in --state-dir. Keep it off the log's volume
  --dial-timeout duration
      connect timeout (default "10s")
  --idle-timeout duration
      idle | timeout (default "5m0s")
  --max-tunnels int
      concurrent tunnels (default "1024")
  --audit-max-bytes int
      rotate at this size
  --policy string
      policy YAML file (required)
  --state-dir string
      state directory (default "/var/lib/airlock")
  --vault-addr vault:
      Vault address for <vault> secrets (also read from VAULT_ADDR)
`

func TestRunFlagRows(t *testing.T) {
	flags, err := parseRunHelp(sampleHelp)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{
		"admin-pprof":     {"`false`", "serve Go profiles"},
		"audit-key":       {"audit-signing.key in --state-dir", "signing key; created when absent. Keep it off the log's volume"},
		"dial-timeout":    {"`10s`", "connect timeout"},
		"idle-timeout":    {"`5m`", "idle | timeout"},
		"max-tunnels":     {"`1024`", "concurrent tunnels"},
		"audit-max-bytes": {"`0`", "rotate at this size"},
		"policy":          {"(required)", "policy YAML file"},
		"state-dir":       {machineDefaults["state-dir"].text, "state directory"},
		"vault-addr":      {"(none)", "Vault address for <vault> secrets (also read from VAULT_ADDR)"},
	}
	if len(flags) != len(want) {
		t.Fatalf("got %d flags, want %d: %+v", len(flags), len(want), flags)
	}
	for _, f := range flags {
		def, meaning, err := f.defaultCell()
		if err != nil {
			t.Fatalf("--%s: %v", f.name, err)
		}
		if w := want[f.name]; def != w[0] || meaning != w[1] {
			t.Errorf("--%s: got default %q, meaning %q; want %q, %q", f.name, def, meaning, w[0], w[1])
		}
		if f.name == "vault-addr" && strings.Join(f.envVars, ",") != "AIRLOCK_VAULT_ADDR,VAULT_ADDR" {
			t.Errorf("--vault-addr: env %v", f.envVars)
		}
	}
	if got := cell("idle | <timeout>"); got != `idle \| &lt;timeout&gt;` {
		t.Errorf("cell: got %q", got)
	}
}

func TestRunFlagHelpDrift(t *testing.T) {
	for name, help := range map[string]string{
		"no env promise": strings.Replace(sampleHelp, "AIRLOCK_PROXY_ADDR", "PROXY", 1),
		"no flags":       strings.Split(sampleHelp, "Flags:")[0],
		"stray line":     sampleHelp + "something else\n",
	} {
		if _, err := parseRunHelp(help); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	flags, err := parseRunHelp(strings.Replace(sampleHelp, `(default "/var/lib/airlock")`, `(default "/srv/airlock")`, 1))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range flags {
		if _, _, err := f.defaultCell(); f.name == "state-dir" && err == nil {
			t.Error("a state-dir default the documented rule does not give was accepted")
		}
	}
}

func TestPrettyDefault(t *testing.T) {
	for in, want := range map[string]string{"10s": "10s", "5m0s": "5m", "1m0s": "1m", "0s": "0s", "1h0m0s": "1h", "1h30m0s": "1h30m", "250ms": "250ms"} {
		if got := prettyDefault("duration", in); got != want {
			t.Errorf("prettyDefault(%q) = %q, want %q", in, got, want)
		}
	}
	if got := prettyDefault("string", "5m0s"); got != "5m0s" {
		t.Errorf("a string default was rewritten: %q", got)
	}
}
