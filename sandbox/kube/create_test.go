package kube

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/airlock-dev/airlock/test/kubetest"
)

// No API server can run in these tests (no etcd, no kube-apiserver binary here), so CreatePod
// runs against client-go's fake clientset: the same typed client calls, backed by an object
// tracker. The injection itself is tested through the admission handler.

const okPolicy = `apiVersion: airlock/v1
kind: EgressPolicy
metadata:
  name: sandbox
spec:
  egress:
    - name: pypi
      hosts: ["pypi.org"]
      ports: [443]
`

// idPolicy has identities reviewer and author (spec.identities: line 10).
const idPolicy = okPolicy + `  identities:
    reviewer: {}
    author: {}
`

func writeFile(t *testing.T, dir, name, data string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCreatePodWithPolicyFile(t *testing.T) {
	ctx := context.Background()
	client := kubetest.Clientset{Interface: fake.NewClientset()}
	file := writeFile(t, t.TempDir(), "p.yaml", okPolicy)
	pod, err := CreatePod(ctx, client, CreateOptions{Name: "agent-7", Namespace: "team-a", Image: "python:3.13", PolicyFile: file, Environment: "production"})
	if err != nil {
		t.Fatalf("CreatePod: %v", err)
	}
	stored, err := client.CoreV1().Pods("team-a").Get(ctx, "agent-7", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("pod not stored: %v", err)
	}
	for _, p := range []*corev1.Pod{pod, stored} {
		if p.Labels[LabelInject] != "true" || p.Annotations[AnnotationPolicy] != "agent-7-policy" || p.Annotations[AnnotationEnvironment] != "production" {
			t.Errorf("pod labels %v annotations %v", p.Labels, p.Annotations)
		}
		if len(p.Spec.Containers) != 1 || p.Spec.Containers[0].Image != "python:3.13" || !slices.Equal(p.Spec.Containers[0].Command, []string{"sleep", "infinity"}) {
			t.Errorf("containers %+v", p.Spec.Containers)
		}
		if g := p.Spec.SchedulingGates; len(g) != 1 || g[0].Name != SchedulingGate {
			t.Errorf("scheduling gates %v, want %s (the pod never runs uninjected)", g, SchedulingGate)
		}
		if p.Spec.AutomountServiceAccountToken == nil || *p.Spec.AutomountServiceAccountToken {
			t.Errorf("the sandbox pod mounts a service account token")
		}
		// Pod Security "restricted", as sandbox namespaces enforce.
		psc, csc := p.Spec.SecurityContext, p.Spec.Containers[0].SecurityContext
		if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 ||
			psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("pod securityContext %+v, want non-root and seccomp RuntimeDefault", psc)
		}
		if csc == nil || csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation || csc.Capabilities == nil ||
			!slices.Equal(csc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("container securityContext %+v, want no privilege escalation and every capability dropped", csc)
		}
	}
	cm, err := client.CoreV1().ConfigMaps("team-a").Get(ctx, "agent-7-policy", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("policy ConfigMap: %v", err)
	}
	if cm.Data[DefaultPolicyKey] != okPolicy {
		t.Errorf("ConfigMap data %v, want the policy file under %s", cm.Data, DefaultPolicyKey)
	}

	// The pod the webhook will see when the API server admits it gets the sidecar.
	res, err := Mutate(stored, "team-a", func() *Options { o := testOptions(); _ = o.Validate(); return &o }())
	if err != nil || len(res.Patch) == 0 {
		t.Fatalf("created pod is not injectable: %v, %d ops", err, len(res.Patch))
	}
	if last := res.Patch[len(res.Patch)-1]; last.Op != "add" || last.Path != "/metadata/annotations/airlock.dev~1injected" {
		t.Errorf("last operation %+v, want the injected annotation", last)
	}
	if !slices.ContainsFunc(res.Patch, func(op PatchOp) bool { return op.Op == "remove" && op.Path == "/spec/schedulingGates/0" }) {
		t.Errorf("the patch does not remove the scheduling gate: %+v", res.Patch)
	}
}

