package e2e

import (
	"context"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-dev/airlock/test/imagetest"
	"github.com/airlock-dev/airlock/test/privtest"
	"github.com/airlock-dev/airlock/test/vaulttest"
)

// sbLoginRegistryAddr serves a registry that wants a login, in the world.
const sbLoginRegistryAddr = "198.18.0.43"

// sbPullPolicy defines the registry login as a secret from Vault (used by no rule: the
// sandbox never sees it; only the pull does).
const sbPullPolicy = `apiVersion: airlock/v1
kind: EgressPolicy
metadata: {name: sandbox-pull}
spec:
  egress:
    - name: api
      hosts: ["api.allowed.test"]
      ports: [443]
  secrets:
    registry:
      vault: {path: secret/data/ci/registry, field: login}
`

// loginRegistry serves the busybox image at sbLoginRegistryAddr:443 behind Basic user:pass and
// counts the requests that came with and without the right login.
func (e *sbEnv) loginRegistry(t *testing.T, user, pass string) (ref string, counts func() (ok, refused int)) {
	t.Helper()
	h := imagetest.Registry(t, imagetest.Busybox(t), "private")
	var mu sync.Mutex
	var ok, refused int
	gate := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, has := r.BasicAuth()
		mu.Lock()
		good := has && u == user && p == pass
		if good {
			ok++
		} else {
			refused++
		}
		mu.Unlock()
		if !good {
			w.Header().Set("WWW-Authenticate", `Basic realm="e2e"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
	e.serveTLS(t, sbLoginRegistryAddr, gate)
	return sbLoginRegistryAddr + "/private:latest", func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return ok, refused
	}
}

// TestSandboxImagePullLogin: a registry that wants a login refuses `--image` without one
// (the error names --image-pull-secret); with --image-pull-secret the login comes from a real
// Vault (AppRole, the sidecar's Vault flags after --) through the credential broker, the
// image is pulled and runs, and the login appears nowhere the sandbox can read: not in its
// environment, not in its files, not in the state the sandbox is listed with.
func TestSandboxImagePullLogin(t *testing.T) {
	privtest.Require(t, "runc")
	e := newSandboxEnv(t)
	const login = "robot:e2e-registry-token-5f1c"
	ref, counts := e.loginRegistry(t, "robot", "e2e-registry-token-5f1c")
	v := vaulttest.StartWith(t, vaulttest.Options{
		Command:     func(bin string) *exec.Cmd { return e.w.Sidecar.Command(context.Background(), bin) },
		DialContext: e.w.Sidecar.DialContext,
	})
	v.PutKV(t, "ci/registry", map[string]any{"login": login})
	v.Policy(t, "airlock", `path "secret/data/ci/*" { capabilities = ["read"] }`)
	roleID, secretID := v.AppRole(t, "airlock", 60, 600, "airlock")
	policy := e.w.WriteFile(t, "sandbox-pull.yaml", []byte(sbPullPolicy))
	vaultArgs := []string{"--vault-addr", v.Address, "--vault-ca-cert", v.CACertFile, "--vault-auth", "approle",
		"--vault-role-id-file", e.w.WriteFile(t, "role-id", []byte(roleID)),
		"--vault-secret-id-file", e.w.WriteFile(t, "secret-id", []byte(secretID))}

	anon := e.name("anon")
	e.cleanupSandbox(t, anon)
	r := e.run(t, nil, createEnv(), append(append([]string{"sandbox", "create", anon}, e.createArgs("--policy", policy, "--image", ref)...), append([]string{"--"}, vaultArgs...)...)...)
	if r.Code == 0 || !strings.Contains(r.Stderr, "--image-pull-secret") {
		t.Fatalf("create of a login-only image without a login: %s; want a refusal naming --image-pull-secret", r)
	}
	if ok, refused := counts(); ok != 0 || refused == 0 {
		t.Fatalf("registry saw %d requests with the login and %d without, before any login was given", ok, refused)
	}

	name := e.name("pull")
	e.cleanupSandbox(t, name)
	r = e.run(t, nil, createEnv(), append(append([]string{"sandbox", "create", name}, e.createArgs("--policy", policy, "--image", ref, "--image-pull-secret", "registry")...), append([]string{"--"}, vaultArgs...)...)...)
	if r.Code != 0 {
		t.Fatalf("create with --image-pull-secret: %s\nsidecar log:\n%s", r, e.sidecarLog(name))
	}
	if ok, _ := counts(); ok == 0 {
		t.Fatal("the registry saw no request with the login")
	}
	if strings.Contains(r.Stdout+r.Stderr, "e2e-registry-token") {
		t.Errorf("create printed the registry login: %s", r)
	}
	got := e.sh(t, name, `cat /opt/new; env; cat /etc/airlock/* 2>/dev/null; grep -rl e2e-registry-token / --exclude-dir=proc --exclude-dir=sys 2>/dev/null | head -n 3`)
	if !strings.HasPrefix(got.Stdout, "new\n") {
		t.Errorf("the pulled image's file: %s", got)
	}
	if strings.Contains(got.Stdout, "e2e-registry-token") {
		t.Errorf("the registry login is visible inside the sandbox:\n%s", got.Stdout)
	}
	if r := e.run(t, nil, nil, "sandbox", "list", "--json", "--state-dir", e.stateDir); strings.Contains(r.Stdout, "e2e-registry-token") {
		t.Errorf("sandbox list shows the registry login: %s", r.Stdout)
	}
	if strings.Contains(e.sidecarLog(name), "e2e-registry-token") {
		t.Error("the sidecar's log holds the registry login")
	}
}
