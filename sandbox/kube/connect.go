package kube

import (
	"fmt"

	"k8s.io/client-go/tools/clientcmd"
)

// Cluster is a client for one cluster and the namespace to work in.
type Cluster struct {
	Client    API
	Namespace string
}

// Connect builds a client the way kubectl does: kubeconfig if set, else $KUBECONFIG, else
// ~/.kube/config, else the in-cluster service account; kubeContext empty means the current
// context. namespace empty means the context's namespace, else "default".
func Connect(kubeconfig, kubeContext, namespace string) (*Cluster, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubeContext})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	if namespace == "" {
		if ns, _, err := cc.Namespace(); err == nil && ns != "" {
			namespace = ns
		} else {
			namespace = "default"
		}
	}
	client, err := newRESTAPI(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return &Cluster{Client: client, Namespace: namespace}, nil
}
