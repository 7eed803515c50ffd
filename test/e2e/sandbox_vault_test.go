//go:build linux

package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/test/vaulttest"
)

// sbVaultPolicy injects a dynamic Vault secret (a lease) into requests to api.allowed.test.
const sbVaultPolicy = `apiVersion: airlock/v1
kind: EgressPolicy
metadata: {name: sandbox-vault}
spec:
  egress:
    - name: api
      hosts: ["api.allowed.test"]
      ports: [443]
      inject:
        - header: X-Dyn
          value: '{{ secret "dyn" }}'
  secrets:
    dyn:
      vault: {path: dyn/creds/e2e, field: value, dynamic: true}
`

// TestSandboxDeleteRevokesLeases checks that `sandbox delete` stops the sidecar gracefully: a
// sandbox whose sidecar holds a dynamic secret from a real Vault (AppRole login, a lease) sees
// it injected upstream, and after delete the lease is revoked in Vault.
func TestSandboxDeleteRevokesLeases(t *testing.T) {
	e := newSandboxEnv(t)
	v := vaulttest.StartWith(t, vaulttest.Options{
		Command:     func(bin string) *exec.Cmd { return e.w.Sidecar.Command(context.Background(), bin) },
		DialContext: e.w.Sidecar.DialContext,
	})
	v.Policy(t, "airlock", `
path "dyn/creds/*" { capabilities = ["read"] }
path "sys/leases/renew" { capabilities = ["update"] }
path "sys/leases/revoke" { capabilities = ["update"] }
`)
	roleID, secretID := v.AppRole(t, "airlock", 60, 600, "airlock")
	policy := e.w.WriteFile(t, "sandbox-vault.yaml", []byte(sbVaultPolicy))
	name := e.name("vault")
	e.create(t, name, "--policy", policy, "--",
		"--vault-addr", v.Address, "--vault-ca-cert", v.CACertFile, "--vault-auth", "approle",
		"--vault-role-id-file", e.w.WriteFile(t, "role-id", []byte(roleID)),
		"--vault-secret-id-file", e.w.WriteFile(t, "secret-id", []byte(secretID)))

	before := len(e.w.API.Requests())
	if r := e.sh(t, name, curlScript("https://api.allowed.test/with-lease")); !strings.Contains(r.Stdout, "\n200 ") {
		t.Fatalf("request with the dynamic secret: %s", r)
	}
	reqs := e.w.API.Requests()[before:]
	if len(reqs) != 1 || !strings.HasPrefix(reqs[0].Header.Get("X-Dyn"), "dyn-e2e-") {
		t.Fatalf("upstream requests %+v: want one carrying the dynamic secret in X-Dyn", reqs)
	}
	leases := v.Leases(t, "dyn/creds/e2e/")
	if len(leases) != 1 || !v.LeaseAlive(t, leases[0]) {
		t.Fatalf("leases under dyn/creds/e2e/: %v, want one live lease", leases)
	}
	_, _, revokedBefore := v.LeaseStats(t)

	if r := e.run(t, nil, nil, "sandbox", "delete", "--state-dir", e.stateDir, name); r.Code != 0 {
		t.Fatalf("sandbox delete: %s", r)
	}
	if v.LeaseAlive(t, leases[0]) {
		t.Error("the dynamic secret's lease is still alive after sandbox delete")
	}
	if _, _, revoked := v.LeaseStats(t); revoked <= revokedBefore {
		t.Errorf("Vault counted no revocation (%d before, %d after delete)", revokedBefore, revoked)
	}
}
