package kube

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/airlock-dev/airlock/test/kubetest"
)

// (The real API server runs these against the test cluster in test/e2e/cluster; these cases pin
// what is decided here.)

func TestDeleteSandbox(t *testing.T) {
	ctx := context.Background()
	client := kubetest.Clientset{Interface: fake.NewClientset()}
	file := writeFile(t, t.TempDir(), "p.yaml", okPolicy)
	for _, o := range []CreateOptions{
		{Name: "a", Namespace: "team", Image: "i", PolicyFile: file},
		{Name: "b", Namespace: "team", Image: "i", PolicyFile: file, PolicyConfigMap: "shared"},
		{Name: "c", Namespace: "team", Image: "i", PolicyConfigMap: "shared"},
	} {
		if _, err := CreatePod(ctx, client, o); err != nil {
			t.Fatal(err)
		}
	}
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "team"}}
	if _, err := client.CreatePod(ctx, plain); err != nil {
		t.Fatal(err)
	}
	var lines []string
	progress := func(s string) { lines = append(lines, s) }

	if err := DeleteSandbox(ctx, client, "team", "a", progress); err != nil {
		t.Fatalf("delete a: %v", err)
	}
	if _, err := client.GetConfigMap(ctx, "team", "a-policy"); !apierrors.IsNotFound(err) {
		t.Errorf("a's own policy ConfigMap survived its delete: %v", err)
	}
	if err := DeleteSandbox(ctx, client, "team", "b", progress); err != nil {
		t.Fatalf("delete b: %v", err)
	}
	if _, err := client.GetConfigMap(ctx, "team", "shared"); err != nil {
		t.Errorf("the ConfigMap sandbox c still uses was deleted with b: %v", err)
	}
	if err := DeleteSandbox(ctx, client, "team", "a", progress); !errors.Is(err, ErrNotFound) {
		t.Errorf("delete a again: %v, want ErrNotFound", err)
	}
	if err := DeleteSandbox(ctx, client, "team", "plain", progress); !errors.Is(err, ErrNotASandbox) {
		t.Errorf("delete a pod airlock did not create: %v, want ErrNotASandbox", err)
	}
	if _, err := client.GetPod(ctx, "team", "plain"); err != nil {
		t.Errorf("the pod airlock did not create is gone: %v", err)
	}
	got := strings.Join(lines, "\n")
	for _, want := range []string{"deleting pod team/a", "pod team/a gone", "policy ConfigMap team/a-policy deleted", "policy ConfigMap team/shared kept (sandbox c uses it too)"} {
		if !strings.Contains(got, want) {
			t.Errorf("progress lines %q lack %q", got, want)
		}
	}
	list, err := Sandboxes(ctx, client, "")
	if err != nil || len(list) != 1 || list[0].Name != "c" || list[0].Policy != "shared" || list[0].Sidecar != "missing" {
		t.Errorf("Sandboxes = %+v, %v; want only c (its sidecar missing: no webhook here)", list, err)
	}
}

func TestReadiness(t *testing.T) {
	sidecar := corev1.Container{Name: SidecarName}
	injected := corev1.PodSpec{InitContainers: []corev1.Container{sidecar}, NodeName: "n1"}
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	for _, tc := range []struct {
		name      string
		pod       corev1.Pod
		state     string
		ready, ok bool
	}{
		{"not injected", corev1.Pod{}, "", false, false},
		{"unscheduled", corev1.Pod{Spec: corev1.PodSpec{InitContainers: []corev1.Container{sidecar}}}, "sidecar injected; waiting for a node", false, true},
		{"sidecar starting", corev1.Pod{Spec: injected}, "scheduled on n1; starting the airlock sidecar (policy, enforcement, CA)", false, true},
		{"sandbox image missing", corev1.Pod{Spec: injected, Status: corev1.PodStatus{
			InitContainerStatuses: []corev1.ContainerStatus{{Name: SidecarName, Ready: true}},
			ContainerStatuses:     []corev1.ContainerStatus{{Name: "sandbox", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull"}}}},
		}}, "sidecar ready; container sandbox waiting: ErrImageNeverPull", false, true},
		{"ready", corev1.Pod{Spec: injected, Status: corev1.PodStatus{Phase: corev1.PodRunning,
			InitContainerStatuses: []corev1.ContainerStatus{{Name: SidecarName, Ready: true}},
			ContainerStatuses:     []corev1.ContainerStatus{{Name: "sandbox", State: running}},
		}}, "ready: sidecar enforcing, sandbox running", true, true},
		{"ended", corev1.Pod{Spec: injected, Status: corev1.PodStatus{Phase: corev1.PodFailed}}, "", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state, ready, err := readiness(&tc.pod)
			if state != tc.state || ready != tc.ready || (err == nil) != tc.ok {
				t.Errorf("readiness = %q, %v, %v; want %q, %v, error %v", state, ready, err, tc.state, tc.ready, !tc.ok)
			}
		})
	}
}
