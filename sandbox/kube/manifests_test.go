package kube

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/airlock-dev/airlock/policy"
)

const deployDir = "../../deploy"

// manifests decodes every YAML document of every file in deploy/ (not deploy/examples/,
// which holds airlock policies) strictly into its typed Kubernetes object: an unknown or
// duplicate field, or a kind the client-go scheme does not know, fails the test.
func manifests(t *testing.T) map[string][]runtime.Object {
	t.Helper()
	strict := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
		json.SerializerOptions{Yaml: true, Strict: true})
	files, err := filepath.Glob(filepath.Join(deployDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", deployDir, err)
	}
	out := map[string][]runtime.Object{}
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for i := 0; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: document %d: %v", f, i, err)
			}
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			obj, gvk, err := strict.Decode(doc, nil, nil)
			if err != nil {
				t.Errorf("%s: document %d does not decode strictly: %v", f, i, err)
				continue
			}
			t.Logf("%s: %s", filepath.Base(f), gvk)
			out[filepath.Base(f)] = append(out[filepath.Base(f)], obj)
		}
		if len(out[filepath.Base(f)]) == 0 {
			t.Errorf("%s holds no manifest", f)
		}
	}
	return out
}

// stripComments drops comment-only lines, so a document of comments counts as empty.
func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			b.Write(line)
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

