//go:build !nokube

package main

import (
	"context"
	"fmt"
	"io"

	"github.com/airlock-dev/airlock/sandbox/kube"
)

// kubeCreateOptions are the flags of "sandbox create --backend kubernetes".
type kubeCreateOptions struct {
	namespace, kubeconfig, kubeContext string
	image, policyConfigMap, policyKey  string
	command, podEnvironment            string
}

// kubeCreateFlags registers the Kubernetes backend's flags on the sandbox create flag set.
func kubeCreateFlags(fs *flagSet) *kubeCreateOptions {
	o := &kubeCreateOptions{}
	fs.StringVar(&o.namespace, "namespace", "", "kubernetes: namespace of the sandbox pod and its policy ConfigMap (default: the kubeconfig context's, else default)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubernetes: kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, else the in-cluster service account)")
	fs.StringVar(&o.kubeContext, "kube-context", "", "kubernetes: kubeconfig context (default: the current one)")
	fs.StringVar(&o.image, "image", "", "kubernetes: image of the sandbox container (required with --backend kubernetes)")
	fs.StringVar(&o.policyConfigMap, "policy-configmap", "", "kubernetes: policy ConfigMap the pod names (default NAME-policy); --policy writes it, else it must exist")
	fs.StringVar(&o.policyKey, "policy-key", kube.DefaultPolicyKey, "kubernetes: key of the policy in the ConfigMap")
	fs.StringVar(&o.command, "command", "", `kubernetes: shell command the sandbox container runs (sh -c); default "sleep infinity", to kubectl exec into`)
	fs.StringVar(&o.podEnvironment, "pod-environment", "", "kubernetes: airlock.dev/environment annotation (stricter than the webhook's, or empty for the webhook's)")
	return o
}

// kubeCreate creates sandbox name as a pod labelled for sidecar injection, writing policyFile
// (when given, after validating it) into the pod's policy ConfigMap.
func kubeCreate(ctx context.Context, name, policyFile string, o *kubeCreateOptions, stdout io.Writer) error {
	if o.image == "" {
		return failf("sandbox create %s --backend kubernetes: --image is required (the sandbox container's image)", name)
	}
	cluster, err := kube.Connect(o.kubeconfig, o.kubeContext, o.namespace)
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
	pod, err := kube.CreatePod(ctx, cluster.Client, co)
	if err != nil {
		return failf("sandbox create %s: %v", name, err)
	}
	if policyFile != "" {
		fmt.Fprintf(stdout, "policy %s written to ConfigMap %s/%s\n", policyFile, pod.Namespace, pod.Annotations[kube.AnnotationPolicy])
	}
	fmt.Fprintf(stdout, `created pod %[1]s/%[2]s (label %[3]s=true: the airlock webhook injects the sidecar)
  status:  kubectl -n %[1]s get pod %[2]s
  enter:   kubectl -n %[1]s exec -it %[2]s -c sandbox -- sh
  audit:   kubectl -n %[1]s logs %[2]s -c %[4]s
  remove:  kubectl -n %[1]s delete pod %[2]s
`, pod.Namespace, pod.Name, kube.LabelInject, kube.SidecarName)
	return nil
}
