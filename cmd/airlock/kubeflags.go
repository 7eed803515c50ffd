package main

import "time"

// The flags of the Kubernetes sandbox backend ("sandbox create|list|delete --backend
// kubernetes") are registered in both builds, so that "airlock sandbox create --help" shows
// them and the sidecar build (which forwards the command to airlock-kube, kubeforward.go)
// parses the same command line that airlock-kube will. The code behind them is
// sandbox_kube.go, in the kube build only.

// defaultPolicyKey is sandbox/kube's DefaultPolicyKey, which this file cannot import without
// linking the Kubernetes client into the sidecar build; a test of the kube build holds them equal.
const defaultPolicyKey = "policy.yaml"

// kubeClusterFlags say which cluster and namespace a Kubernetes sandbox command works in.
type kubeClusterFlags struct {
	namespace, kubeconfig, kubeContext string
}

func (k *kubeClusterFlags) register(fs *flagSet) {
	fs.StringVar(&k.namespace, "namespace", "", "kubernetes: namespace of the sandbox pods and their policy ConfigMaps (default: the kubeconfig context's, else default)")
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "kubernetes: kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, else the in-cluster service account)")
	fs.StringVar(&k.kubeContext, "kube-context", "", "kubernetes: kubeconfig context (default: the current one)")
}

// kubeCreateOptions are the flags of "sandbox create --backend kubernetes".
type kubeCreateOptions struct {
	kubeClusterFlags
	image, policyConfigMap, policyKey string
	command, podEnvironment           string
	wait                              time.Duration
}

// kubeCreateFlags registers the Kubernetes backend's flags on the sandbox create flag set.
func kubeCreateFlags(fs *flagSet) *kubeCreateOptions {
	o := &kubeCreateOptions{}
	o.register(fs)
	fs.StringVar(&o.image, "image", "", "kubernetes: image of the sandbox container (required with --backend kubernetes)")
	fs.StringVar(&o.policyConfigMap, "policy-configmap", "", "kubernetes: policy ConfigMap the pod names (default NAME-policy); --policy writes it, else it must exist")
	fs.StringVar(&o.policyKey, "policy-key", defaultPolicyKey, "kubernetes: key of the policy in the ConfigMap")
	fs.StringVar(&o.command, "command", "", `kubernetes: shell command the sandbox container runs (sh -c); default "sleep infinity", to kubectl exec into`)
	fs.StringVar(&o.podEnvironment, "pod-environment", "", "kubernetes: airlock.dev/environment annotation (stricter than the webhook's, or empty for the webhook's)")
	fs.DurationVar(&o.wait, "wait", 3*time.Minute, "kubernetes: wait this long for the sidecar to be ready and the sandbox running, printing each step (0: do not wait)")
	return o
}
