package cluster

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/airlock-dev/airlock/test/kubecluster"
)

// sandboxNS is where deploy/ lets the group airlock:sandbox-managers manage sandboxes.
const sandboxNS = "airlock-sandboxes"

// sandboxLifecycle runs `airlock sandbox create|list|delete --backend kubernetes` against the
// cluster as a member of airlock:sandbox-managers (with only the role deploy/rbac.yaml grants
// in airlock-sandboxes): create waits for the injected sidecar with progress lines, the pod is
// enforced like any labelled pod, list shows it, delete removes it and the policy ConfigMap
// made for it.
func (e *env) sandboxLifecycle(ctx context.Context, t *testing.T) {
	bin := airlockCLI(ctx, t)
	e.apply(ctx, t, vaultCAConfigMapFor(sandboxNS, e.vault.caPEM))
	manager := e.managerKubeconfig(t)
	admin := func(args ...string) (string, error) {
		out, err := e.c.Command(ctx, bin, args...).CombinedOutput()
		return string(out), err
	}
	airlock := func(args ...string) (string, error) {
		return admin(append(args, "--kubeconfig", manager)...)
	}
	// The impersonation holds: outside airlock-sandboxes the manager may do nothing.
	if out, err := airlock("sandbox", "list", "--backend", "kubernetes", "--namespace", testNS); err == nil || !strings.Contains(out, "forbidden") {
		t.Errorf("sandbox list in %s as the sandbox manager: %v %s, want forbidden", testNS, err, out)
	}
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, policy, []byte(`apiVersion: airlock/v1
kind: EgressPolicy
metadata: {name: sandbox}
spec:
  mode: enforce
  egress:
    - name: allowed
      hosts: ["`+allowedHost+`"]
      ports: [80]
`))
	out, err := airlock("sandbox", "create", "k12-box", "--backend", "kubernetes", "--namespace", sandboxNS,
		"--image", kubecluster.ProbeImage, "--policy", policy)
	t.Logf("sandbox create:\n%s", out)
	if err != nil {
		t.Fatalf("sandbox create: %v", err)
	}
	for _, want := range []string{"created pod " + sandboxNS + "/k12-box", "policy " + policy + " written to ConfigMap " + sandboxNS + "/k12-box-policy",
		"starting the airlock sidecar", "ready: sidecar enforcing, sandbox running", "sandbox k12-box ready in"} {
		if !strings.Contains(out, want) {
			t.Errorf("sandbox create printed no %q", want)
		}
	}
	r, err := e.c.Kubectl(ctx, "-n", sandboxNS, "exec", "k12-box", "-c", "sandbox", "--", "/probe", "http", "http://"+allowedHost+"/")
	if err != nil || !strings.HasPrefix(strings.TrimSpace(r), "status=200") {
		t.Errorf("sandbox pod to the allowed host: %v %s", err, r)
	}
	if r := e.probeIn(ctx, t, "k12-box", "http", "http://"+deniedHost+"/"); !strings.HasPrefix(r, "status=403") {
		t.Errorf("sandbox pod to the denied host: %s, want status=403", r)
	}
	e.checkList(ctx, t, airlock, admin, true)
	out, err = airlock("sandbox", "delete", "--backend", "kubernetes", "--namespace", sandboxNS, "k12-box")
	t.Logf("sandbox delete:\n%s", out)
	if err != nil {
		t.Fatalf("sandbox delete: %v", err)
	}
	for _, want := range []string{"deleting pod " + sandboxNS + "/k12-box", "pod " + sandboxNS + "/k12-box gone", "policy ConfigMap " + sandboxNS + "/k12-box-policy deleted", "sandbox " + sandboxNS + "/k12-box deleted in"} {
		if !strings.Contains(out, want) {
			t.Errorf("sandbox delete printed no %q", want)
		}
	}
	if left, _ := e.c.Kubectl(ctx, "-n", sandboxNS, "get", "pod/k12-box", "configmap/k12-box-policy", "--ignore-not-found", "-o", "name"); strings.TrimSpace(left) != "" {
		t.Errorf("after delete the cluster still has %s", left)
	}
	e.checkList(ctx, t, airlock, admin, false)
	if out, err := airlock("sandbox", "delete", "--backend", "kubernetes", "--namespace", sandboxNS, "k12-box"); err != nil || !strings.Contains(out, "not found (nothing to delete)") {
		t.Errorf("deleting it again: %v %s, want success with not found", err, out)
	}
	// A pod sandbox create did not make is not airlock's to delete.
	if out, err := admin("sandbox", "delete", "--backend", "kubernetes", "--namespace", testNS, "plain"); err == nil || !strings.Contains(out, "delete it with kubectl") {
		t.Errorf("deleting an unmanaged pod: %v %s, want refused", err, out)
	}
}

