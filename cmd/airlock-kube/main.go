// Command airlock-kube is airlock's Kubernetes build: the admission webhook that injects the
// sidecar (webhook), the node agent that holds kernel enforcement for a node's pods (node),
// and the Kubernetes sandbox backend (sandbox create|list|delete). It links the Kubernetes
// client, which cmd/airlock (the sidecar build) never does; airlock hands these commands to
// airlock-kube by exec (cmd/airlock's forward.go).
//
// Like cmd/airlock it is thin: flags in, sandbox/kube and internal/node do the work. Nothing
// imports it; test/depcheck holds what it may import.
package main

import (
	"os"

	"github.com/airlock-dev/airlock/internal/cli"
)

// program is airlock-kube's command table.
var program = &cli.Program{
	Name: "airlock-kube",
	Usage: `airlock-kube — airlock's Kubernetes commands (airlock runs it for webhook, node and
sandbox ... --backend kubernetes)

Usage:
  airlock-kube <command> [flags] [args]
`,
	Commands: []cli.Command{
		{Name: "webhook", Summary: "serve the Kubernetes admission webhook that injects the sidecar into labelled pods", Run: webhookCmd},
		{Name: "node", Summary: "run the node agent that holds kernel enforcement for the labelled pods of its node (a DaemonSet)", Run: nodeCmd},
		{Name: "sandbox", Summary: "create, list and delete sandbox pods (sandbox create|list|delete; the Kubernetes backend)", Run: sandboxCmd},
		{Name: "version", Summary: "print the version", Run: cli.VersionCmd("airlock-kube")},
	},
}

func main() {
	os.Exit(program.Main(os.Args[1:], os.Stdout, os.Stderr))
}
