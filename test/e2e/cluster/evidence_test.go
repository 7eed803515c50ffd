package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/ship"
	"github.com/airlock-dev/airlock/test/kubecluster"
	"github.com/airlock-dev/airlock/test/s3test"
)

// The evidence test's S3 server (versitygw, test/s3test) runs in the cluster's network
// namespace on the hosts link, where the sidecars reach it through their operator dial path.
const (
	s3IP       = "198.19.101.40"
	s3Endpoint = "http://" + s3IP + ":7070"
	k14NS      = "k14"
	k14Bucket  = "k14-evidence"
	k14Prefix  = "trails"
)

// evidence is the evidence test's world: the S3 server, a store on its bucket for the
// test's own reads and attacks, the airlock CLI and the verifier's key file.
type evidence struct {
	*env
	s3    *s3test.Server
	store *ship.S3Store
	bin   string
	pub   string
}

// TestEvidenceOnARealCluster: every injected pod keeps a chained, signed audit trail on its
// audit volume and ships it to a real S3 server with Object Lock; the trail is one chain
// across a killed sidecar, closed when the pod is deleted, verified and exported from the
// bucket with the key from airlock's namespace; S3 going down neither stops requests nor
// loses events; a pod deleted while S3 is down is reported open at its last shipped seq, the
// range after it named as not shipped; a pod annotated for Vault Transit signing has its
// trail signed by Vault and verified with the keys read from Vault.
func TestEvidenceOnARealCluster(t *testing.T) {
	t.Parallel() // beside the other clusters (allowClusterTestsInParallel)
	bins := kubecluster.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	e := &evidence{env: startEnv(ctx, t, bins)}
	e.startS3(ctx, t)
	e.webhookEnv = `
                  - {name: AIRLOCK_AUDIT_S3_BUCKET, value: "` + k14Bucket + `"}
                  - {name: AIRLOCK_AUDIT_S3_PREFIX, value: "` + k14Prefix + `"}
                  - {name: AIRLOCK_AUDIT_S3_ENDPOINT, value: "` + s3Endpoint + `"}
                  - {name: AIRLOCK_AUDIT_S3_CREDENTIALS_SECRET, value: k14-s3}
                  - {name: AIRLOCK_AUDIT_RETENTION_MODE, value: COMPLIANCE}
                  - {name: AIRLOCK_AUDIT_RETENTION, value: 1h}
                  - {name: AIRLOCK_AUDIT_SIZE_LIMIT, value: 16Mi}
                  - {name: AIRLOCK_AUDIT_MAX_BYTES, value: "4096"}
                  - {name: AIRLOCK_AUDIT_MAX_AGE, value: 3s}`
	t.Run("install", func(t *testing.T) { e.install(ctx, t) })
	if t.Failed() {
		return
	}
	e.prepareNamespace(ctx, t)
	if t.Failed() {
		return
	}
	// Each step needs a pod the one before showed can start: stop at the first failure.
	_ = t.Run("Pod Security restricted admits the injected trail", func(t *testing.T) { e.restrictedAdmits(ctx, t) }) &&
		t.Run("one chain across a sidecar restart, closed, verified and exported from the bucket", func(t *testing.T) { e.restartAndDelete(ctx, t) }) &&
		t.Run("S3 down: requests served, the backlog ships when it is back", func(t *testing.T) { e.s3Outage(ctx, t) }) &&
		t.Run("pod deleted while S3 is down: open at the last shipped seq, the range after it named", func(t *testing.T) { e.lostTail(ctx, t) }) &&
		t.Run("Vault Transit signs the trail by annotation, verified with Vault's keys", func(t *testing.T) { e.transitSigned(ctx, t) })
}