// probeIn runs the probe in the sandbox container of a sandbox pod in sandboxNS.
func (e *env) probeIn(ctx context.Context, t *testing.T, pod string, args ...string) string {
	t.Helper()
	out, err := e.c.Kubectl(ctx, append([]string{"-n", sandboxNS, "exec", pod, "-c", "sandbox", "--", "/probe"}, args...)...)
	if err != nil {
		t.Errorf("probe %v: %v", args, err)
	}
	return strings.TrimSpace(out)
}

// checkList runs sandbox list (table and JSON) and looks for k12-box, running with its
// sidecar ready, or absent.
func (e *env) checkList(ctx context.Context, t *testing.T, airlock, admin func(...string) (string, error), present bool) {
	out, err := airlock("sandbox", "list", "--backend", "kubernetes", "--namespace", sandboxNS)
	if err != nil || !strings.HasPrefix(out, "NAMESPACE") {
		t.Fatalf("sandbox list: %v\n%s", err, out)
	}
	if strings.Contains(out, "k12-box") != present {
		t.Errorf("sandbox list (want k12-box listed: %v):\n%s", present, out)
	}
	js, err := admin("sandbox", "list", "--backend", "kubernetes", "--all-namespaces", "--json")
	if err != nil {
		t.Fatalf("sandbox list --json: %v\n%s", err, js)
	}
	var list []struct{ Name, Namespace, Phase, Sidecar, Policy string }
	if err := json.Unmarshal([]byte(js), &list); err != nil {
		t.Fatalf("sandbox list --json: %v\n%s", err, js)
	}
	found := false
	for _, s := range list {
		if s.Name == "k12-box" && s.Namespace == sandboxNS {
			found = true
			if s.Phase != "Running" || s.Sidecar != "ready" || s.Policy != "k12-box-policy" {
				t.Errorf("sandbox list --json shows %+v, want Running, sidecar ready, policy k12-box-policy", s)
			}
		}
	}
	if found != present {
		t.Errorf("sandbox list --json (want k12-box listed: %v): %s", present, js)
	}
}

// managerKubeconfig writes a kubeconfig that impersonates user k12-manager in the group
// airlock:sandbox-managers, which deploy/rbac.yaml binds to airlock-sandbox-manager in
// airlock-sandboxes.
func (e *env) managerKubeconfig(t *testing.T) string {
	cfg, err := clientcmd.LoadFromFile(e.c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate = "k12-manager"
		a.ImpersonateGroups = []string{"airlock:sandbox-managers"}
	}
	file := filepath.Join(t.TempDir(), "manager.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, file); err != nil {
		t.Fatal(err)
	}
	return file
}

// checkExamplePod has the API server admit deploy/sandbox-pod.yaml again (server-side dry
// run, under another name: the example was created, gated, before the webhook answered, and
// its image is never pulled here), as docs/kubernetes.md's step 3 does: the webhook injects it and lifts
// its scheduling gate.
func (e *env) checkExamplePod(ctx context.Context, t *testing.T, deploy string) {
	data, err := os.ReadFile(filepath.Join(deploy, "sandbox-pod.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	manifest := strings.Replace(string(data), "name: agent-example", "name: k12-example", 1)
	cmd := e.c.Command(ctx, e.c.Bins.Path("kubectl"), "create", "--dry-run=server", "-o", "json", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("admit deploy/sandbox-pod.yaml: %v", err)
	}
	var p struct {
		Spec struct {
			InitContainers  []struct{ Name string } `json:"initContainers"`
			SchedulingGates []struct{ Name string } `json:"schedulingGates"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(out, &p); err != nil {
		t.Fatal(err)
	}
	if len(p.Spec.InitContainers) == 0 || p.Spec.InitContainers[0].Name != "airlock" || len(p.Spec.SchedulingGates) != 0 {
		t.Errorf("deploy/sandbox-pod.yaml admitted as init containers %v, gates %v; want the sidecar and no gate", p.Spec.InitContainers, p.Spec.SchedulingGates)
	}
}
