// Package cluster holds airlock's acceptance tests on a real single-node Kubernetes
// (test/kubecluster): installed from deploy/ as a platform team would, the webhook
// injects the sidecar and the sidecar enforces the policy on a real pod, logs in to a real
// Vault with the pod's projected service-account token, and `airlock sandbox
// create|list|delete --backend kubernetes` manage sandbox pods. They run with
// AIRLOCK_CLUSTER_TESTS=1, as root (see test/kubecluster).
package cluster
