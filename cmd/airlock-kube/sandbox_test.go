package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/airlock-dev/airlock/internal/cli"
	"github.com/airlock-dev/airlock/sandbox/kube"
	"github.com/airlock-dev/airlock/test/kubetest"
)

// No API server runs here: the pod is created against client-go's fake clientset; the
// kubeconfig path is checked by pointing it at nothing.

func TestKubeCreateWithFakeClient(t *testing.T) {
	fs := cli.NewFlagSet("sandbox create", "", "", io.Discard)
	o := &cli.KubeCreate{}
	o.Register(fs)
	if _, err := fs.ParseArgs([]string{"--image", "python:3.13", "--command", "python3 -m http.server", "--policy-configmap", "pol", "--wait", "0"}, io.Discard, true); err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset()
	var out bytes.Buffer
	if err := kubeCreateIn(context.Background(), &kube.Cluster{Client: kubetest.Clientset{Interface: client}, Namespace: "team-a"}, "agent-1", examplePolicy, o, &out); err != nil {
		t.Fatalf("kubeCreateWith: %v", err)
	}
	pod, err := client.CoreV1().Pods("team-a").Get(context.Background(), "agent-1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("pod not created: %v", err)
	}
	if pod.Labels[kube.LabelInject] != "true" || pod.Annotations[kube.AnnotationPolicy] != "pol" {
		t.Errorf("pod labels %v annotations %v", pod.Labels, pod.Annotations)
	}
	if c := pod.Spec.Containers[0].Command; strings.Join(c, " ") != "sh -c python3 -m http.server" {
		t.Errorf("command %q", c)
	}
	cm, err := client.CoreV1().ConfigMaps("team-a").Get(context.Background(), "pol", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("policy ConfigMap: %v", err)
	}
	want, _ := os.ReadFile(examplePolicy)
	if cm.Data[kube.DefaultPolicyKey] != string(want) {
		t.Errorf("ConfigMap does not hold the policy file")
	}
	if !strings.Contains(out.String(), "kubectl -n team-a exec -it agent-1") {
		t.Errorf("stdout %q does not say how to enter the sandbox", out.String())
	}
}

func TestKubeCreateErrors(t *testing.T) {
	o := &cli.KubeCreate{KubeCluster: cli.KubeCluster{Kubeconfig: filepath.Join(t.TempDir(), "no-kubeconfig")}, Image: "i"}
	err := kubeCreate(context.Background(), "agent-1", "", o, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "no-kubeconfig") {
		t.Errorf("missing kubeconfig: %v, want an error naming it", err)
	}
	err = kubeCreate(context.Background(), "agent-1", "", &cli.KubeCreate{}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--image is required") {
		t.Errorf("no image: %v", err)
	}
}

const examplePolicy = "../../deploy/examples/policy.yaml"

// TestKubeCreateIdentities: --containers and --identities make a pod of those containers
// with the annotation; an identity the policy file lacks is refused with the file and line
// before anything is created.
func TestKubeCreateIdentities(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "agents.yaml")
	if err := os.WriteFile(pol, []byte("apiVersion: airlock/v1\nkind: EgressPolicy\nmetadata: {name: agents}\nspec:\n  egress: [{name: a, hosts: [a.test]}]\n  identities:\n    reviewer: {}\n    author: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	create := func(name string, args ...string) (*fake.Clientset, string, error) {
		fs := cli.NewFlagSet("sandbox create", "", "", io.Discard)
		o := &cli.KubeCreate{}
		o.Register(fs)
		if _, err := fs.ParseArgs(append([]string{"--image", "probe", "--wait", "0"}, args...), io.Discard, true); err != nil {
			t.Fatal(err)
		}
		client := fake.NewClientset()
		var out bytes.Buffer
		err := kubeCreateIn(context.Background(), &kube.Cluster{Client: kubetest.Clientset{Interface: client}, Namespace: "team-a"}, name, pol, o, &out)
		return client, out.String(), err
	}
	client, out, err := create("agents", "--containers", "reviewer,author", "--identities", "reviewer=reviewer,author=author")
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	pod, err := client.CoreV1().Pods("team-a").Get(context.Background(), "agents", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pod.Spec.Containers) != 2 || pod.Spec.Containers[0].Name != "reviewer" || pod.Spec.Containers[1].Name != "author" ||
		pod.Annotations[kube.AnnotationIdentities] != "reviewer=reviewer,author=author" {
		t.Errorf("pod containers %v annotations %v", pod.Spec.Containers, pod.Annotations)
	}
	if !strings.Contains(out, "identities reviewer=reviewer,author=author") || !strings.Contains(out, "exec -it agents -c reviewer") {
		t.Errorf("stdout %q: want the identities and how to enter the first container", out)
	}
	client, _, err = create("agents", "--containers", "reviewer,author", "--identities", "reviewer=reviewer,author=admin")
	if want := pol + `:6:3: spec.identities: container "author" is mapped to identity "admin"`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("an identity the policy lacks: %v, want %q", err, want)
	}
	if pods, _ := client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{}); len(pods.Items) != 0 {
		t.Error("a refused create made a pod")
	}
	if _, _, err = create("agents", "--identities", "reviewer=reviewer"); err == nil || !strings.Contains(err.Error(), `maps container "reviewer", which the pod does not have (its containers: sandbox)`) {
		t.Errorf("a container the pod lacks: %v", err)
	}
}
