// Package kubetest holds test support for the Kubernetes backend: an adapter from a client-go
// clientset (in tests, client-go's fake one) that satisfies kube.API. airlock itself never
// imports it, so the clientset's every API group stays out of the binary; and it does not
// import kube, so kube's own tests can use it.
package kubetest

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Clientset adapts a client-go clientset to kube.API.
type Clientset struct{ kubernetes.Interface }

// GetConfigMap implements kube.API.
func (c Clientset) GetConfigMap(ctx context.Context, ns, name string) (*corev1.ConfigMap, error) {
	return c.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
}

// CreateConfigMap implements kube.API.
func (c Clientset) CreateConfigMap(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	return c.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{})
}

// UpdateConfigMap implements kube.API.
func (c Clientset) UpdateConfigMap(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	return c.CoreV1().ConfigMaps(cm.Namespace).Update(ctx, cm, metav1.UpdateOptions{})
}

// CreatePod implements kube.API.
func (c Clientset) CreatePod(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	return c.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
}

// DeleteConfigMap implements kube.API.
func (c Clientset) DeleteConfigMap(ctx context.Context, ns, name string) error {
	return c.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{})
}

// GetPod implements kube.API.
func (c Clientset) GetPod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	return c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
}

// ListPods implements kube.API.
func (c Clientset) ListPods(ctx context.Context, ns, selector string) ([]corev1.Pod, error) {
	l, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// DeletePod implements kube.API.
func (c Clientset) DeletePod(ctx context.Context, ns, name string) error {
	return c.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{})
}
