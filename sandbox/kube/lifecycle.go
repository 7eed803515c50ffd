package kube

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// ErrNotFound is returned (wrapped) by DeleteSandbox when no such sandbox pod exists.
var ErrNotFound = errors.New("sandbox not found")

// ErrNotASandbox is returned (wrapped) by DeleteSandbox for a pod that CreatePod did not make:
// airlock deletes only what it created.
var ErrNotASandbox = errors.New("not a sandbox made by airlock")

// pollInterval is how often WaitReady and DeleteSandbox look at the pod again.
const pollInterval = time.Second

// Sandbox is one sandbox pod as `sandbox list --backend kubernetes` shows it.
type Sandbox struct {
	Name      string    `json:"name"`
	Namespace string    `json:"namespace"`
	Created   time.Time `json:"created"`
	// Phase is the pod's phase (Pending, Running, Succeeded, Failed, Unknown), or
	// "Terminating" once its deletion has begun.
	Phase string `json:"phase"`
	// Sidecar is "ready", "starting", "stopped" or "missing" (not injected: the pod stays
	// gated until the webhook injects it).
	Sidecar string `json:"sidecar"`
	// Policy is the policy ConfigMap the pod names.
	Policy string `json:"policy"`
	Node   string `json:"node,omitempty"`
}

// Sandboxes lists the sandbox pods CreatePod made in namespace ("" means every namespace),
// in the API server's order.
func Sandboxes(ctx context.Context, client API, namespace string) ([]Sandbox, error) {
	pods, err := client.ListPods(ctx, namespace, LabelSandbox)
	if err != nil {
		return nil, fmt.Errorf("list sandbox pods: %w", err)
	}
	out := make([]Sandbox, 0, len(pods))
	for i := range pods {
		p := &pods[i]
		phase := string(p.Status.Phase)
		if p.DeletionTimestamp != nil {
			phase = "Terminating"
		}
		out = append(out, Sandbox{
			Name: p.Name, Namespace: p.Namespace, Created: p.CreationTimestamp.Time, Phase: phase,
			Sidecar: sidecarState(p), Policy: p.Annotations[AnnotationPolicy], Node: p.Spec.NodeName,
		})
	}
	return out, nil
}

// sidecarState says where the injected sidecar of p is.
func sidecarState(p *corev1.Pod) string {
	if len(p.Spec.InitContainers) == 0 || p.Spec.InitContainers[0].Name != SidecarName {
		return "missing"
	}
	for _, s := range p.Status.InitContainerStatuses {
		if s.Name != SidecarName {
			continue
		}
		switch {
		case s.Ready:
			return "ready"
		case s.State.Terminated != nil:
			return "stopped"
		}
	}
	return "starting"
}

// WaitReady polls the sandbox pod until its sidecar is ready and its sandbox container runs,
// calling progress with one line each time that changes (scheduled, sidecar started, ready).
// It fails at once when the pod was not injected (no webhook answered) and when the pod ends.
func WaitReady(ctx context.Context, client API, namespace, name string, progress func(string)) (*corev1.Pod, error) {
	last := ""
	for {
		p, err := client.GetPod(ctx, namespace, name)
		if err != nil {
			return nil, fmt.Errorf("get pod %s/%s: %w", namespace, name, err)
		}
		state, done, err := readiness(p)
		if err != nil {
			return p, fmt.Errorf("pod %s/%s: %w", namespace, name, err)
		}
		if state != last {
			progress(state)
			last = state
		}
		if done {
			return p, nil
		}
		t := time.NewTimer(pollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return p, fmt.Errorf("pod %s/%s not ready (%s): %w", namespace, name, last, ctx.Err())
		case <-t.C:
		}
	}
}

