package main

import (
	"strings"
	"testing"
)

func TestPolicyIdentities(t *testing.T) {
	const pol = "testdata/identities.yaml"
	code, out, errOut := airlock(t, "policy", "check", pol)
	if code != 0 || !strings.Contains(out, "identities author, reviewer") {
		t.Fatalf("check: exit %d, %q %q", code, out, errOut)
	}
	tests := []struct {
		identity, method, want string
	}{
		{"reviewer", "POST", "decision:  deny"},
		{"reviewer", "GET", "secrets:   (none)"},
		{"author", "POST", "secrets:   git-token"},
	}
	for _, tc := range tests {
		code, out, errOut := airlock(t, "policy", "explain", pol, "--url", "https://git.example.com/repo", "--method", tc.method, "--identity", tc.identity)
		if code != 0 || !strings.Contains(out, tc.want) || !strings.Contains(out, "identity:  "+tc.identity) {
			t.Errorf("explain %s as %s: exit %d, %q %q; want %q", tc.method, tc.identity, code, out, errOut, tc.want)
		}
	}
	code, _, errOut = airlock(t, "policy", "explain", pol, "--url", "https://git.example.com/", "--identity", "ghost")
	if code == 0 || !strings.Contains(errOut, `"ghost" is not an identity of policy "two-agents" (it has: author, reviewer)`) {
		t.Errorf("explain --identity ghost: exit %d, %q", code, errOut)
	}
	code, out, errOut = airlock(t, "policy", "test", pol, "--cases", "testdata/identities-cases.yaml")
	if code != 0 || !strings.Contains(out, "4 passed, 0 failed") {
		t.Errorf("policy test: exit %d, %q %q", code, out, errOut)
	}
}
