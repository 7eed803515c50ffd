package sandbox

import (
	"slices"
	"strings"
	"testing"
)

// TestExecEnv: the command's environment is the baseline, the env file and what --env
// names; nothing else of the caller's, however it is spelled.
func TestExecEnv(t *testing.T) {
	st := &State{Name: "sb", HostAddr: "198.18.5.1"}
	caller := []string{"VAULT_TOKEN=hvs.secret", "E2E_SANDBOX_TOKEN=tok", "AWS_SECRET_ACCESS_KEY=k", "FOO=bar",
		"LANG=de_DE.UTF-8", "HOME=/home/caller", "PATH=/home/caller/bin:/usr/bin", "HTTPS_PROXY=http://outside:1"}
	env := execEnv(st, ExecOptions{UID: -1, Env: caller, Pass: []string{"FOO", "BAR=baz", "MISSING", "PATH"}})
	get := func(env []string, k string) (string, bool) {
		for _, kv := range env {
			if key, v, _ := strings.Cut(kv, "="); key == k {
				return v, true
			}
		}
		return "", false
	}
	for _, k := range []string{"VAULT_TOKEN", "E2E_SANDBOX_TOKEN", "AWS_SECRET_ACCESS_KEY", "MISSING"} {
		if v, ok := get(env, k); ok {
			t.Errorf("%s=%q reached the command", k, v)
		}
	}
	want := map[string]string{"FOO": "bar", "BAR": "baz", "LANG": "de_DE.UTF-8", "HOME": DefaultWorkdir,
		"PATH": "/home/caller/bin:/usr/bin", "HTTPS_PROXY": "http://198.18.5.1:3128", "AIRLOCK_SANDBOX": "sb"}
	for k, v := range want {
		if got, _ := get(env, k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if _, ok := get(env, "HOSTNAME"); !ok {
		t.Error("no HOSTNAME")
	}
	// No env file, and a bare proxy name is not taken from the caller.
	env = execEnv(st, ExecOptions{UID: -1, NoEnv: true, Env: caller, Pass: []string{"HTTPS_PROXY", "NO_PROXY=x"}})
	if v, ok := get(env, "HTTPS_PROXY"); ok {
		t.Errorf("--no-env: HTTPS_PROXY=%q", v)
	}
	if v, _ := get(env, "PATH"); v != defaultPath || !slices.Contains(env, "NO_PROXY=x") {
		t.Errorf("--no-env: got %q", env)
	}
}
