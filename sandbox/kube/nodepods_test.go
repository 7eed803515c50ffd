package kube

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNodePodOf(t *testing.T) {
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	waiting := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
	cases := []struct {
		name       string
		init, main []corev1.ContainerStatus
		want       string
		containers map[string]string
	}{
		{"sidecar running", []corev1.ContainerStatus{{Name: SidecarName, ContainerID: "containerd://abc123", State: running}}, nil, "abc123", nil},
		{"sidecar restarting", []corev1.ContainerStatus{{Name: SidecarName, ContainerID: "containerd://abc123", State: waiting}}, nil, "", nil},
		{"another init container running", []corev1.ContainerStatus{{Name: "setup", ContainerID: "containerd://def", State: running}}, nil, "", map[string]string{"setup": "def"}},
		{"no statuses yet", nil, nil, "", nil},
		{"an ID without a runtime prefix", []corev1.ContainerStatus{{Name: SidecarName, ContainerID: "abc123", State: running}}, nil, "", nil},
		{"app containers: the running ones", []corev1.ContainerStatus{{Name: SidecarName, ContainerID: "containerd://abc", State: running}},
			[]corev1.ContainerStatus{
				{Name: "reviewer", ContainerID: "containerd://r2", State: running},
				{Name: "author", ContainerID: "containerd://a1", State: waiting}, // restarting: its old ID is gone
			}, "abc", map[string]string{"reviewer": "r2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u-1"},
				Status: corev1.PodStatus{InitContainerStatuses: tc.init, ContainerStatuses: tc.main}}
			got := nodePodOf(p)
			want := NodePod{Namespace: "ns", Name: "p", UID: "u-1", SidecarID: tc.want, Containers: tc.containers}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got %+v, want %+v", got, want)
			}
		})
	}
}

func TestFinished(t *testing.T) {
	for phase, want := range map[corev1.PodPhase]bool{
		corev1.PodPending: false, corev1.PodRunning: false, corev1.PodSucceeded: true, corev1.PodFailed: true,
	} {
		if got := finished(&corev1.Pod{Status: corev1.PodStatus{Phase: phase}}); got != want {
			t.Errorf("finished(%s) = %v, want %v", phase, got, want)
		}
	}
}
