//go:build linux

package e2e

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/ebpf"
	"github.com/airlock-dev/airlock/test/privtest"
)

// `make demo` keeps working: the demo program, run against the binary under test and the
// example sandbox policy, tells its story and removes everything it made.
func TestSandboxDemo(t *testing.T) {
	privtest.Require(t, "curl", "python3", "nsenter")
	if err := ebpf.Probe(); err != nil {
		t.Fatalf("kernel lacks what the enforcement needs: %v", err)
	}
	parallelWorld(t)
	bin := airlockBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	demo, err := cachedBinary("./tools/demo")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, demo, "--bin", bin, "--policy", "../../deploy/examples/sandbox-policy.yaml")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	for _, want := range []string{
		`(?m)^==> allowed +curl https://api\.demo\.test/hello -> 200 hello from api\.demo\.test/hello$`,
		`(?m)^==> denied +curl http://evil\.demo\.test/exfiltrate -> 403 \{"error":"egress_denied",.*"reason":"no_rule"`,
		`(?m)^==> kernel +.*Operation not permitted$`,
		`(?m)^==> credential +api\.demo\.test received Authorization`,
		`(?m)^==> llm +.*"Hello from the fake provider"`,
		`(?m)^==> delete `,
		`(?m)^==> cleanup `,
		`(?m)^demo: done$`,
	} {
		if !regexp.MustCompile(want).Match(out) {
			t.Errorf("demo output lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "sk-demo-provider-key") {
		t.Errorf("the demo printed the provider key")
	}
}
