package cli

import "time"

// The flags of the Kubernetes sandbox backend ("sandbox create|list|delete --backend
// kubernetes"). airlock registers them so that "airlock sandbox create --help" shows them and
// a command line is checked before it is forwarded; airlock-kube registers the same ones and
// serves the command. Their defaults that belong to sandbox/kube (the policy key) are applied
// by airlock-kube, so none of its constants is copied here.

// KubeCluster says which cluster and namespace a Kubernetes sandbox command works in.
type KubeCluster struct {
	// Namespace is --namespace; empty means the kubeconfig context's, else default.
	Namespace string
	// Kubeconfig is --kubeconfig; empty means $KUBECONFIG, ~/.kube/config, else in-cluster.
	Kubeconfig string
	// Context is --kube-context; empty means the kubeconfig's current context.
	Context string
}

// Register adds --namespace, --kubeconfig and --kube-context to fs.
func (k *KubeCluster) Register(fs *FlagSet) {
	fs.StringVar(&k.Namespace, "namespace", "", "kubernetes: namespace of the sandbox pods and their policy ConfigMaps (default: the kubeconfig context's, else default)")
	fs.StringVar(&k.Kubeconfig, "kubeconfig", "", "kubernetes: kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, else the in-cluster service account)")
	fs.StringVar(&k.Context, "kube-context", "", "kubernetes: kubeconfig context (default: the current one)")
}

// KubeCreate are the flags of "sandbox create --backend kubernetes".
type KubeCreate struct {
	KubeCluster
	// Image is --image: the sandbox container's image (required with --backend kubernetes;
	// a local sandbox's root filesystem otherwise).
	Image string
	// PolicyConfigMap is --policy-configmap; empty means NAME-policy.
	PolicyConfigMap string
	// PolicyKey is --policy-key; empty means sandbox/kube's default key.
	PolicyKey string
	// Command is --command, run by sh -c; empty means sleep forever.
	Command string
	// PodEnvironment is --pod-environment, the airlock.dev/environment annotation; empty
	// means the webhook's.
	PodEnvironment string
	// Wait is --wait; 0 means do not wait for the pod to be ready.
	Wait time.Duration
	// Containers is --containers, the app containers' names, comma-separated; empty means
	// one, sandbox/kube's default.
	Containers string
	// Identities is --identities, the airlock.dev/identities annotation
	// ("CONTAINER=IDENTITY,..."); empty means none.
	Identities string
}

// Register adds the Kubernetes backend's flags to the sandbox create flag set.
func (o *KubeCreate) Register(fs *FlagSet) {
	o.KubeCluster.Register(fs)
	fs.StringVar(&o.Image, "image", "", "the sandbox's image, `REF`; local: its root filesystem (an OCI layout directory, an OCI or docker-save tarball, or a registry reference; default the host's read-only view); kubernetes: the sandbox container's (required)")
	fs.StringVar(&o.PolicyConfigMap, "policy-configmap", "", "kubernetes: policy ConfigMap the pod names (default NAME-policy); --policy writes it, else it must exist")
	fs.StringVar(&o.PolicyKey, "policy-key", "", "kubernetes: key of the policy in the ConfigMap (default policy.yaml)")
	fs.StringVar(&o.Command, "command", "", `kubernetes: shell command the sandbox container runs (sh -c); default "sleep infinity", to kubectl exec into`)
	fs.StringVar(&o.PodEnvironment, "pod-environment", "", "kubernetes: airlock.dev/environment annotation (stricter than the webhook's, or empty for the webhook's)")
	fs.StringVar(&o.Containers, "containers", "", "kubernetes: the pod's app containers, `NAME,...`, each running --image and --command (default one, sandbox)")
	fs.StringVar(&o.Identities, "identities", "", "kubernetes: airlock.dev/identities annotation, `CONTAINER=IDENTITY,...`: which identity of the policy's spec.identities each container is (checked against --containers and the policy before anything is created)")
	fs.DurationVar(&o.Wait, "wait", 3*time.Minute, "kubernetes: wait this long for the sidecar to be ready and the sandbox running, printing each step (0: do not wait)")
}

// Args is the command line that sets k's flags (those not empty), for airlock-kube.
func (k *KubeCluster) Args() []string {
	return appendSet(nil, "namespace", k.Namespace, "kubeconfig", k.Kubeconfig, "kube-context", k.Context)
}

// Args is the command line that sets o's flags, for airlock-kube: every non-empty one, and
// --wait always (its zero means "do not wait").
func (o *KubeCreate) Args() []string {
	args := appendSet(o.KubeCluster.Args(), "image", o.Image, "policy-configmap", o.PolicyConfigMap,
		"policy-key", o.PolicyKey, "command", o.Command, "pod-environment", o.PodEnvironment,
		"containers", o.Containers, "identities", o.Identities)
	return append(args, "--wait", o.Wait.String())
}

// appendSet appends "--NAME VALUE" for each name, value pair whose value is not empty.
func appendSet(args []string, pairs ...string) []string {
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] != "" {
			args = append(args, "--"+pairs[i], pairs[i+1])
		}
	}
	return args
}
