package ebpf

import (
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
