package cluster

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/test/kubecluster"
	"github.com/airlock-dev/airlock/test/testnet"
)

// The test hosts, on the cluster's hosts0 link (reachable from every pod), and their names
// in the test DNS server the sidecars resolve through.
const (
	allowedHost = "api.allowed.test"
	allowedIP   = "198.19.101.10"
	deniedHost  = "evil.denied.test"
	deniedIP    = "198.19.101.20"
	dnsAddr     = kubecluster.HostIP + ":53"
	testNS      = "agents"
)

// kernelEnforced says whether the sidecar's kernel enforcement holds on this cluster: the
// node agent (airlock node, installed by deploy/) holds it for the unprivileged sidecars, so
// the webhook injects production sidecars and the kernel checks (EPERM, pins) run.
const kernelEnforced = true

var webhookEnvironment = map[bool]string{true: "production", false: "development"}[kernelEnforced]

// env is one cluster with airlock installed, shared by the subtests.
type env struct {
	c       *kubecluster.Cluster
	ns      *testnet.Netns
	allowed *upstream
	denied  *upstream
	vault   *vaultFront
	// webhookEnv is more of the webhook's environment in the install overlay (YAML list
	// items), for tests that install it configured otherwise.
	webhookEnv string
}

// upstream is a plain HTTP test host that records the requests it saw.
type upstream struct {
	mu   sync.Mutex
	seen []http.Header
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.seen = append(u.seen, r.Header.Clone())
	u.mu.Unlock()
	fmt.Fprintf(w, "upstream host=%s path=%s\n", r.Host, r.URL.Path)
}

func (u *upstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.seen)
}

func TestAirlockOnARealCluster(t *testing.T) {
	t.Parallel() // beside the other clusters (allowClusterTestsInParallel)
	bins := kubecluster.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	e := startEnv(ctx, t, bins)
	t.Run("install", func(t *testing.T) { e.install(ctx, t) })
	if t.Failed() {
		return
	}
	t.Run("labelled pod injected and enforced", func(t *testing.T) { e.labelledPod(ctx, t) })
	t.Run("unlabelled pod untouched", func(t *testing.T) { e.unlabelledPod(ctx, t) })
	t.Run("kube-system never patched", func(t *testing.T) { e.kubeSystemPod(ctx, t) })
	t.Run("vault kubernetes auth", func(t *testing.T) { e.vaultSecret(ctx, t) })
	t.Run("sandbox create list delete", func(t *testing.T) { e.sandboxLifecycle(ctx, t) })
}

