package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// runFlag is one flag of `airlock run`, as its --help describes it.
type runFlag struct {
	name    string
	kind    string // the value's type as --help names it; empty for a boolean flag
	usage   string
	defVal  string // the default --help states, unquoted; empty when it states none
	hasDef  bool
	envVars []string
}

// machineDefaults are defaults that --help states as they are on the machine running it:
// the table says the rule instead. ok holds the rule to what --help said, so a changed
// default still fails the generator rather than leave the rule standing.
var machineDefaults = map[string]struct {
	text string
	ok   func(helpDefault string) bool
}{
	"state-dir": {
		text: "`/var/lib/airlock` as root, else `$XDG_STATE_HOME/airlock` (`~/.local/state/airlock`)",
		ok: func(d string) bool {
			return d == "/var/lib/airlock" || d == filepath.Join(helpHome, ".local", "state", "airlock")
		},
	},
}

// helpHome is the HOME `airlock run --help` runs with (and XDG_STATE_HOME unset), so that a
// default derived from it is known.
const helpHome = "/nonexistent-home"

// runFlagTable builds ./cmd/airlock, runs `airlock run --help` and tabulates its flags.
func runFlagTable(root string) (string, error) {
	help, err := runHelp(root)
	if err != nil {
		return "", err
	}
	flags, err := parseRunHelp(help)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("| flag | env | default | meaning |\n|---|---|---|---|\n")
	for _, f := range flags {
		def, meaning, err := f.defaultCell()
		if err != nil {
			return "", err
		}
		env := make([]string, len(f.envVars))
		for i, v := range f.envVars {
			env[i] = "`" + v + "`"
		}
		fmt.Fprintf(&b, "| `--%s` | %s | %s | %s |\n", f.name, strings.Join(env, ", "), def, cell(meaning))
	}
	return b.String(), nil
}

// runHelp builds the sidecar binary from root into a temporary directory and returns what
// `airlock run --help` prints, run with an environment that sets none of its flags.
func runHelp(root string) (string, error) {
	dir, err := os.MkdirTemp("", "docgen-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "airlock")
	build := exec.Command("go", "build", "-o", bin, "./cmd/airlock")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/airlock: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "run", "--help")
	cmd.Env = []string{"HOME=" + helpHome, "PATH=" + os.Getenv("PATH")}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("airlock run --help: %v\n%s", err, errOut.String())
	}
	return out.String(), nil
}

var (
	flagLine   = regexp.MustCompile(`^  --([a-z0-9-]+)(?: (\S+))?$`)
	defaultEnd = regexp.MustCompile(`^(.*) \(default ("(?:[^"\\]|\\.)*")\)$`)
	alsoFrom   = regexp.MustCompile(`also read from ([A-Z][A-Z0-9_]*)`)
)

// parseRunHelp reads the flags after "Flags:" in the format cmd/airlock prints them: a line
// "  --name [type]", then the usage indented by six spaces, ending in (default "x") when the
// default is not the zero value. It also holds the help to its promise that every flag is
// read from AIRLOCK_<NAME>, which the env column relies on.
func parseRunHelp(help string) ([]runFlag, error) {
	if !strings.Contains(help, "--proxy-addr from AIRLOCK_PROXY_ADDR") {
		return nil, fmt.Errorf("airlock run --help no longer says that every flag is read from AIRLOCK_<NAME> (the env column assumes it):\n%s", help)
	}
	_, after, ok := strings.Cut(help, "\nFlags:\n")
	if !ok {
		return nil, fmt.Errorf("airlock run --help has no \"Flags:\" section:\n%s", help)
	}
	var flags []runFlag
	sc := bufio.NewScanner(strings.NewReader(after))
	for sc.Scan() {
		line := sc.Text()
		if m := flagLine.FindStringSubmatch(line); m != nil {
			flags = append(flags, runFlag{name: m[1], kind: m[2]})
			continue
		}
		text, isUsage := strings.CutPrefix(line, "      ")
		if !isUsage || len(flags) == 0 {
			return nil, fmt.Errorf("airlock run --help: unexpected line %q", line)
		}
		f := &flags[len(flags)-1]
		f.usage = strings.TrimSpace(f.usage + " " + text)
	}
	if len(flags) == 0 {
		return nil, fmt.Errorf("airlock run --help lists no flags")
	}
	for i := range flags {
		if err := flags[i].finish(); err != nil {
			return nil, err
		}
	}
	return flags, nil
}

// finish splits the stated default off the usage and names the environment variables.
func (f *runFlag) finish() error {
	if m := defaultEnd.FindStringSubmatch(f.usage); m != nil {
		d, err := strconv.Unquote(m[2])
		if err != nil {
			return fmt.Errorf("--%s: default %s: %v", f.name, m[2], err)
		}
		f.usage, f.defVal, f.hasDef = m[1], d, true
	}
	f.envVars = []string{"AIRLOCK_" + strings.ToUpper(strings.ReplaceAll(f.name, "-", "_"))}
	for _, m := range alsoFrom.FindAllStringSubmatch(f.usage, -1) {
		f.envVars = append(f.envVars, m[1])
	}
	return nil
}

// defaultCell is the default column and the meaning column of a flag.
func (f *runFlag) defaultCell() (def, meaning string, err error) {
	if md, ok := machineDefaults[f.name]; ok {
		if !md.ok(f.defVal) {
			return "", "", fmt.Errorf("--%s: airlock run --help says the default is %q, which the rule %s does not give: update machineDefaults", f.name, f.defVal, md.text)
		}
		return md.text, f.usage, nil
	}
	switch {
	case f.hasDef:
		return "`" + prettyDefault(f.kind, f.defVal) + "`", f.usage, nil
	case strings.HasSuffix(f.usage, " (required)"):
		return "(required)", strings.TrimSuffix(f.usage, " (required)"), nil
	}
	if d, rest, ok := defaultClause(f.usage); ok {
		return cell(d), rest, nil
	}
	switch f.kind {
	case "":
		return "`false`", f.usage, nil
	case "int", "uint", "int64", "uint64", "float64":
		return "`0`", f.usage, nil
	}
	return "(none)", f.usage, nil
}

// defaultClause takes "default: X" out of a usage text, X ending at "; ", ". " or the end.
func defaultClause(usage string) (def, rest string, ok bool) {
	i := strings.Index(usage, "default: ")
	if i < 0 {
		return "", usage, false
	}
	before := strings.TrimRight(usage[:i], "; ,")
	tail := usage[i+len("default: "):]
	end, next := len(tail), ""
	for _, sep := range []string{"; ", ". "} {
		if j := strings.Index(tail, sep); j >= 0 && j < end {
			end, next = j, sep
		}
	}
	def = strings.TrimSuffix(tail[:end], ".")
	rest = before
	if end < len(tail) {
		after := tail[end+len(next):]
		if next == ". " {
			rest += ". " + after
		} else {
			rest += "; " + after
		}
	}
	return def, rest, true
}

// prettyDefault writes durations as people do: 5m, not 5m0s.
func prettyDefault(kind, v string) string {
	if kind != "duration" {
		return v
	}
	if _, err := time.ParseDuration(v); err != nil {
		return v
	}
	if strings.HasSuffix(v, "m0s") {
		v = strings.TrimSuffix(v, "0s")
	}
	if strings.HasSuffix(v, "h0m") {
		v = strings.TrimSuffix(v, "0m")
	}
	return v
}