// one returns the only object of type T in file.
func one[T runtime.Object](t *testing.T, all map[string][]runtime.Object, file string) T {
	t.Helper()
	var found []T
	for _, o := range all[file] {
		if v, ok := o.(T); ok {
			found = append(found, v)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("%s: %d objects of type %T, want 1", file, len(found), zero)
	}
	return found[0]
}

func TestManifestsDecode(t *testing.T) {
	all := manifests(t)

	var namespaces []string
	for _, o := range all["namespace.yaml"] {
		ns := o.(*corev1.Namespace)
		namespaces = append(namespaces, ns.Name)
		// Only the node agent's namespace may run privileged pods.
		want := map[bool]string{true: "privileged", false: "restricted"}[ns.Name == "airlock-node"]
		if got := ns.Labels["pod-security.kubernetes.io/enforce"]; got != want {
			t.Errorf("namespace %s enforces Pod Security %q, want %q", ns.Name, got, want)
		}
	}
	if !slices.Equal(namespaces, []string{"airlock-system", "airlock-node", "airlock-sandboxes"}) {
		t.Errorf("namespaces %v", namespaces)
	}
	checkNodeDaemonSet(t, all)

	sa := one[*corev1.ServiceAccount](t, all, "rbac.yaml")
	if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Errorf("the webhook's ServiceAccount mounts a token it never uses")
	}
	role := one[*rbacv1.ClusterRole](t, all, "rbac.yaml")
	for _, r := range role.Rules {
		for _, res := range r.Resources {
			if res == "secrets" || res == "*" || slices.Contains(r.Verbs, "*") {
				t.Errorf("ClusterRole rule %+v is broader than sandbox creation needs", r)
			}
		}
	}
	one[*rbacv1.RoleBinding](t, all, "rbac.yaml")

	dep := one[*appsv1.Deployment](t, all, "deployment.yaml")
	svc := one[*corev1.Service](t, all, "service.yaml")
	mwc := one[*admissionregv1.MutatingWebhookConfiguration](t, all, "mutatingwebhookconfiguration.yaml")
	if len(mwc.Webhooks) != 1 {
		t.Fatalf("webhooks: %d, want 1", len(mwc.Webhooks))
	}
	wh := mwc.Webhooks[0]
	if wh.FailurePolicy == nil || *wh.FailurePolicy != admissionregv1.Fail {
		t.Errorf("failurePolicy %v, want Fail", wh.FailurePolicy)
	}
	if wh.SideEffects == nil || *wh.SideEffects != admissionregv1.SideEffectClassNone {
		t.Errorf("sideEffects %v, want None", wh.SideEffects)
	}
	if !slices.Equal(wh.AdmissionReviewVersions, []string{"v1"}) {
		t.Errorf("admissionReviewVersions %v, want [v1]", wh.AdmissionReviewVersions)
	}
	if wh.ObjectSelector == nil || wh.ObjectSelector.MatchLabels[LabelInject] != "true" {
		t.Errorf("objectSelector %v, want %s=true", wh.ObjectSelector, LabelInject)
	}
	excluded := false
	for _, e := range wh.NamespaceSelector.MatchExpressions {
		excluded = excluded || (e.Key == "kubernetes.io/metadata.name" && e.Operator == "NotIn" && slices.Contains(e.Values, dep.Namespace))
	}
	if !excluded {
		t.Errorf("namespaceSelector %v does not exclude the webhook's namespace %s", wh.NamespaceSelector, dep.Namespace)
	}
	ref := wh.ClientConfig.Service
	if ref == nil || ref.Name != svc.Name || ref.Namespace != svc.Namespace || ref.Path == nil || *ref.Path != "/mutate" ||
		ref.Port == nil || *ref.Port != svc.Spec.Ports[0].Port {
		t.Errorf("webhook service %+v does not match Service %s/%s port %d path /mutate", ref, svc.Namespace, svc.Name, svc.Spec.Ports[0].Port)
	}
	if mwc.Annotations["cert-manager.io/inject-ca-from"] != "airlock-system/airlock-webhook" {
		t.Errorf("no cert-manager CA injection annotation")
	}
	if !slices.ContainsFunc(wh.Rules, func(r admissionregv1.RuleWithOperations) bool {
		return slices.Contains(r.Resources, "pods") && slices.Contains(r.Operations, admissionregv1.Create)
	}) {
		t.Errorf("rules %v do not send pod creation", wh.Rules)
	}
	tmpl := dep.Spec.Template
	// The image's airlock is the sidecar build; the webhook is in airlock-kube beside it.
	if c := tmpl.Spec.Containers[0]; !slices.Equal(c.Command, []string{"airlock-kube"}) || len(c.Args) == 0 || c.Args[0] != "webhook" {
		t.Errorf("webhook container runs %v %v, want airlock-kube webhook", c.Command, c.Args)
	}
	if !labelsMatch(svc.Spec.Selector, tmpl.Labels) || !labelsMatch(dep.Spec.Selector.MatchLabels, tmpl.Labels) {
		t.Errorf("Service selector %v / Deployment selector %v do not select the pod labels %v", svc.Spec.Selector, dep.Spec.Selector.MatchLabels, tmpl.Labels)
	}
	if tmpl.Spec.ServiceAccountName != sa.Name || dep.Namespace != sa.Namespace {
		t.Errorf("Deployment runs as %s, want %s", tmpl.Spec.ServiceAccountName, sa.Name)
	}

	// The example pod, admitted with the options the Deployment gives the webhook, gets the
	// sidecar with the example policy ConfigMap.
	pod := one[*corev1.Pod](t, all, "sandbox-pod.yaml")
	cm := one[*corev1.ConfigMap](t, all, "policy-configmap.yaml")
	if pod.Annotations[AnnotationPolicy] != cm.Name || pod.Namespace != cm.Namespace {
		t.Errorf("example pod names policy %s/%s, the ConfigMap is %s/%s", pod.Namespace, pod.Annotations[AnnotationPolicy], cm.Namespace, cm.Name)
	}
	opts := Options{Namespace: dep.Namespace}
	for _, e := range tmpl.Spec.Containers[0].Env {
		switch e.Name {
		case "AIRLOCK_IMAGE":
			opts.Image = e.Value
		case "AIRLOCK_UPSTREAM_DNS":
			opts.UpstreamDNS = e.Value
		case "AIRLOCK_ENVIRONMENT":
			opts.Environment = e.Value
		}
	}
	if err := opts.Validate(); err != nil {
		t.Fatalf("the Deployment's webhook options: %v", err)
	}
	got := applyPatch(t, pod, admit(t, newTestHandler(t, opts), pod, pod.Namespace))
	if got.Spec.InitContainers[0].Name != SidecarName || len(got.Spec.SchedulingGates) != 0 {
		t.Errorf("example pod: init containers %v, gates %v; want the sidecar and no gate", got.Spec.InitContainers, got.Spec.SchedulingGates)
	}
}

func labelsMatch(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}

func TestManifestPolicyLoads(t *testing.T) {
	cm := one[*corev1.ConfigMap](t, manifests(t), "policy-configmap.yaml")
	data, ok := cm.Data[DefaultPolicyKey]
	if !ok {
		t.Fatalf("ConfigMap %s has no %s key", cm.Name, DefaultPolicyKey)
	}
	p, err := policy.Parse("deploy/policy-configmap.yaml#"+DefaultPolicyKey, []byte(data))
	if err != nil {
		t.Fatalf("example policy does not load: %v", err)
	}
	if p.Name() != "agent" {
		t.Errorf("policy name %q, want agent", p.Name())
	}
}