// startS3 runs versitygw in the cluster's namespace and makes the bucket, with Object Lock.
func (e *evidence) startS3(ctx context.Context, t *testing.T) {
	e.ns.IP(t, "addr", "add", s3IP+"/32", "dev", "hosts0")
	e.s3 = s3test.StartWith(t, s3test.Options{Addr: s3IP + ":7070", DialContext: e.ns.DialContext,
		Command: func(bin string, args ...string) *exec.Cmd { return e.ns.Command(ctx, bin, args...) }})
	var err error
	e.store, err = ship.NewS3Store(ship.S3Config{Bucket: k14Bucket, Endpoint: s3Endpoint, Transport: &http.Transport{DialContext: e.ns.DialContext},
		Credentials: func(context.Context) (string, string, string, error) { return e.s3.AccessKey, e.s3.SecretKey, "", nil }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(k14Bucket), ObjectLockEnabledForBucket: aws.Bool(true)}); err != nil {
		t.Fatalf("create bucket: %v\n%s", err, e.s3.Stderr())
	}
	e.bin = airlockCLI(ctx, t)
}

// prepareNamespace makes the sandbox namespace as a platform team would: the bucket's
// credentials and the namespace's signing key as Secrets there, the policy, and the signing
// key's public half in a ConfigMap in airlock's namespace, where verifiers read it.
func (e *evidence) prepareNamespace(ctx context.Context, t *testing.T) {
	e.sandboxNamespace(ctx, t, k14NS)
	dir := t.TempDir()
	key, pub := filepath.Join(dir, "private.pem"), filepath.Join(dir, "k14.pem")
	if out, err := e.c.Command(ctx, e.bin, "audit", "keygen", "-o", key, "--pub", pub).CombinedOutput(); err != nil {
		t.Fatalf("keygen: %v %s", err, out)
	}
	creds := filepath.Join(dir, "credentials")
	writeFile(t, creds, []byte(e.s3.AccessKey+":"+e.s3.SecretKey))
	e.kubectl(ctx, t, "-n", k14NS, "create", "secret", "generic", "k14-s3", "--from-file=credentials="+creds)
	e.kubectl(ctx, t, "-n", k14NS, "create", "secret", "generic", "k14-audit-key", "--from-file=private.pem="+key)
	e.kubectl(ctx, t, "-n", "airlock-system", "create", "configmap", "airlock-audit-keys", "--from-file=k14.pem="+pub)
	e.apply(ctx, t, strings.Replace(policyConfigMap(allowedHost), "namespace: "+testNS, "namespace: "+k14NS, 1))
	// The verifier's key comes from the installer's ConfigMap, never from the bucket or the pod.
	got := e.kubectl(ctx, t, "-n", "airlock-system", "get", "configmap", "airlock-audit-keys", "-o", `jsonpath={.data.k14\.pem}`)
	e.pub = filepath.Join(t.TempDir(), "verifier.pem")
	writeFile(t, e.pub, []byte(got))
}

// restrictedAdmits has the API server admit (server-side dry run: the webhook, then Pod
// Security "restricted") a labelled pod whose trail is on each kind of audit volume, signed
// with the namespace's Secret: the injected sidecar and its volumes stay restricted.
func (e *evidence) restrictedAdmits(ctx context.Context, t *testing.T) {
	e.apply(ctx, t, `apiVersion: v1
kind: Namespace
metadata:
  name: k14r
  labels: {pod-security.kubernetes.io/enforce: restricted}
`)
	for _, volume := range []string{"", "airlock.dev/audit-volume-claim: k14-trail, ", "airlock.dev/audit-volume-csi-driver: trail.csi.test, "} {
		manifest := `apiVersion: v1
kind: Pod
metadata:
  name: k14r-agent
  namespace: k14r
  labels: {airlock.dev/inject: "true"}
  annotations: {` + volume + `airlock.dev/policy: agent-policy, airlock.dev/audit-signing-secret: k14-audit-key}
spec:
  automountServiceAccountToken: false
  securityContext: {runAsNonRoot: true, runAsUser: 65534, seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: app
      image: ` + kubecluster.ProbeImage + `
      imagePullPolicy: Never
      securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
`
		cmd := e.c.Command(ctx, e.c.Bins.Path("kubectl"), "create", "--dry-run=server", "-o", "json", "-f", "-")
		cmd.Stdin = strings.NewReader(manifest)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("a restricted namespace refuses the injected pod (%s): %v\n%s", volume, err, out)
		}
		var p pod
		if err := json.Unmarshal(out, &p); err != nil {
			t.Fatal(err)
		}
		if len(p.Spec.InitContainers) == 0 || p.Spec.InitContainers[0].Name != "airlock" || !strings.Contains(string(out), "/var/log/airlock/audit.log") {
			t.Errorf("admitted pod (%s) has no sidecar writing the audit log: %s", volume, out)
		}
	}
}

