package ebpf

import (
	"regexp"
	"strings"
	"testing"
)

func TestPinDirName(t *testing.T) {
	seen := map[string]string{}
	for _, sandbox := range []string{"web", "team.web", "team.web.1", "team_web", "team-web", "a~b", ".x", "x."} {
		dir := PinDirName(sandbox)
		if strings.Contains(dir, ".") {
			t.Errorf("PinDirName(%q) = %q: bpffs refuses names with a dot", sandbox, dir)
		}
		if back := sandboxFromPinDir(dir); back != sandbox && sandboxName.MatchString(sandbox) {
			t.Errorf("sandboxFromPinDir(%q) = %q, want %q", dir, back, sandbox)
		}
		if prev, ok := seen[dir]; ok && sandboxName.MatchString(sandbox) && sandboxName.MatchString(prev) {
			t.Errorf("%q and %q share the pin directory %q", prev, sandbox, dir)
		}
		seen[dir] = sandbox
	}
	if got := PinDirName("web"); got != "web" {
		t.Errorf("PinDirName(web) = %q: a name without a dot keeps its directory", got)
	}
}

// sandboxName accepts exactly what ^[A-Za-z0-9_.-]{1,64}$ does.
func TestSandboxNameSameAsRegexp(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
	cases := []string{"", "a", "A-b_c.9", strings.Repeat("x", 64), strings.Repeat("x", 65), "a b", "a/b", "ä", "a\n", "..", "-", "x\x00"}
	for c := 0; c < 256; c++ {
		cases = append(cases, "a"+string(rune(c)), string([]byte{byte(c)}))
	}
	for _, s := range cases {
		if got, want := sandboxName.MatchString(s), re.MatchString(s); got != want {
			t.Errorf("sandboxName.MatchString(%q) = %v, want %v", s, got, want)
		}
	}
}