// kustomization is the part of a kustomize Kustomization this repository uses.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
		Digest  string `json:"digest"`
	} `json:"images"`
	Replacements []struct {
		Source struct {
			Kind      string `json:"kind"`
			Name      string `json:"name"`
			FieldPath string `json:"fieldPath"`
		} `json:"source"`
		Targets []struct {
			Select struct {
				Kind string `json:"kind"`
				Name string `json:"name"`
			} `json:"select"`
			FieldPaths []string `json:"fieldPaths"`
		} `json:"targets"`
	} `json:"replacements"`
}

// TestKustomizationNamesTheImageOnce: the webhook's image and its sidecars' (AIRLOCK_IMAGE)
// both come from the kustomization's one images entry.
func TestKustomizationNamesTheImageOnce(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(deployDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	dep := one[*appsv1.Deployment](t, manifests(t), "deployment.yaml")
	c := dep.Spec.Template.Spec.Containers[0]
	if len(k.Images) != 1 || k.Images[0].Name != c.Image || k.Images[0].NewTag == "" && k.Images[0].Digest == "" {
		t.Fatalf("kustomization images %+v, want one entry for the Deployment's %s with a tag or digest", k.Images, c.Image)
	}
	if len(k.Replacements) != 1 || len(k.Replacements[0].Targets) != 1 {
		t.Fatalf("kustomization replacements %+v, want one copying the image into AIRLOCK_IMAGE", k.Replacements)
	}
	r := k.Replacements[0]
	want := "spec.template.spec.containers.[name=" + c.Name + "]"
	if r.Source.Name != dep.Name || r.Source.FieldPath != want+".image" ||
		r.Targets[0].Select.Name != dep.Name || !slices.Equal(r.Targets[0].FieldPaths, []string{want + ".env.[name=AIRLOCK_IMAGE].value"}) {
		t.Errorf("replacement %+v does not copy %s's image into its AIRLOCK_IMAGE", r, c.Name)
	}
}

func TestKustomizationListsEveryManifest(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(deployDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("kustomization.yaml is %s %s", k.APIVersion, k.Kind)
	}
	files, _ := filepath.Glob(filepath.Join(deployDir, "*.yaml"))
	var want []string
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" {
			want = append(want, b)
		}
	}
	got := slices.Clone(k.Resources)
	sort.Strings(got)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Errorf("kustomization resources %v, want exactly the manifests present %v", got, want)
	}
}

// checkNodeDaemonSet checks the node agent's DaemonSet: in its own namespace, on every node,
// with the node's PIDs, cgroups and bpffs, and a read-only role on pods.
func checkNodeDaemonSet(t *testing.T, all map[string][]runtime.Object) {
	ds := one[*appsv1.DaemonSet](t, all, "node-daemonset.yaml")
	spec := ds.Spec.Template.Spec
	if ds.Namespace != "airlock-node" || !spec.HostPID || spec.HostNetwork || len(spec.Containers) != 1 {
		t.Errorf("DaemonSet %s/%s hostPID %v hostNetwork %v containers %d, want airlock-node, hostPID, no hostNetwork, one container",
			ds.Namespace, ds.Name, spec.HostPID, spec.HostNetwork, len(spec.Containers))
	}
	c := spec.Containers[0]
	if !slices.Equal(c.Command, []string{"airlock-kube"}) || !slices.Equal(c.Args, []string{"node"}) || len(c.Env) != 1 || c.Env[0].ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("agent container runs %v %v with env %+v, want airlock-kube node with AIRLOCK_NODE_NAME from spec.nodeName", c.Command, c.Args, c.Env)
	}
	paths := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			paths[v.Name] = v.HostPath.Path
		}
	}
	if paths["bpffs"] != "/sys/fs/bpf" || paths["cgroup"] != "/sys/fs/cgroup" {
		t.Errorf("agent hostPaths %v, want the node's /sys/fs/bpf and /sys/fs/cgroup", paths)
	}
	role := one[*rbacv1.ClusterRole](t, all, "node-daemonset.yaml")
	for _, r := range role.Rules {
		if !slices.Equal(r.Resources, []string{"pods"}) || !slices.Equal(r.Verbs, []string{"get", "list", "watch"}) {
			t.Errorf("agent role rule %+v, want read-only pods", r)
		}
	}
	one[*rbacv1.ClusterRoleBinding](t, all, "node-daemonset.yaml")
}
