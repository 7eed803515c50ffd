//go:build kube

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlock-dev/airlock/sandbox/kube"
)

// connect opens the cluster the flags name.
func (k *kubeClusterFlags) connect() (*kube.Cluster, error) {
	return kube.Connect(k.kubeconfig, k.kubeContext, k.namespace)
}

// kubeCreate creates sandbox name as a pod labelled for sidecar injection, writing policyFile
// (when given, after validating it) into the pod's policy ConfigMap. The command line is the
// sidecar build's to forward (kubeforward.go); this build has parsed it already.
func kubeCreate(ctx context.Context, _ []string, name, policyFile string, o *kubeCreateOptions, stdout io.Writer) error {
	if o.image == "" {
		return failf("sandbox create %s --backend kubernetes: --image is required (the sandbox container's image)", name)
	}
	cluster, err := o.connect()
	if err != nil {
		return failf("sandbox create %s: %v", name, err)
	}
	return kubeCreateIn(ctx, cluster, name, policyFile, o, stdout)
}

// kubeCreateIn is kubeCreate on a connected cluster.
func kubeCreateIn(ctx context.Context, cluster *kube.Cluster, name, policyFile string, o *kubeCreateOptions, stdout io.Writer) error {
	co := kube.CreateOptions{
		Name: name, Namespace: cluster.Namespace, Image: o.image, PolicyConfigMap: o.policyConfigMap,
		PolicyKey: o.policyKey, PolicyFile: policyFile, Environment: o.podEnvironment,
	}
	if o.command != "" {
		co.Command = []string{"sh", "-c", o.command}
	}
	began := time.Now()
	fmt.Fprintf(stdout, "creating sandbox %s in namespace %s\n", name, cluster.Namespace)
	pod, err := kube.CreatePod(ctx, cluster.Client, co)
	if err != nil {
		return failf("sandbox create %s: %v", name, err)
	}
	if policyFile != "" {
		fmt.Fprintf(stdout, "policy %s written to ConfigMap %s/%s\n", policyFile, pod.Namespace, pod.Annotations[kube.AnnotationPolicy])
	}
	fmt.Fprintf(stdout, "created pod %s/%s (label %s=true: the airlock webhook injects the sidecar)\n", pod.Namespace, pod.Name, kube.LabelInject)
	if o.wait > 0 {
		wctx, cancel := context.WithTimeout(ctx, o.wait)
		defer cancel()
		_, err := kube.WaitReady(wctx, cluster.Client, pod.Namespace, pod.Name, func(line string) {
			fmt.Fprintf(stdout, "  %5.1fs  %s\n", time.Since(began).Seconds(), line)
		})
		if err != nil {
			return failf("sandbox create %s: %v (the pod is kept: airlock sandbox delete --backend kubernetes %s)", name, err, name)
		}
	}
	fmt.Fprintf(stdout, `sandbox %[2]s ready in %[4]s
  status:  kubectl -n %[1]s get pod %[2]s
  enter:   kubectl -n %[1]s exec -it %[2]s -c sandbox -- sh
  audit:   kubectl -n %[1]s logs %[2]s -c %[3]s
  remove:  airlock sandbox delete --backend kubernetes --namespace %[1]s %[2]s
`, pod.Namespace, pod.Name, kube.SidecarName, time.Since(began).Round(100*time.Millisecond))
	return nil
}

// kubeList prints the sandbox pods of the namespace (every namespace with all).
func kubeList(ctx context.Context, _ []string, k *kubeClusterFlags, all, asJSON bool, stdout io.Writer) error {
	cluster, err := k.connect()
	if err != nil {
		return failf("sandbox list: %v", err)
	}
	ns := cluster.Namespace
	if all {
		ns = ""
	}
	list, err := kube.Sandboxes(ctx, cluster.Client, ns)
	if err != nil {
		return failf("sandbox list: %v", err)
	}
	if asJSON {
		return writeJSON(stdout, list)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tAGE\tPHASE\tSIDECAR\tPOLICY\tNODE")
	for _, s := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Namespace, s.Name, age(time.Since(s.Created)), s.Phase, s.Sidecar, s.Policy, s.Node)
	}
	return tw.Flush()
}

// kubeDelete deletes the named sandbox pods and the policy ConfigMaps made for them, printing
// each step; a sandbox that does not exist is not an error.
func kubeDelete(ctx context.Context, _ []string, k *kubeClusterFlags, names []string, stdout io.Writer) error {
	cluster, err := k.connect()
	if err != nil {
		return failf("sandbox delete: %v", err)
	}
	var errs []string
	for _, name := range names {
		began := time.Now()
		err := kube.DeleteSandbox(ctx, cluster.Client, cluster.Namespace, name, func(line string) {
			fmt.Fprintf(stdout, "  %5.1fs  %s\n", time.Since(began).Seconds(), line)
		})
		switch {
		case errors.Is(err, kube.ErrNotFound):
			fmt.Fprintf(stdout, "sandbox %s/%s: not found (nothing to delete)\n", cluster.Namespace, name)
		case err != nil:
			errs = append(errs, err.Error())
		default:
			fmt.Fprintf(stdout, "sandbox %s/%s deleted in %s\n", cluster.Namespace, name, time.Since(began).Round(100*time.Millisecond))
		}
	}
	if len(errs) > 0 {
		return failf("sandbox delete: %s", strings.Join(errs, "; "))
	}
	return nil
}
