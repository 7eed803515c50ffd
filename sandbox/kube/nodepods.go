package kube

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/clientcmd"
)

// NodePod is a labelled pod on a node, as the node agent (`airlock node`) needs it.
type NodePod struct {
	Namespace, Name, UID string
	// SidecarID is the runtime's ID of the running sidecar container (without the
	// "containerd://" prefix); empty while the sidecar is not running.
	SidecarID string
	// Containers are the runtime's IDs (without the prefix) of the pod's other running
	// containers, app and init, by name: the agent tells the sidecar which of them connected
	// (identities in pods). A restarted container has a new ID. Nil when none runs.
	Containers map[string]string
}

// NodePodHandler receives the labelled pods of one node from WatchNodePods.
type NodePodHandler interface {
	// Resync is the full list, at start and after every relist.
	Resync(pods []NodePod) error
	// Upsert is a pod added or changed.
	Upsert(p NodePod) error
	// Delete is a pod gone (deleted, or finished).
	Delete(namespace, name string) error
}

// relistEvery bounds one watch: the list that follows retries what failed (a pod whose
// cgroup was not there yet).
const relistEvery = 30 * time.Second

// WatchNodePods lists and watches the pods labelled for injection on node, feeding h, until
// ctx ends. kubeconfig empty means the in-cluster service account (or $KUBECONFIG). Errors
// of h are logged; errors of the API server are retried with a backoff.
func WatchNodePods(ctx context.Context, kubeconfig, node string, h NodePodHandler, log *logrus.Logger) error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("kubernetes client config: %w", err)
	}
	api, err := newRESTAPI(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	opts := metav1.ListOptions{LabelSelector: LabelInject + "=true", FieldSelector: "spec.nodeName=" + node}
	backoff := time.Second
	for ctx.Err() == nil {
		rv, err := listNodePods(ctx, api, opts, h, log)
		if err == nil {
			err = watchNodePods(ctx, api, opts, rv, h, log)
		}
		if err == nil {
			backoff = time.Second
			continue
		}
		if ctx.Err() != nil {
			break
		}
		log.WithError(err).Warn("watch the node's pods; retrying")
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
	return nil
}

func listNodePods(ctx context.Context, api *restAPI, opts metav1.ListOptions, h NodePodHandler, log *logrus.Logger) (string, error) {
	var list corev1.PodList
	if err := api.c.Get().Resource("pods").VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(&list); err != nil {
		return "", fmt.Errorf("list pods: %w", err)
	}
	var pods []NodePod
	for i := range list.Items {
		if p := &list.Items[i]; !finished(p) {
			pods = append(pods, nodePodOf(p))
		}
	}
	if err := h.Resync(pods); err != nil {
		log.WithError(err).Warn("some pods are not enforced yet; retried at the next list")
	}
	return list.ResourceVersion, nil
}

func watchNodePods(ctx context.Context, api *restAPI, opts metav1.ListOptions, rv string, h NodePodHandler, log *logrus.Logger) error {
	timeout := int64(relistEvery / time.Second)
	opts.ResourceVersion, opts.Watch, opts.TimeoutSeconds = rv, true, &timeout
	w, err := api.c.Get().Resource("pods").VersionedParams(&opts, metav1.ParameterCodec).Watch(ctx)
	if err != nil {
		return fmt.Errorf("watch pods: %w", err)
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		p, ok := ev.Object.(*corev1.Pod)
		if ev.Type == watch.Error || !ok {
			return fmt.Errorf("watch pods: %v", ev.Object)
		}
		var herr error
		switch {
		case ev.Type == watch.Deleted || finished(p):
			herr = h.Delete(p.Namespace, p.Name)
		case ev.Type == watch.Added || ev.Type == watch.Modified:
			herr = h.Upsert(nodePodOf(p))
		}
		if herr != nil {
			log.WithError(herr).WithField("pod", p.Namespace+"/"+p.Name).Warn("node agent")
		}
	}
	return nil
}

// finished reports whether every container of p has ended for good.
func finished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// nodePodOf extracts what the node agent needs from p: the running containers' IDs.
func nodePodOf(p *corev1.Pod) NodePod {
	out := NodePod{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)}
	for _, s := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		_, id, ok := strings.Cut(s.ContainerID, "://")
		if !ok || s.State.Running == nil {
			continue
		}
		if s.Name == SidecarName {
			out.SidecarID = id
			continue
		}
		if out.Containers == nil {
			out.Containers = map[string]string{}
		}
		out.Containers[s.Name] = id
	}
	return out
}
