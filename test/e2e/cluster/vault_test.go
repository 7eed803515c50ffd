package cluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/test/kubecluster"
	"github.com/airlock-dev/airlock/test/testnet"
	"github.com/airlock-dev/airlock/test/vaulttest"
)

// The test Vault runs in the cluster's network namespace (so that it reaches the API server
// at 127.0.0.1:6443 for TokenReview) behind a TLS front end on the hosts link, where pods
// reach it. The front end's certificate comes from a test CA that the sandbox namespaces get
// as a ConfigMap, as a platform team with a private Vault CA would distribute it.
const (
	vaultIP          = "198.19.101.30"
	vaultAddr        = "https://" + vaultIP + ":8200"
	vaultRole        = "k12-sandbox"
	vaultCAConfigMap = "k12-vault-ca"
	// k12NS holds this file's pods (names prefixed k12-: another cluster may run beside
	// this one, and /sys/fs/bpf is shared).
	k12NS = "k12"
)

// vaultFront is the test Vault and what the cluster needs to trust it.
type vaultFront struct {
	srv   *vaulttest.Server
	caPEM []byte
}

// startVault starts the test Vault in the cluster's namespace and its TLS front end.
func (e *env) startVault(ctx context.Context, t *testing.T) {
	srv := vaulttest.StartWith(t, vaulttest.Options{
		Command:     func(bin string) *exec.Cmd { return e.ns.Command(ctx, bin) },
		DialContext: e.ns.DialContext,
	})
	dir := t.TempDir()
	ca := testnet.NewCA(t, dir)
	leaf, err := ca.Leaf(vaultIP)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "test-ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	target, err := url.Parse(srv.Address)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(srv.CACertPEM)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = &http.Transport{DialContext: e.ns.DialContext, TLSClientConfig: &tls.Config{RootCAs: roots}}
	e.ns.IP(t, "addr", "add", vaultIP+"/32", "dev", "hosts0")
	l, err := e.ns.Listen("tcp", vaultIP+":8200")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: rp, TLSConfig: &tls.Config{Certificates: []tls.Certificate{*leaf}}, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.ServeTLS(l, "", "") }()
	t.Cleanup(func() { hs.Close() })
	e.vault = &vaultFront{srv: srv, caPEM: caPEM}
}

// webhookVaultEnv is the webhook's Vault configuration in the install overlay.
func webhookVaultEnv() string {
	return `
                  - {name: AIRLOCK_VAULT_ADDR, value: "` + vaultAddr + `"}
                  - {name: AIRLOCK_VAULT_K8S_ROLE, value: "` + vaultRole + `"}
                  - {name: AIRLOCK_VAULT_CA_CONFIGMAP, value: "` + vaultCAConfigMap + `"}`
}

// sandboxNamespace creates a namespace for injected pods with the Vault CA ConfigMap the
// webhook's sidecars mount.
func (e *env) sandboxNamespace(ctx context.Context, t *testing.T, ns string) {
	t.Helper()
	e.apply(ctx, t, `apiVersion: v1
kind: Namespace
metadata:
  name: `+ns+`
  labels: {pod-security.kubernetes.io/enforce: privileged}
---
`+vaultCAConfigMapFor(ns, e.vault.caPEM))
}

// vaultCAConfigMapFor is the Vault CA ConfigMap of namespace ns.
func vaultCAConfigMapFor(ns string, caPEM []byte) string {
	return `apiVersion: v1
kind: ConfigMap
metadata: {name: ` + vaultCAConfigMap + `, namespace: ` + ns + `}
data:
  ca.crt: |
` + indent(string(caPEM), "    ")
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return prefix + strings.Join(lines, "\n"+prefix) + "\n"
}