// evidencePod creates a labelled pod signing with the namespace's key, waits for it and
// returns its UID.
func (e *evidence) evidencePod(ctx context.Context, t *testing.T, name string) string {
	t.Helper()
	pod := probePod(k14NS, name, true)
	pod = strings.Replace(pod, "annotations: {airlock.dev/policy: agent-policy}", "annotations: {airlock.dev/policy: agent-policy, airlock.dev/audit-signing-secret: k14-audit-key}", 1)
	pod = strings.Replace(pod, "terminationGracePeriodSeconds: 5", "terminationGracePeriodSeconds: 30", 1)
	e.apply(ctx, t, pod)
	if err := e.c.WaitPod(ctx, k14NS, name); err != nil {
		logs, _ := e.c.Kubectl(ctx, "-n", k14NS, "logs", name, "-c", "airlock", "--tail=40")
		t.Fatalf("%v\nsidecar log:\n%s", err, logs)
	}
	return e.getPod(ctx, t, k14NS, name).Metadata.UID
}

// traffic makes n allowed and n denied requests from the pod's app container.
func (e *evidence) traffic(ctx context.Context, t *testing.T, pod string, n int) {
	t.Helper()
	for i := range n {
		if out := e.probe(ctx, t, k14NS, pod, "http", fmt.Sprintf("http://%s/evidence/%d", allowedHost, i)); !strings.HasPrefix(out, "status=200") {
			t.Fatalf("allowed request: %s, want status=200", out)
		}
		if out := e.probe(ctx, t, k14NS, pod, "http", "http://"+deniedHost+"/"); !strings.HasPrefix(out, "status=403") {
			t.Fatalf("denied request: %s, want status=403", out)
		}
	}
}

// airlock runs the CLI in the cluster's namespace with read credentials for the bucket.
func (e *evidence) airlock(ctx context.Context, args ...string) (string, int) {
	return e.airlockEnv(ctx, nil, args...)
}

// airlockEnv is airlock with more environment.
func (e *evidence) airlockEnv(ctx context.Context, env []string, args ...string) (string, int) {
	cmd := e.c.Command(ctx, e.bin, args...)
	cmd.Env = append(append(cmd.Env, "AWS_ACCESS_KEY_ID="+e.s3.AccessKey, "AWS_SECRET_ACCESS_KEY="+e.s3.SecretKey), env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
	}
	return string(out), code
}

func (e *evidence) verify(ctx context.Context, pod, uid string) (string, int) {
	return e.airlock(ctx, "audit", "verify", fmt.Sprintf("s3://%s/%s/%s/%s/%s/", k14Bucket, k14Prefix, k14NS, pod, uid),
		"--s3-endpoint", s3Endpoint, "--key", e.pub)
}

// deletePod deletes a pod and waits until it is gone: its sidecar has shipped what it could.
func (e *evidence) deletePod(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	e.kubectl(ctx, t, "-n", k14NS, "delete", "pod", name, "--wait=true", "--timeout=3m")
}

// sidecarLog waits (bounded) for the sidecar's log to hold want, and returns it.
func (e *evidence) sidecarLog(ctx context.Context, t *testing.T, pod, want string) string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for { // the sidecar's background shipping is observed in its log, bounded
		logs, _ := e.c.Kubectl(ctx, "-n", k14NS, "logs", pod, "-c", "airlock")
		if strings.Contains(logs, want) {
			return logs
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sidecar did not log %q within 2 minutes:\n%s", want, tail(logs, 30))
		}
		time.Sleep(time.Second)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// killSidecar kills the pod's sidecar process (SIGKILL, as an OOM kill would), which the
// kubelet restarts, and waits until the pod is ready again.
func (e *evidence) killSidecar(ctx context.Context, t *testing.T, pod string) {
	t.Helper()
	want := "\x00" + k14NS + "." + pod + "\x00"
	ents, _ := os.ReadDir("/proc")
	killed := 0
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		if err != nil || !strings.HasPrefix(string(b), "airlock\x00run\x00") || !strings.Contains(string(b), want) {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
			killed++
		}
	}
	if killed != 1 {
		t.Fatalf("killed %d sidecar processes of %s, want 1", killed, pod)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for { // the kubelet's restart is observed, bounded
		n := e.kubectl(ctx, t, "-n", k14NS, "get", "pod", pod, "-o", "jsonpath={.status.initContainerStatuses[0].restartCount}")
		if n != "" && n != "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the sidecar was not restarted within 3 minutes")
		}
		time.Sleep(time.Second)
	}
	if err := e.c.WaitPod(ctx, k14NS, pod); err != nil {
		t.Fatal(err)
	}
}

