package kube

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNodePodOf(t *testing.T) {
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	waiting := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
	cases := []struct {
		name     string
		statuses []corev1.ContainerStatus
		want     string
	}{
		{"sidecar running", []corev1.ContainerStatus{{Name: SidecarName, ContainerID: "containerd://abc123", State: running}}, "abc123"},
		{"sidecar restarting", []corev1.ContainerStatus{{Name: SidecarName, ContainerID: "containerd://abc123", State: waiting}}, ""},
		{"another init container running", []corev1.ContainerStatus{{Name: "setup", ContainerID: "containerd://def", State: running}}, ""},
		{"no statuses yet", nil, ""},
		{"an ID without a runtime prefix", []corev1.ContainerStatus{{Name: SidecarName, ContainerID: "abc123", State: running}}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u-1"},
				Status: corev1.PodStatus{InitContainerStatuses: tc.statuses}}
			got := nodePodOf(p)
			if got != (NodePod{Namespace: "ns", Name: "p", UID: "u-1", SidecarID: tc.want}) {
				t.Errorf("got %+v, want sidecar ID %q", got, tc.want)
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