func TestCreatePodUpdatesExistingConfigMap(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "shared", Namespace: "default"},
		Data:       map[string]string{"other.yaml": "keep me", "sb.yaml": "old"},
	})
	client := kubetest.Clientset{Interface: cs}
	file := writeFile(t, t.TempDir(), "p.yaml", okPolicy)
	pod, err := CreatePod(ctx, client, CreateOptions{Name: "sb", Image: "alpine", Command: []string{"sh", "-c", "true"}, PolicyConfigMap: "shared", PolicyKey: "sb.yaml", PolicyFile: file})
	if err != nil {
		t.Fatalf("CreatePod: %v", err)
	}
	if pod.Namespace != "default" || pod.Annotations[AnnotationPolicyKey] != "sb.yaml" || pod.Annotations[AnnotationPolicy] != "shared" {
		t.Errorf("pod %s/%s annotations %v", pod.Namespace, pod.Name, pod.Annotations)
	}
	cm, err := client.CoreV1().ConfigMaps("default").Get(ctx, "shared", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data["sb.yaml"] != okPolicy || cm.Data["other.yaml"] != "keep me" {
		t.Errorf("ConfigMap data %v: want sb.yaml updated and other.yaml kept", cm.Data)
	}
}

func TestCreatePodRefuses(t *testing.T) {
	dir := t.TempDir()
	bad := writeFile(t, dir, "bad.yaml", strings.Replace(okPolicy, "hosts:", "hostz:", 1))
	writeFile(t, dir, "base.yaml", okPolicy)
	child := writeFile(t, dir, "child.yaml", strings.Replace(okPolicy, "spec:\n", "spec:\n  extends: [./base.yaml]\n", 1))
	idFile := writeFile(t, dir, "ids.yaml", idPolicy)
	for _, tc := range []struct {
		name string
		o    CreateOptions
		want string
	}{
		{"invalid policy", CreateOptions{Name: "a", Image: "i", PolicyFile: bad}, "hostz"},
		{"missing policy", CreateOptions{Name: "a", Image: "i", PolicyFile: filepath.Join(dir, "none.yaml")}, "cannot read policy"},
		{"file parents", CreateOptions{Name: "a", Image: "i", PolicyFile: child}, "extends other files"},
		{"bad name", CreateOptions{Name: "A_B", Image: "i"}, "sandbox name"},
		{"no image", CreateOptions{Name: "a"}, "image is required"},
		{"bad key", CreateOptions{Name: "a", Image: "i", PolicyKey: "a/b"}, "policy key"},
		{"bad environment", CreateOptions{Name: "a", Image: "i", Environment: "prod"}, "environment"},
		{"container twice", CreateOptions{Name: "a", Image: "i", Containers: []string{"r", "r"}}, `container name "r" is given twice`},
		{"container named like the sidecar", CreateOptions{Name: "a", Image: "i", Containers: []string{SidecarName}}, "reserved for the airlock sidecar"},
		{"bad container name", CreateOptions{Name: "a", Image: "i", Containers: []string{"Rev"}}, `container name "Rev"`},
		{"identities syntax", CreateOptions{Name: "a", Image: "i", PolicyFile: idFile, Identities: "reviewer"}, "want CONTAINER=IDENTITY"},
		{"identities of a container the pod lacks", CreateOptions{Name: "a", Image: "i", PolicyFile: idFile, Identities: "reviewer=reviewer"},
			`maps container "reviewer", which the pod does not have (its containers: sandbox)`},
		{"identities of the sidecar", CreateOptions{Name: "a", Image: "i", PolicyFile: idFile, Identities: "airlock=reviewer"}, "the airlock sidecar, which has no identity"},
		{"identity the policy file lacks", CreateOptions{Name: "a", Image: "i", PolicyFile: idFile, Containers: []string{"reviewer", "author"},
			Identities: "reviewer=reviewer,author=admin"}, idFile + `:10:3: spec.identities: container "author" is mapped to identity "admin", which policy "sandbox" does not define (its identities are author, reviewer)`},
		{"identities of a policy without any", CreateOptions{Name: "a", Image: "i", PolicyFile: writeFile(t, dir, "ok.yaml", okPolicy),
			Identities: "sandbox=reviewer"}, `ok.yaml:5:1: spec.identities: container "sandbox" is mapped to identity "reviewer", which policy "sandbox" does not define (no spec.identities)`},
		{"identities without a policy to check", CreateOptions{Name: "a", Image: "i", Identities: "sandbox=reviewer"}, "policy ConfigMap default/a-policy does not exist, so the identities cannot be checked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := kubetest.Clientset{Interface: fake.NewClientset()}
			_, err := CreatePod(context.Background(), client, tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CreatePod: %v, want an error containing %q", err, tc.want)
			}
			pods, _ := client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
			cms, _ := client.CoreV1().ConfigMaps("").List(context.Background(), metav1.ListOptions{})
			if len(pods.Items)+len(cms.Items) != 0 {
				t.Errorf("a refused create left %d pods and %d ConfigMaps", len(pods.Items), len(cms.Items))
			}
		})
	}
}

