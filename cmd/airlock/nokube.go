//go:build nokube

package main

import (
	"context"
	"io"
)

// This file replaces the Kubernetes commands in a build with -tags nokube: a sidecar-only
// binary that does not link (and initialise at every start) the Kubernetes client, which
// costs the sidecar about 4 MiB of resident memory at idle (bench/README.md). Everything but
// "airlock webhook", "airlock node" and the Kubernetes sandbox backend works as in the full
// build.

// kubeClusterFlags stands for the Kubernetes sandbox commands' cluster flags: none here.
type kubeClusterFlags struct{}

func (*kubeClusterFlags) register(*flagSet) {}

// kubeList says the backend is not in this build.
func kubeList(context.Context, *kubeClusterFlags, bool, bool, io.Writer) error {
	return failf("sandbox list --backend kubernetes: this airlock was built with -tags nokube, without the Kubernetes backend")
}

// kubeDelete says the backend is not in this build.
func kubeDelete(context.Context, *kubeClusterFlags, []string, io.Writer) error {
	return failf("sandbox delete --backend kubernetes: this airlock was built with -tags nokube, without the Kubernetes backend")
}

// kubeCreateOptions stands for the Kubernetes backend's flags, which this build has not.
type kubeCreateOptions struct{}

// kubeCreateFlags registers nothing: this build has no Kubernetes backend.
func kubeCreateFlags(*flagSet) *kubeCreateOptions { return &kubeCreateOptions{} }

// kubeCreate says the backend is not in this build.
func kubeCreate(_ context.Context, name, _ string, _ *kubeCreateOptions, _ io.Writer) error {
	return failf("sandbox create %s --backend kubernetes: this airlock was built with -tags nokube, without the Kubernetes backend", name)
}

// nodeCmd says the node agent is not in this build.
func nodeCmd([]string, io.Writer, io.Writer) error {
	return failf("node: this airlock was built with -tags nokube, without Kubernetes support")
}

// webhookCmd says the webhook is not in this build.
func webhookCmd([]string, io.Writer, io.Writer) error {
	return failf("webhook: this airlock was built with -tags nokube, without Kubernetes support")
}
