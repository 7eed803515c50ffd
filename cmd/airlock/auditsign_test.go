package main

import (
	"io"
	"strings"
	"testing"
)

// --audit-sign: local (the default) or vault-transit:MOUNT/KEY with --audit-log and a Vault
// address; anything else is refused naming the flag.
func TestAuditSignFlagValidation(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" when valid
	}{
		{[]string{"--audit-log", "/tmp/a.log"}, ""},
		{[]string{"--audit-log", "/tmp/a.log", "--audit-sign", "vault-transit:transit/audit", "--vault-addr", "https://vault.test:8200", "--vault-token-file", "/t"}, ""},
		{[]string{"--audit-log", "/tmp/a.log", "--audit-sign", "vault-transit:transit/audit"}, "--vault-addr"},
		{[]string{"--audit-sign", "vault-transit:transit/audit", "--vault-addr", "https://vault.test:8200"}, "--audit-log"},
		{[]string{"--audit-log", "/tmp/a.log", "--audit-sign", "vault-transit:audit", "--vault-addr", "https://vault.test:8200"}, "MOUNT/KEY"},
		{[]string{"--audit-log", "/tmp/a.log", "--audit-sign", "hsm:slot1"}, "--audit-sign"},
	} {
		fs, cfg := runFlags(io.Discard)
		if _, err := fs.ParseArgs(append([]string{"--policy", "/p.yaml"}, tc.args...), io.Discard, false); err != nil {
			t.Fatalf("%q: %v", tc.args, err)
		}
		err := cfg.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v, want valid", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}