func TestCreatePodAlreadyExists(t *testing.T) {
	client := kubetest.Clientset{Interface: fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "dup", Namespace: "default"}})}
	_, err := CreatePod(context.Background(), client, CreateOptions{Name: "dup", Image: "i", PolicyConfigMap: "p"})
	if err == nil || !strings.Contains(err.Error(), "create pod default/dup") {
		t.Errorf("CreatePod over an existing pod: %v, want a create error", err)
	}
}

// TestCreatePodWithIdentities: the pod gets one container per name, each with the image,
// command and confinement, and the identities annotation, which the webhook admits and
// hands to the sidecar; identities are checked against an existing ConfigMap's policy when
// no file is given, naming the ConfigMap and the line.
func TestCreatePodWithIdentities(t *testing.T) {
	ctx := context.Background()
	client := kubetest.Clientset{Interface: fake.NewClientset()}
	file := writeFile(t, t.TempDir(), "p.yaml", idPolicy)
	pod, err := CreatePod(ctx, client, CreateOptions{Name: "agents", Image: "probe", PolicyFile: file,
		Containers: []string{"reviewer", "author"}, Identities: "reviewer=reviewer,author=author"})
	if err != nil {
		t.Fatalf("CreatePod: %v", err)
	}
	if got := pod.Annotations[AnnotationIdentities]; got != "reviewer=reviewer,author=author" {
		t.Errorf("annotation %s = %q", AnnotationIdentities, got)
	}
	var names []string
	for _, c := range pod.Spec.Containers {
		names = append(names, c.Name)
		if c.Image != "probe" || !slices.Equal(c.Command, []string{"sleep", "infinity"}) || c.SecurityContext == nil ||
			c.SecurityContext.Capabilities == nil || !slices.Equal(c.SecurityContext.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("container %+v: want the image, the command and every capability dropped", c)
		}
	}
	if !slices.Equal(names, []string{"reviewer", "author"}) {
		t.Errorf("containers %v, want reviewer, author", names)
	}
	o := testOptions()
	got := applyPatch(t, pod, admit(t, newTestHandler(t, o), pod, "default"))
	if v, _ := argValue(got.Spec.InitContainers[0].Args, "--identity-containers"); v != "author=author,reviewer=reviewer" {
		t.Errorf("sidecar --identity-containers %q", v)
	}

	// No file: the existing ConfigMap's policy is the one checked.
	_, err = CreatePod(ctx, client, CreateOptions{Name: "agents2", Image: "probe", PolicyConfigMap: "agents-policy",
		Containers: []string{"reviewer"}, Identities: "reviewer=admin"})
	want := `ConfigMap default/agents-policy/policy.yaml:10:3: spec.identities: container "reviewer" is mapped to identity "admin"`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("an identity the ConfigMap's policy lacks: %v, want %q", err, want)
	}
	if _, err := client.CoreV1().Pods("default").Get(ctx, "agents2", metav1.GetOptions{}); err == nil {
		t.Error("the refused pod was created")
	}
	if _, err := CreatePod(ctx, client, CreateOptions{Name: "agents3", Image: "probe", PolicyConfigMap: "agents-policy",
		Containers: []string{"reviewer"}, Identities: "reviewer=reviewer"}); err != nil {
		t.Errorf("identities the ConfigMap's policy defines: %v", err)
	}
}