func startEnv(ctx context.Context, t *testing.T, bins *kubecluster.Binaries) *env {
	id := make([]byte, 3)
	_, _ = rand.Read(id)
	ns := testnet.NewNetns(t, "airlock-kube-"+hex.EncodeToString(id))
	buildCLI() // in the background, while the cluster boots
	start := time.Now()
	c, err := kubecluster.Start(ctx, bins, t.TempDir(), "/run/netns/"+ns.Name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	t.Logf("cluster Ready in %s", time.Since(start).Round(time.Second))
	e := &env{c: c, ns: ns, allowed: &upstream{}, denied: &upstream{}}
	for ip, u := range map[string]*upstream{allowedIP: e.allowed, deniedIP: e.denied} {
		ns.IP(t, "addr", "add", ip+"/32", "dev", "hosts0")
		l, err := ns.Listen("tcp", ip+":80")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: u, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(func() { srv.Close() })
	}
	dns := testnet.StartDNSServer(t, ns, netip.MustParseAddrPort(dnsAddr))
	dns.Set(allowedHost, 5, netip.MustParseAddr(allowedIP))
	dns.Set(deniedHost, 5, netip.MustParseAddr(deniedIP))
	e.startVault(ctx, t)
	return e
}

func (e *env) kubectl(ctx context.Context, t *testing.T, args ...string) string {
	t.Helper()
	out, err := e.c.Kubectl(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (e *env) apply(ctx context.Context, t *testing.T, manifest string) {
	t.Helper()
	if out, err := e.c.Apply(ctx, manifest); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
}

// install does what docs/kubernetes.md tells a platform team: the webhook's serving
// certificate as a TLS Secret, kubectl apply -k with an overlay of deploy/ that sets the
// cluster's DNS address, the caBundle, and waiting for the rollout.
func (e *env) install(ctx context.Context, t *testing.T) {
	start := time.Now()
	dir := t.TempDir()
	ca := testnet.NewCA(t, dir)
	leaf, err := ca.Leaf("airlock-webhook.airlock-system.svc")
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(leaf.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writeFile(t, certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Certificate[0]}))
	writeFile(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	deploy, err := filepath.Abs("../../../deploy")
	if err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(dir, "overlay")
	rel, err := filepath.Rel(overlay, deploy)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(overlay, "kustomization.yaml"), []byte(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [`+rel+`]
patches:
  - patch: |-
      apiVersion: apps/v1
      kind: Deployment
      metadata: {name: airlock-webhook, namespace: airlock-system}
      spec:
        template:
          spec:
            containers:
              - name: webhook
                env:
                  - {name: AIRLOCK_UPSTREAM_DNS, value: "`+dnsAddr+`"}
                  - {name: AIRLOCK_ENVIRONMENT, value: "`+webhookEnvironment+`"}`+webhookVaultEnv()+e.webhookEnv+`
`))
	e.kubectl(ctx, t, "apply", "-f", filepath.Join(deploy, "namespace.yaml"))
	e.kubectl(ctx, t, "-n", "airlock-system", "create", "secret", "tls", "airlock-webhook-tls", "--cert", certFile, "--key", keyFile)
	// A platform team's install prints no warnings (Pod Security, deprecated fields).
	if out := e.kubectl(ctx, t, "apply", "-k", overlay); strings.Contains(strings.ToLower(out), "warning") {
		t.Errorf("kubectl apply -k printed warnings:\n%s", out)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "test-ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	e.kubectl(ctx, t, "patch", "mutatingwebhookconfiguration", "airlock-sidecar-injector", "--type=json",
		"-p", `[{"op":"replace","path":"/webhooks/0/clientConfig/caBundle","value":"`+base64.StdEncoding.EncodeToString(caPEM)+`"}]`)
	if out, err := e.c.Kubectl(ctx, "-n", "airlock-system", "rollout", "status", "deploy/airlock-webhook", "--timeout=4m"); err != nil {
		desc, _ := e.c.Kubectl(ctx, "-n", "airlock-system", "describe", "pods")
		t.Fatalf("%v\n%s\n%s", err, out, desc)
	}
	// The webhook gives every sidecar the Vault settings, and the sidecar mounts the Vault CA
	// ConfigMap: create every namespace that holds injected pods with sandboxNamespace (or
	// apply vaultCAConfigMapFor there), else its pods wait in ContainerCreating.
	e.sandboxNamespace(ctx, t, testNS)
	e.sandboxNamespace(ctx, t, k12NS)
	e.checkExamplePod(ctx, t, deploy)
	t.Logf("installed in %s", time.Since(start).Round(time.Second))
}

func writeFile(t *testing.T, name string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// pod is the part of a Pod the tests read.
type pod struct {
	Metadata struct {
		UID         string            `json:"uid"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		InitContainers []container `json:"initContainers"`
		Containers     []container `json:"containers"`
		DNSPolicy      string      `json:"dnsPolicy"`
	} `json:"spec"`
	Status struct {
		QOSClass string `json:"qosClass"`
	} `json:"status"`
}

type container struct {
	Name          string `json:"name"`
	RestartPolicy string `json:"restartPolicy"`
	Env           []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	} `json:"env"`
	VolumeMounts []struct {
		MountPath string `json:"mountPath"`
	} `json:"volumeMounts"`
}

func (c container) env(name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func (e *env) getPod(ctx context.Context, t *testing.T, ns, name string) pod {
	t.Helper()
	var p pod
	if err := json.Unmarshal([]byte(e.kubectl(ctx, t, "-n", ns, "get", "pod", name, "-o", "json")), &p); err != nil {
		t.Fatal(err)
	}
	return p
}

func policyConfigMap(allowed ...string) string {
	hosts, _ := json.Marshal(allowed)
	return `apiVersion: v1
kind: ConfigMap
metadata: {name: agent-policy, namespace: ` + testNS + `}
data:
  policy.yaml: |
    apiVersion: airlock/v1
    kind: EgressPolicy
    metadata: {name: cluster-test}
    spec:
      mode: enforce
      dns: {onDeny: refused}
      egress:
        - name: allowed
          hosts: ` + string(hosts) + `
          ports: [80]
`
}

func probePod(ns, name string, labelled bool) string {
	meta := ""
	if labelled {
		meta = `
  labels: {airlock.dev/inject: "true"}
  annotations: {airlock.dev/policy: agent-policy}`
	}
	return `apiVersion: v1
kind: Pod
metadata:
  name: ` + name + `
  namespace: ` + ns + meta + `
spec:
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 5
  containers:
    - name: app
      image: ` + kubecluster.ProbeImage + `
      imagePullPolicy: Never
`
}

// probe runs the probe program in the app container and returns its output line.
func (e *env) probe(ctx context.Context, t *testing.T, ns, pod string, args ...string) string {
	t.Helper()
	out, err := e.c.Kubectl(ctx, append([]string{"-n", ns, "exec", pod, "-c", "app", "--", "/probe"}, args...)...)
	if err != nil {
		t.Errorf("probe %v: %v", args, err)
	}
	return strings.TrimSpace(out)
}

func (e *env) labelledPod(ctx context.Context, t *testing.T) {
	e.apply(ctx, t, policyConfigMap(allowedHost))
	e.apply(ctx, t, probePod(testNS, "agent", true))
	if err := e.c.WaitPod(ctx, testNS, "agent"); err != nil {
		logs, _ := e.c.Kubectl(ctx, "-n", testNS, "logs", "agent", "-c", "airlock", "--tail=30")
		t.Fatalf("%v\nsidecar log:\n%s", err, logs)
	}
	p := e.getPod(ctx, t, testNS, "agent")
	if len(p.Spec.InitContainers) == 0 || p.Spec.InitContainers[0].Name != "airlock" || p.Spec.InitContainers[0].RestartPolicy != "Always" {
		t.Fatalf("labelled pod has init containers %+v, want the airlock native sidecar first", p.Spec.InitContainers)
	}
	app := p.Spec.Containers[0]
	if app.env("HTTPS_PROXY") != "http://127.0.0.1:3128" || app.env("HTTP_PROXY") != "http://127.0.0.1:3128" || app.env("SSL_CERT_FILE") != "/etc/airlock/ca/ca-bundle.pem" {
		t.Errorf("app container env %+v lacks the proxy and CA environment", app.Env)
	}
	hasCA := false
	for _, m := range app.VolumeMounts {
		hasCA = hasCA || m.MountPath == "/etc/airlock/ca"
	}
	if !hasCA {
		t.Errorf("app container mounts %+v, want the CA volume at /etc/airlock/ca", app.VolumeMounts)
	}
	e.checkEnforced(ctx, t)
	e.checkPolicyUpdate(ctx, t)
	e.checkDeleteLeavesNothing(ctx, t, p)
}

func (e *env) checkEnforced(ctx context.Context, t *testing.T) {
	if out := e.probe(ctx, t, testNS, "agent", "http", "http://"+allowedHost+"/hello"); !strings.HasPrefix(out, "status=200") {
		t.Errorf("allowed host: %s, want status=200", out)
	}
	if out := e.probe(ctx, t, testNS, "agent", "http", "http://"+deniedHost+"/"); !strings.HasPrefix(out, "status=403") {
		t.Errorf("denied host: %s, want status=403", out)
	}
	if kernelEnforced {
		if out := e.probe(ctx, t, testNS, "agent", "dial", deniedIP+":80"); out != "dial=EPERM" {
			t.Errorf("direct connect to a denied address: %s, want dial=EPERM from the kernel", out)
		}
	}
	if out := e.probe(ctx, t, testNS, "agent", "dns", deniedHost); !strings.HasPrefix(out, "rcode=Refused") {
		t.Errorf("DNS query for a denied name: %s, want rcode=Refused", out)
	}
	if n := e.denied.count(); n != 0 && kernelEnforced {
		t.Errorf("the denied host saw %d requests", n)
	}
}

// checkPolicyUpdate allows the denied host in the ConfigMap: the running sidecar picks it up
// (the kubelet updates the mounted ConfigMap within its sync period) without a restart.
func (e *env) checkPolicyUpdate(ctx context.Context, t *testing.T) {
	restarts := e.kubectl(ctx, t, "-n", testNS, "get", "pod", "agent", "-o", "jsonpath={.status.initContainerStatuses[0].restartCount}")
	e.apply(ctx, t, policyConfigMap(allowedHost, deniedHost))
	deadline := time.Now().Add(90 * time.Second)
	var out string
	for time.Now().Before(deadline) { // the kubelet's sync and the sidecar's reload are observed, bounded
		out = e.probe(ctx, t, testNS, "agent", "http", "http://"+deniedHost+"/")
		if strings.HasPrefix(out, "status=200") {
			break
		}
		time.Sleep(time.Second)
	}
	if !strings.HasPrefix(out, "status=200") {
		t.Errorf("after the ConfigMap allowed %s: %s, want status=200", deniedHost, out)
	}
	if after := e.kubectl(ctx, t, "-n", testNS, "get", "pod", "agent", "-o", "jsonpath={.status.initContainerStatuses[0].restartCount}"); after != restarts {
		t.Errorf("sidecar restarted (%s -> %s): the policy should reload in place", restarts, after)
	}
}

// checkDeleteLeavesNothing deletes the pod and looks for its pins and cgroups on the node.
func (e *env) checkDeleteLeavesNothing(ctx context.Context, t *testing.T, p pod) {
	pins := "/sys/fs/bpf/airlock/" + testNS + "~agent" // ebpf.PinDirName: bpffs refuses '.'

	if out, err := e.c.Command(ctx, "ls", pins).CombinedOutput(); err != nil && kernelEnforced {
		t.Errorf("no pins at %s while the pod runs (%v: %s): the check below would prove nothing", pins, err, out)
	}
	e.kubectl(ctx, t, "-n", testNS, "delete", "pod", "agent", "--wait=true", "--timeout=2m")
	uid := strings.ReplaceAll(p.Metadata.UID, "-", "_")
	deadline := time.Now().Add(60 * time.Second)
	for { // the kubelet removes a deleted pod's cgroups on its own schedule: observe, bounded
		left := e.leftovers(ctx, pins, p.Metadata.UID, uid)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("deleted pod left %v", left)
			return
		}
		time.Sleep(time.Second)
	}
}

func (e *env) leftovers(ctx context.Context, pins string, uids ...string) []string {
	var left []string
	if err := e.c.Command(ctx, "test", "-e", pins).Run(); err == nil {
		left = append(left, pins)
	}
	for _, h := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/pids", "/sys/fs/cgroup"} {
		_ = filepath.Walk(filepath.Join(h, e.c.CgroupRoot), func(path string, info os.FileInfo, err error) error {
			if err == nil && info.IsDir() {
				for _, u := range uids {
					if strings.Contains(filepath.Base(path), u) {
						left = append(left, path)
					}
				}
			}
			return nil
		})
	}
	return left
}

func (e *env) unlabelledPod(ctx context.Context, t *testing.T) {
	e.apply(ctx, t, probePod(testNS, "plain", false))
	p := e.getPod(ctx, t, testNS, "plain")
	if len(p.Spec.InitContainers) != 0 || p.Spec.Containers[0].env("HTTPS_PROXY") != "" || p.Metadata.Annotations["airlock.dev/injected"] != "" {
		t.Errorf("unlabelled pod was patched: %+v", p.Spec)
	}
}

func (e *env) kubeSystemPod(ctx context.Context, t *testing.T) {
	e.apply(ctx, t, probePod("kube-system", "labelled", true))
	p := e.getPod(ctx, t, "kube-system", "labelled")
	if len(p.Spec.InitContainers) != 0 || p.Spec.Containers[0].env("HTTPS_PROXY") != "" {
		t.Errorf("labelled pod in kube-system was patched: %+v", p.Spec)
	}
}
