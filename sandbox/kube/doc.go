// Package kube is airlock's Kubernetes backend: the mutating admission webhook that injects
// the airlock sidecar into pods labelled airlock.dev/inject: "true", and the sandbox pod
// lifecycle on a cluster (CreatePod, WaitReady, Sandboxes, DeleteSandbox) with client-go.
//
// It owns the pod mutation (Options, Mutate), the sidecar's Vault login settings
// (VaultOptions: a service-account token projected into the sidecar alone), the
// admission.k8s.io/v1 HTTP handler (NewHandler), the webhook's TLS certificate reloading
// (CertReloader), the sandbox pods and their policy ConfigMaps, and the node agent's watch of
// its node's labelled pods (WatchNodePods). It does not enforce anything itself: the
// injected, unprivileged sidecar (airlock run --node-agent) and the node agent (airlock node,
// internal/node) do. It imports policy (to validate a policy before it goes into a
// ConfigMap, and the resolver address) and the Kubernetes client libraries, which live only
// here. cmd/airlock wires it to the "webhook", "sandbox create|list|delete --backend
// kubernetes" and "node" commands; nothing else imports it.
package kube
