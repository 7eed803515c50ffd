//go:build tools

// Package build pins the Kubernetes 1.37 and etcd 3.7 commands that test/kubecluster runs.
// It is its own module so that airlock's go.mod never grows by Kubernetes' dependency tree;
// test/kubecluster builds the commands named here into .cache/ with `go build`.
package build

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
