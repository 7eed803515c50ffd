package kube

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
)

// API is what the Kubernetes backend asks of the API server: the sandbox's policy ConfigMap
// and its pod. Errors are the API server's (apierrors.IsNotFound and friends work on them).
type API interface {
	GetConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
	CreateConfigMap(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error)
	UpdateConfigMap(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error)
	DeleteConfigMap(ctx context.Context, namespace, name string) error
	CreatePod(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error)
	GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	// ListPods lists the pods matching labelSelector in namespace ("" means every
	// namespace).
	ListPods(ctx context.Context, namespace, labelSelector string) ([]corev1.Pod, error)
	DeletePod(ctx context.Context, namespace, name string) error
}

// restAPI implements API with client-go's REST client and a scheme that holds core/v1 only.
// client-go's generated clientset would link every API group's types and typed client into
// airlock and register them all at every process start (about 20 ms for each sidecar, `sandbox
// exec` and `sandbox create`); these few calls need none of that.
type restAPI struct{ c *rest.RESTClient }

// newRESTAPI builds a core/v1 REST client from cfg.
func newRESTAPI(cfg *rest.Config) (*restAPI, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	metav1.AddToGroupVersion(scheme, corev1.SchemeGroupVersion)
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.APIPath = "/api"
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, err
	}
	return &restAPI{c: rc}, nil
}

func (a *restAPI) GetConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	out := &corev1.ConfigMap{}
	err := a.c.Get().Namespace(namespace).Resource("configmaps").Name(name).Do(ctx).Into(out)
	return out, err
}

func (a *restAPI) CreateConfigMap(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	out := &corev1.ConfigMap{}
	err := a.c.Post().Namespace(cm.Namespace).Resource("configmaps").Body(cm).Do(ctx).Into(out)
	return out, err
}

func (a *restAPI) UpdateConfigMap(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	out := &corev1.ConfigMap{}
	err := a.c.Put().Namespace(cm.Namespace).Resource("configmaps").Name(cm.Name).Body(cm).Do(ctx).Into(out)
	return out, err
}

func (a *restAPI) CreatePod(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	out := &corev1.Pod{}
	err := a.c.Post().Namespace(pod.Namespace).Resource("pods").Body(pod).Do(ctx).Into(out)
	return out, err
}

func (a *restAPI) DeleteConfigMap(ctx context.Context, namespace, name string) error {
	return a.c.Delete().Namespace(namespace).Resource("configmaps").Name(name).Do(ctx).Error()
}

func (a *restAPI) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	out := &corev1.Pod{}
	err := a.c.Get().Namespace(namespace).Resource("pods").Name(name).Do(ctx).Into(out)
	return out, err
}

func (a *restAPI) ListPods(ctx context.Context, namespace, labelSelector string) ([]corev1.Pod, error) {
	out := &corev1.PodList{}
	req := a.c.Get().Resource("pods").Param("labelSelector", labelSelector)
	if namespace != "" {
		req = req.Namespace(namespace)
	}
	err := req.Do(ctx).Into(out)
	return out.Items, err
}

func (a *restAPI) DeletePod(ctx context.Context, namespace, name string) error {
	return a.c.Delete().Namespace(namespace).Resource("pods").Name(name).Do(ctx).Error()
}
