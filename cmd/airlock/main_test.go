package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/policy"
)

// airlock runs the CLI in-process and returns exit code, stdout and stderr.
func airlock(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := program.Main(args, &out, &errb)
	return code, out.String(), errb.String()
}

const examplePolicy = "../../deploy/examples/policy.yaml"

func TestPolicyCheckExamplesLoad(t *testing.T) {
	files, err := filepath.Glob("../../deploy/examples/*policy*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example policies found: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			code, out, errOut := airlock(t, "policy", "check", f)
			if code != 0 {
				t.Fatalf("exit %d, stderr: %s", code, errOut)
			}
			if !strings.Contains(out, ": ok") {
				t.Errorf("stdout: got %q, want it to say ok", out)
			}
		})
	}
}

func TestPolicyCheckUnknownFieldNamesFileLineCol(t *testing.T) {
	code, _, errOut := airlock(t, "policy", "check", "testdata/unknown-field.yaml")
	if code != 1 {
		t.Fatalf("exit: got %d, want 1", code)
	}
	want := regexp.MustCompile(`testdata/unknown-field\.yaml:9:7: spec\.egress\[0\]\S*: .*prots`)
	if !want.MatchString(errOut) {
		t.Errorf("stderr: got %q, want a match for %s", errOut, want)
	}
}

func TestPolicyExplainJSONNamesSecretsNeverValues(t *testing.T) {
	t.Setenv("GITHUB_TOKEN_FOR_AIRLOCK_TEST", "ghp_value_that_must_not_appear")
	code, out, errOut := airlock(t, "policy", "explain", "testdata/injecting.yaml", "--url", "https://api.github.com/user", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var ex policy.Explanation
	if err := json.Unmarshal([]byte(out), &ex); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if ex.Decision != "allow" || ex.Rule != "github-api" || !ex.Intercept {
		t.Errorf("got %+v, want allow by github-api with interception", ex)
	}
	if len(ex.Secrets) != 1 || ex.Secrets[0] != "github-token" {
		t.Errorf("secrets: got %v, want [github-token]", ex.Secrets)
	}
	if strings.Contains(out, "ghp_value") {
		t.Errorf("explain printed a secret value: %s", out)
	}
}

func TestPolicyExplainText(t *testing.T) {
	tests := []struct {
		name, url, method string
		want              []string
	}{
		{"allowed read", "https://api.github.com/repos/acme/app", "GET", []string{"decision:  allow", "rule:      github-api", "intercept: true"}},
		{"denied path", "https://api.github.com/repos/other/app", "GET", []string{"decision:  deny", "path_not_allowed"}},
		{"denied method", "https://api.github.com/repos/acme/app", "DELETE", []string{"decision:  deny", "method_not_allowed"}},
		{"unknown host", "https://evil.example/", "GET", []string{"decision:  deny", "no_rule", "evil.example"}},
		{"metadata address", "http://169.254.169.254/latest/meta-data/", "GET", []string{"decision:  deny"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := airlock(t, "policy", "explain", examplePolicy, "--url", tc.url, "--method", tc.method)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("got %q, want it to contain %q", out, w)
				}
			}
		})
	}
}

func TestPolicyTestExampleCasesPass(t *testing.T) {
	for policy, cases := range map[string]string{
		examplePolicy: "../../deploy/examples/cases.yaml",
		// An MCP server and an agent as identities (per-identity cases).
		"../../deploy/examples/mcp-github-policy.yaml": "../../deploy/examples/mcp-github-cases.yaml",
	} {
		code, out, errOut := airlock(t, "policy", "test", policy, "--cases", cases)
		if code != 0 {
			t.Fatalf("%s: exit %d\nstdout: %s\nstderr: %s", cases, code, out, errOut)
		}
		if !regexp.MustCompile(`\d+ passed, 0 failed`).MatchString(out) {
			t.Errorf("%s: got %q, want a summary with 0 failed", cases, out)
		}
	}
}