// configureVault points Vault's Kubernetes auth at the cluster (TokenReview with a
// reviewer service account bound to system:auth-delegator) and makes the role the sidecars
// log in with: service account k12-agent in k12NS, audience vault, reading secret/k12/*.
func (e *env) configureVault(ctx context.Context, t *testing.T) {
	e.apply(ctx, t, `apiVersion: v1
kind: ServiceAccount
metadata: {name: k12-vault-reviewer, namespace: `+k12NS+`}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: k12-agent, namespace: `+k12NS+`}
automountServiceAccountToken: false
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: k12-vault-reviewer}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:auth-delegator}
subjects: [{kind: ServiceAccount, name: k12-vault-reviewer, namespace: `+k12NS+`}]
`)
	reviewer := strings.TrimSpace(e.kubectl(ctx, t, "-n", k12NS, "create", "token", "k12-vault-reviewer", "--duration=1h"))
	clusterCA, err := os.ReadFile(filepath.Join(e.c.Dir, "pki", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	v := e.vault.srv
	v.Must(t, "POST", "auth/kubernetes/config", map[string]any{
		"kubernetes_host": kubecluster.APIServer, "kubernetes_ca_cert": string(clusterCA),
		"token_reviewer_jwt": reviewer, "disable_local_ca_jwt": true,
	})
	v.Policy(t, "k12-read", `path "secret/data/k12/*" { capabilities = ["read"] }`)
	v.Must(t, "POST", "auth/kubernetes/role/"+vaultRole, map[string]any{
		"bound_service_account_names": []string{"k12-agent"}, "bound_service_account_namespaces": []string{k12NS},
		"audience": "vault", "token_policies": []string{"k12-read"}, "token_ttl": 600,
	})
}

// vaultSecret: the sidecar of a pod running as k12-agent logs in with its projected token,
// fetches the secret and injects it upstream; the secret is nowhere in the pod.
func (e *env) vaultSecret(ctx context.Context, t *testing.T) {
	e.configureVault(ctx, t)
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	secret := "k12-" + hex.EncodeToString(b)
	e.vault.srv.PutKV(t, "k12/upstream", map[string]any{"token": secret})
	tokensBefore := e.vaultTokens(t)
	e.apply(ctx, t, `apiVersion: v1
kind: ConfigMap
metadata: {name: k12-vault-policy, namespace: `+k12NS+`}
data:
  policy.yaml: |
    apiVersion: airlock/v1
    kind: EgressPolicy
    metadata: {name: k12-vault}
    spec:
      mode: enforce
      egress:
        - name: allowed
          hosts: ["`+allowedHost+`"]
          ports: [80]
          allowCleartext: true
          inject:
            - header: Authorization
              value: 'Bearer {{ secret "upstream-token" }}'
      secrets:
        upstream-token:
          vault: {path: secret/data/k12/upstream, field: token}
`)
	pod := strings.Replace(probePod(k12NS, "k12-vault-agent", true), "annotations: {airlock.dev/policy: agent-policy}", "annotations: {airlock.dev/policy: k12-vault-policy}", 1)
	pod = strings.Replace(pod, "spec:\n", "spec:\n  serviceAccountName: k12-agent\n", 1)
	e.apply(ctx, t, pod)
	if err := e.c.WaitPod(ctx, k12NS, "k12-vault-agent"); err != nil {
		logs, _ := e.c.Kubectl(ctx, "-n", k12NS, "logs", "k12-vault-agent", "-c", "airlock", "--tail=30")
		t.Fatalf("%v\nsidecar log:\n%s", err, logs)
	}
	before := len(e.allowed.headers())
	if out := e.probe(ctx, t, k12NS, "k12-vault-agent", "http", "http://"+allowedHost+"/vault"); !strings.HasPrefix(out, "status=200") {
		logs, _ := e.c.Kubectl(ctx, "-n", k12NS, "logs", "k12-vault-agent", "-c", "airlock", "--tail=30")
		t.Fatalf("allowed host with a Vault credential: %s, want status=200\nsidecar log:\n%s", out, logs)
	}
	seen := e.allowed.headers()[before:]
	if len(seen) != 1 || seen[0].Get("Authorization") != "Bearer "+secret {
		t.Errorf("upstream saw %d requests, Authorization %q; want the Vault secret", len(seen), authOf(seen))
	}
	e.checkSecretNotInPod(ctx, t, secret)
	if n := e.vaultTokens(t); n != tokensBefore+1 {
		t.Errorf("Vault holds %d tokens with the pod running, %d before: want the sidecar's login", n, tokensBefore)
	}
	e.kubectl(ctx, t, "-n", k12NS, "delete", "pod", "k12-vault-agent", "--wait=true", "--timeout=2m")
	// The kubelet stops the native sidecar last, with SIGTERM: it revokes its Vault token.
	if n := e.vaultTokens(t); n != tokensBefore {
		t.Errorf("Vault holds %d tokens after the pod was deleted, %d before: the sidecar did not revoke its token", n, tokensBefore)
	}
}

// vaultTokens counts the tokens Vault holds (the root token included).
func (e *env) vaultTokens(t *testing.T) int {
	t.Helper()
	out, err := e.vault.srv.Do("LIST", "auth/token/accessors", nil)
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := out["data"].(map[string]any)["keys"].([]any)
	return len(keys)
}

func authOf(h []http.Header) []string {
	var out []string
	for _, x := range h {
		out = append(out, x.Get("Authorization"))
	}
	return out
}

// checkSecretNotInPod looks for the secret in the app container (environment and files),
// in the namespace's API objects and events, and in the sidecar's log; and for any Vault
// token in the app container.
func (e *env) checkSecretNotInPod(ctx context.Context, t *testing.T, secret string) {
	if out := e.probe(ctx, t, k12NS, "k12-vault-agent", "find", secret); !strings.HasPrefix(out, "found=none ") || !strings.HasSuffix(out, "secrets=absent") {
		t.Errorf("app container: %s, want found=none and no service-account token directory", out)
	}
	// The search itself finds what is there: the CA bundle's path in the environment, and
	// the test Vault CA's PEM in the bundle file (system roots, then the sidecar's CA: not
	// the Vault CA, which only the sidecar mounts).
	if out := e.probe(ctx, t, k12NS, "k12-vault-agent", "find", "/etc/airlock/ca/ca-bundle.pem"); !strings.Contains(out, "env:SSL_CERT_FILE") {
		t.Errorf("app container: %s, want the search to find SSL_CERT_FILE", out)
	}
	vaultCALine := strings.Split(strings.TrimSpace(string(e.vault.caPEM)), "\n")[1]
	if out := e.probe(ctx, t, k12NS, "k12-vault-agent", "find", vaultCALine); !strings.HasPrefix(out, "found=none ") {
		t.Errorf("app container holds the Vault CA: %s (only the sidecar mounts it)", out)
	}
	objects := e.kubectl(ctx, t, "-n", k12NS, "get", "pods,configmaps,secrets,events,serviceaccounts", "-o", "json")
	if !strings.Contains(objects, "k12-vault-agent") {
		t.Fatalf("the namespace's objects do not show the pod: the check below would prove nothing")
	}
	if strings.Contains(objects, secret) {
		t.Errorf("the secret is in the API objects of namespace %s", k12NS)
	}
	if logs := e.kubectl(ctx, t, "-n", k12NS, "logs", "k12-vault-agent", "-c", "airlock"); strings.Contains(logs, secret) {
		t.Errorf("the secret is in the sidecar's log")
	}
	p := e.getPod(ctx, t, k12NS, "k12-vault-agent")
	for _, m := range p.Spec.Containers[0].VolumeMounts {
		if strings.Contains(m.MountPath, "secrets") {
			t.Errorf("app container mounts %s", m.MountPath)
		}
	}
	// A pod that projects a Vault-audience token for itself is refused at admission.
	thief := strings.Replace(probePod(k12NS, "k12-thief", true), "spec:\n", `spec:
  serviceAccountName: k12-agent
  volumes:
    - name: mine
      projected: {sources: [{serviceAccountToken: {audience: vault, path: token}}]}
`, 1)
	if out, err := e.c.Apply(ctx, thief); err == nil || !strings.Contains(out, "airlock refuses the pod") {
		t.Errorf("pod projecting a Vault token for itself: %v %s, want refused by the webhook", err, out)
	}
}

// headers returns the request headers the upstream has seen so far.
func (u *upstream) headers() []http.Header {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]http.Header(nil), u.seen...)
}