func (e *evidence) restartAndDelete(ctx context.Context, t *testing.T) {
	uid := e.evidencePod(ctx, t, "k14-agent")
	e.traffic(ctx, t, "k14-agent", 6)
	e.killSidecar(ctx, t, "k14-agent")
	e.traffic(ctx, t, "k14-agent", 6)
	e.deletePod(ctx, t, "k14-agent")

	out, code := e.verify(ctx, "k14-agent", uid)
	if code != 0 || !strings.Contains(out, "intact, closed at seq") || strings.Count(out, "intact") != 1 {
		t.Fatalf("verify s3:// after restart and delete: exit %d\n%s\nwant one chain, intact and closed", code, out)
	}
	t.Logf("verify: %s", strings.TrimSpace(out))
	pack := filepath.Join(t.TempDir(), "pack")
	prefix := fmt.Sprintf("s3://%s/%s/%s/k14-agent/%s/", k14Bucket, k14Prefix, k14NS, uid)
	if out, code := e.airlock(ctx, "audit", "export", "--from", prefix, "-o", pack, "--s3-endpoint", s3Endpoint, "--key", e.pub); code != 0 {
		t.Fatalf("export from the bucket: exit %d\n%s", code, out)
	}
	var m audit.Manifest
	b, err := os.ReadFile(filepath.Join(pack, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &m); err != nil || !m.Verify.Intact || m.Verify.Events < 24 || !m.Verify.KeyGiven {
		t.Fatalf("pack manifest %+v (%v): want intact with every request, checked with the key", m.Verify, err)
	}
	e.attackLockedObjects(ctx, t, "k14-agent", uid)
}

// attackLockedObjects: under COMPLIANCE retention, deleting a shipped version by its id is
// refused by the server; a delete marker hides nothing from verify; an overwrite is named.
func (e *evidence) attackLockedObjects(ctx context.Context, t *testing.T, pod, uid string) {
	versions, err := e.store.Versions(ctx, fmt.Sprintf("%s/%s/%s/%s/", k14Prefix, k14NS, pod, uid))
	if err != nil {
		t.Fatal(err)
	}
	var segs []ship.Version
	for _, v := range versions {
		if strings.Contains(v.Key, "/seg-") {
			segs = append(segs, v)
		}
	}
	if len(segs) < 2 {
		t.Fatalf("%d segments shipped, want several", len(segs))
	}
	if err := e.store.Delete(ctx, segs[0].Key, segs[0].ID); err == nil || !strings.Contains(err.Error(), "AccessDenied") {
		t.Fatalf("delete of version %s under COMPLIANCE retention: %v, want AccessDenied", segs[0].ID, err)
	}
	if err := e.store.Delete(ctx, segs[0].Key, ""); err != nil {
		t.Fatal(err)
	}
	if out, code := e.verify(ctx, pod, uid); code != 0 || !strings.Contains(out, "delete marker") {
		t.Errorf("verify after a delete marker: exit %d\n%s\nwant intact, the marker noted", code, out)
	}
	if err := e.store.Put(ctx, segs[1].Key, []byte("{}\n"), ship.Retention{}); err != nil {
		t.Fatal(err)
	}
	if out, code := e.verify(ctx, pod, uid); code != 1 || !strings.Contains(out, "written over the shipped version") {
		t.Errorf("verify after an overwrite: exit %d\n%s\nwant it named", code, out)
	}
}

func (e *evidence) s3Outage(ctx context.Context, t *testing.T) {
	uid := e.evidencePod(ctx, t, "k14-outage")
	e.traffic(ctx, t, "k14-outage", 3)
	e.sidecarLog(ctx, t, "k14-outage", "audit segment shipped")
	e.s3.Stop()
	e.traffic(ctx, t, "k14-outage", 6) // served with S3 down
	e.sidecarLog(ctx, t, "k14-outage", "audit shipping failed")
	if ready := e.kubectl(ctx, t, "-n", k14NS, "get", "pod", "k14-outage", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`); ready != "True" {
		t.Errorf("pod Ready=%s while shipping lags, want True (fail-open keeps /readyz ready)", ready)
	}
	e.s3.Restart(t)
	e.traffic(ctx, t, "k14-outage", 2)
	e.deletePod(ctx, t, "k14-outage")
	out, code := e.verify(ctx, "k14-outage", uid)
	if code != 0 || !strings.Contains(out, "intact, closed at seq") {
		t.Fatalf("verify after the outage: exit %d\n%s\nwant intact and closed: nothing lost", code, out)
	}
}

func (e *evidence) lostTail(ctx context.Context, t *testing.T) {
	uid := e.evidencePod(ctx, t, "k14-lost")
	e.traffic(ctx, t, "k14-lost", 3)
	e.sidecarLog(ctx, t, "k14-lost", "audit segment shipped")
	e.s3.Stop()
	e.traffic(ctx, t, "k14-lost", 3)
	e.deletePod(ctx, t, "k14-lost")
	e.s3.Restart(t)
	out, code := e.verify(ctx, "k14-lost", uid)
	m := lastShipped.FindStringSubmatch(out)
	if code != exitOpenCode || m == nil {
		t.Fatalf("verify of a pod deleted while S3 was down: exit %d\n%s\nwant open, last shipped seq N", code, out)
	}
	// The missing range starts at N+1; its end was never shipped, and verify says so rather
	// than guess (a head marker, shipped at most once a minute, may name a seq it reached).
	n, _ := strconv.ParseUint(m[1], 10, 64)
	if !strings.Contains(out, fmt.Sprintf("not shipped: seq %d", n+1)) || !strings.Contains(out, "recorded nowhere in the store") {
		t.Fatalf("verify of a pod deleted while S3 was down:\n%s\nwant the range from seq %d named, and its end unknown", out, n+1)
	}
	t.Logf("verify: %s", strings.TrimSpace(out))
}

// lastShipped finds the last shipped seq in verify's line for an open chain.
var lastShipped = regexp.MustCompile(`open, last shipped seq (\d+)`)

// exitOpenCode is airlock audit verify's exit status for an open shipped chain.
const exitOpenCode = 4

// transitSigned: a pod annotated airlock.dev/audit-signing-vault-transit gets a sidecar that
// signs its checkpoints with the Transit key through its own Kubernetes-auth Vault login; no
// signing key is in the pod. Its shipped trail verifies with the public keys read from Vault
// (a token that may read the key, with Vault's default policy), and not with the namespace's
// Secret key.
func (e *evidence) transitSigned(ctx context.Context, t *testing.T) {
	v := e.vault.srv
	e.vaultKubeAuth(ctx, t, k14NS, "k14-agent", "k14-audit")
	v.Must(t, "POST", "transit/keys/k14-audit", map[string]any{"type": "ed25519"})
	v.Policy(t, "k14-audit", `path "transit/sign/k14-audit" { capabilities = ["update"] }
path "transit/keys/k14-audit" { capabilities = ["read"] }`)
	v.Policy(t, "k14-verify", `path "transit/keys/k14-audit" { capabilities = ["read"] }`)
	tok := v.Must(t, "POST", "auth/token/create", map[string]any{"policies": []string{"k14-verify"}, "ttl": "1h"})
	verifyToken, _ := tok["auth"].(map[string]any)["client_token"].(string)

	pod := probePod(k14NS, "k14-transit", true)
	pod = strings.Replace(pod, "annotations: {airlock.dev/policy: agent-policy}", "annotations: {airlock.dev/policy: agent-policy, airlock.dev/audit-signing-vault-transit: transit/k14-audit}", 1)
	pod = strings.Replace(pod, "terminationGracePeriodSeconds: 5", "terminationGracePeriodSeconds: 30\n  serviceAccountName: k14-agent", 1)
	e.apply(ctx, t, pod)
	if err := e.c.WaitPod(ctx, k14NS, "k14-transit"); err != nil {
		logs, _ := e.c.Kubectl(ctx, "-n", k14NS, "logs", "k14-transit", "-c", "airlock", "--tail=40")
		t.Fatalf("%v\nsidecar log:\n%s", err, logs)
	}
	args := e.kubectl(ctx, t, "-n", k14NS, "get", "pod", "k14-transit", "-o", "jsonpath={.spec.initContainers[0].args}")
	if !strings.Contains(args, `"--audit-sign","vault-transit:transit/k14-audit"`) || strings.Contains(args, "--audit-key") {
		t.Fatalf("sidecar args %s: want --audit-sign vault-transit:transit/k14-audit and no --audit-key", args)
	}
	uid := e.getPod(ctx, t, k14NS, "k14-transit").Metadata.UID
	e.traffic(ctx, t, "k14-transit", 3)
	e.sidecarLog(ctx, t, "k14-transit", "audit segment shipped")
	e.deletePod(ctx, t, "k14-transit")

	prefix := fmt.Sprintf("s3://%s/%s/%s/k14-transit/%s/", k14Bucket, k14Prefix, k14NS, uid)
	vaultEnv := []string{"VAULT_ADDR=" + v.Address, "VAULT_TOKEN=" + verifyToken, "VAULT_CACERT=" + v.CACertFile}
	out, code := e.airlockEnv(ctx, vaultEnv, "audit", "verify", prefix, "--s3-endpoint", s3Endpoint, "--vault-transit-key", "transit/k14-audit")
	if code != 0 || !strings.Contains(out, "intact, closed at seq") {
		t.Fatalf("verify with the keys read from Vault: exit %d\n%s\nwant intact and closed", code, out)
	}
	t.Logf("verify --vault-transit-key: %s", strings.TrimSpace(out))
	if out, code := e.airlock(ctx, "audit", "verify", prefix, "--s3-endpoint", s3Endpoint, "--key", e.pub); code == 0 || !strings.Contains(out, "TAMPERED") {
		t.Fatalf("verify with the namespace's Secret key: exit %d\n%s\nwant the Transit-signed checkpoints refused", code, out)
	}
}

// vaultKubeAuth points Vault's Kubernetes auth at the cluster and binds the webhook's role
// (vaultRole) to service account sa in ns (made here, its token not mounted), with the Vault
// policies given.
func (e *evidence) vaultKubeAuth(ctx context.Context, t *testing.T, ns, sa string, policies ...string) {
	e.apply(ctx, t, `apiVersion: v1
kind: ServiceAccount
metadata: {name: `+ns+`-vault-reviewer, namespace: `+ns+`}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: `+sa+`, namespace: `+ns+`}
automountServiceAccountToken: false
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: `+ns+`-vault-reviewer}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:auth-delegator}
subjects: [{kind: ServiceAccount, name: `+ns+`-vault-reviewer, namespace: `+ns+`}]
`)
	reviewer := strings.TrimSpace(e.kubectl(ctx, t, "-n", ns, "create", "token", ns+"-vault-reviewer", "--duration=1h"))
	clusterCA, err := os.ReadFile(filepath.Join(e.c.Dir, "pki", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	v := e.vault.srv
	v.Must(t, "POST", "auth/kubernetes/config", map[string]any{
		"kubernetes_host": kubecluster.APIServer, "kubernetes_ca_cert": string(clusterCA),
		"token_reviewer_jwt": reviewer, "disable_local_ca_jwt": true,
	})
	v.Must(t, "POST", "auth/kubernetes/role/"+vaultRole, map[string]any{
		"bound_service_account_names": []string{sa}, "bound_service_account_namespaces": []string{ns},
		"audience": "vault", "token_policies": policies, "token_ttl": 600,
	})
}
