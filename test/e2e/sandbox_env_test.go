//go:build linux

package e2e

import (
	"strings"
	"testing"
)

// TestSandboxExecEnv: `sandbox exec` gives the command a clean environment, as docker exec
// does. The caller's VAULT_TOKEN and the variable the policy reads a secret from
// (E2E_SANDBOX_TOKEN) stay outside; --env KEY passes the caller's value, --env KEY=VALUE a
// value of its own; the env file's variables are there.
func TestSandboxExecEnv(t *testing.T) {
	e := newSandboxEnv(t)
	name := e.name("env")
	e.create(t, name)
	caller := []string{"VAULT_TOKEN=hvs.caller-vault-token", "E2E_SANDBOX_TOKEN=" + sbToken, "PASSED=from-caller",
		"NOT_PASSED=stays-out"}
	r := e.exec(t, []string{"--env", "PASSED", "--env", "SET=given"}, name, caller, nil, "env")
	if r.Code != 0 {
		t.Fatalf("exec env: %s", r)
	}
	vars := map[string]string{}
	for _, line := range strings.Split(r.Stdout, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			vars[k] = v
		}
	}
	for _, k := range []string{"VAULT_TOKEN", "E2E_SANDBOX_TOKEN", "NOT_PASSED", "SSL_CERT_DIR", "GIT_CONFIG_NOSYSTEM"} {
		if v, ok := vars[k]; ok {
			t.Errorf("the caller's %s=%q reached the command", k, v)
		}
	}
	if strings.Contains(r.Stdout, sbToken) || strings.Contains(r.Stdout, "hvs.caller-vault-token") {
		t.Errorf("a secret value is in the command's environment:\n%s", r.Stdout)
	}
	for k, v := range map[string]string{"PASSED": "from-caller", "SET": "given", "AIRLOCK_SANDBOX": name} {
		if vars[k] != v {
			t.Errorf("%s = %q, want %q", k, vars[k], v)
		}
	}
	for _, k := range []string{"PATH", "HOME", "HOSTNAME", "LANG", "HTTPS_PROXY", "SSL_CERT_FILE"} {
		if vars[k] == "" {
			t.Errorf("%s is not set:\n%s", k, r.Stdout)
		}
	}
}