// readiness describes where the pod is on its way to ready, and whether it got there.
func readiness(p *corev1.Pod) (state string, ready bool, err error) {
	if sidecarState(p) == "missing" {
		return "", false, errors.New("the airlock webhook did not inject the sidecar (is it installed, and does its namespaceSelector include this namespace?); the pod stays Pending until it is")
	}
	switch p.Status.Phase {
	case corev1.PodSucceeded, corev1.PodFailed:
		return "", false, fmt.Errorf("ended (%s) before it was ready: kubectl -n %s describe pod %s", p.Status.Phase, p.Namespace, p.Name)
	}
	if p.Spec.NodeName == "" {
		return "sidecar injected; waiting for a node", false, nil
	}
	switch sidecarState(p) {
	case "starting":
		return "scheduled on " + p.Spec.NodeName + "; starting the airlock sidecar (policy, enforcement, CA)", false, nil
	case "stopped":
		return "airlock sidecar stopped; the kubelet restarts it: kubectl -n " + p.Namespace + " logs " + p.Name + " -c " + SidecarName, false, nil
	}
	for _, s := range p.Status.ContainerStatuses {
		if w := s.State.Waiting; w != nil && w.Reason != "" && w.Reason != "ContainerCreating" && w.Reason != "PodInitializing" {
			return "sidecar ready; container " + s.Name + " waiting: " + w.Reason, false, nil
		}
		if s.State.Running == nil {
			return "sidecar ready; starting the sandbox containers", false, nil
		}
	}
	if len(p.Status.ContainerStatuses) == 0 {
		return "sidecar ready; starting the sandbox containers", false, nil
	}
	return "ready: sidecar enforcing, sandbox running", true, nil
}

// DeleteSandbox deletes the sandbox pod (graceful: the sidecar revokes its Vault leases on
// SIGTERM), waits until it is gone, then deletes the policy ConfigMap CreatePod made for it
// (one it only updated is kept). progress gets one line per step. Errors wrap ErrNotFound
// when there is no such pod, and ErrNotASandbox when the pod is not one CreatePod made.
func DeleteSandbox(ctx context.Context, client API, namespace, name string, progress func(string)) error {
	p, err := client.GetPod(ctx, namespace, name)
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("pod %s/%s: %w", namespace, name, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("get pod %s/%s: %w", namespace, name, err)
	}
	if _, ok := p.Labels[LabelSandbox]; !ok {
		return fmt.Errorf("pod %s/%s has no label %s (delete it with kubectl): %w", namespace, name, LabelSandbox, ErrNotASandbox)
	}
	if err := client.DeletePod(ctx, namespace, name); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete pod %s/%s: %w", namespace, name, err)
	}
	progress(fmt.Sprintf("deleting pod %s/%s (the sidecar stops last, revoking its Vault leases)", namespace, name))
	for {
		if _, err := client.GetPod(ctx, namespace, name); apierrors.IsNotFound(err) {
			break
		} else if err != nil {
			return fmt.Errorf("get pod %s/%s: %w", namespace, name, err)
		}
		t := time.NewTimer(pollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("pod %s/%s still terminating: %w", namespace, name, ctx.Err())
		case <-t.C:
		}
	}
	progress(fmt.Sprintf("pod %s/%s gone", namespace, name))
	return deletePolicyConfigMap(ctx, client, p, progress)
}

// deletePolicyConfigMap deletes the pod's policy ConfigMap when CreatePod created it for this
// sandbox (labelled with its name).
func deletePolicyConfigMap(ctx context.Context, client API, p *corev1.Pod, progress func(string)) error {
	name := p.Annotations[AnnotationPolicy]
	if name == "" {
		return nil
	}
	cm, err := client.GetConfigMap(ctx, p.Namespace, name)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("get policy ConfigMap %s/%s: %w", p.Namespace, name, err)
	case cm.Labels[LabelSandbox] != p.Labels[LabelSandbox]:
		progress(fmt.Sprintf("policy ConfigMap %s/%s kept (not made for this sandbox)", p.Namespace, name))
		return nil
	}
	others, err := Sandboxes(ctx, client, p.Namespace)
	if err != nil {
		return err
	}
	for _, o := range others {
		if o.Policy == name && o.Name != p.Name {
			progress(fmt.Sprintf("policy ConfigMap %s/%s kept (sandbox %s uses it too)", p.Namespace, name, o.Name))
			return nil
		}
	}
	if err := client.DeleteConfigMap(ctx, p.Namespace, name); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete policy ConfigMap %s/%s: %w", p.Namespace, name, err)
	}
	progress(fmt.Sprintf("policy ConfigMap %s/%s deleted", p.Namespace, name))
	return nil
}