func TestPolicyTestReportsFailuresWithLine(t *testing.T) {
	code, out, _ := airlock(t, "policy", "test", examplePolicy, "--cases", "testdata/failing-cases.yaml")
	if code != 1 {
		t.Fatalf("exit: got %d, want 1", code)
	}
	if !strings.Contains(out, "FAIL testdata/failing-cases.yaml:4:") || !strings.Contains(out, "got deny") {
		t.Errorf("got %q, want the failing case with its line and verdicts", out)
	}
	if !strings.Contains(out, "1 passed, 1 failed") {
		t.Errorf("got %q, want summary 1 passed, 1 failed", out)
	}
}

func TestHelpOnEveryCommand(t *testing.T) {
	for _, args := range [][]string{
		{"--help"}, {"run", "--help"}, {"policy", "--help"}, {"policy", "check", "--help"},
		{"policy", "explain", "--help"}, {"policy", "test", "--help"}, {"ca", "--help"},
		{"ca", "export", "--help"}, {"version", "--help"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, _ := airlock(t, args...)
			if code != 0 || !strings.Contains(out, "Usage") && !strings.Contains(out, "airlock") {
				t.Errorf("exit %d, stdout %q: want 0 and a usage text", code, out)
			}
		})
	}
}

func TestBadUsageExits2(t *testing.T) {
	for _, args := range [][]string{{}, {"nope"}, {"policy"}, {"policy", "explain", examplePolicy}, {"run", "--bogus"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			if code, _, _ := airlock(t, args...); code != 2 {
				t.Errorf("exit: got %d, want 2", code)
			}
		})
	}
}

func TestRunRefusesWhatThisBuildCannotEnforce(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"production, cgroup that cannot be enforced", []string{"--environment", "production", "--cgroup", "/nonexistent-airlock-cgroup",
			"--proxy-addr", "127.0.0.1:0", "--admin-addr", "off", "--transparent-addr", "off"}, "kernel enforcement on /nonexistent-airlock-cgroup unavailable"},
		{"production", []string{"--environment", "production"}, "production requires kernel enforcement"},
		{"dns listener address", []string{"--dns-addr", "localhost:53"}, "--dns-addr \"localhost:53\": want ip:port"},
		{"bad environment", []string{"--environment", "prod"}, "use production, staging or development"},
		{"bad packet guard", []string{"--packet-guard", "maybe"}, "use auto, required or best-effort"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"run", "--policy", examplePolicy, "--state-dir", t.TempDir()}, tc.args...)
			code, _, errOut := airlock(t, args...)
			if code != 1 || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr %q: want 1 and %q", code, errOut, tc.want)
			}
		})
	}
}

func TestRunReportsPolicyErrorWithPosition(t *testing.T) {
	code, _, errOut := airlock(t, "run", "--policy", "testdata/unknown-field.yaml", "--state-dir", t.TempDir(), "--proxy-addr", "127.0.0.1:0", "--admin-addr", "off")
	if code != 1 || !strings.Contains(errOut, "unknown-field.yaml:9:7") {
		t.Errorf("exit %d, stderr %q: want 1 and file:line:col", code, errOut)
	}
}

func TestFlagsFromEnvironment(t *testing.T) {
	t.Setenv("AIRLOCK_ENVIRONMENT", "nonsense")
	code, _, errOut := airlock(t, "run", "--policy", examplePolicy, "--state-dir", t.TempDir())
	if code != 1 || !strings.Contains(errOut, `"nonsense"`) {
		t.Errorf("exit %d, stderr %q: want the env value to be used and refused", code, errOut)
	}
}

func TestCAExportIsStable(t *testing.T) {
	dir := t.TempDir()
	code, first, errOut := airlock(t, "ca", "export", "--state-dir", dir)
	if code != 0 || !strings.HasPrefix(first, "-----BEGIN CERTIFICATE-----") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, first, errOut)
	}
	_, second, _ := airlock(t, "ca", "export", "--state-dir", dir)
	if first != second {
		t.Errorf("second export differs: the CA must be created once and reused")
	}
	if _, err := os.Stat(filepath.Join(dir, "ca.key")); err != nil {
		t.Errorf("ca.key not in state dir: %v", err)
	}
	if strings.Contains(first, "PRIVATE KEY") {
		t.Errorf("export printed a private key")
	}
}
