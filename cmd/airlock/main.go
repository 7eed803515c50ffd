// Command airlock is the egress proxy and credential broker sidecar for AI-agent sandboxes,
// and every command of airlock but the Kubernetes ones.
//
// This package is thin: it parses flags and environment variables into configs, hands them to
// the packages that do the work (internal/sidecar for airlock run, sandbox, policy) and maps
// their errors onto exit codes. It holds no business logic; nothing imports it. What it may
// import is held by test/depcheck: above all, it links no Kubernetes client, which every
// injected sidecar would pay for at idle. The Kubernetes commands are cmd/airlock-kube's;
// forward.go hands them over.
package main

import (
	"os"

	"github.com/airlock-dev/airlock/internal/cli"
)

// program is airlock's command table.
var program = &cli.Program{
	Name: "airlock",
	Usage: `airlock — egress proxy and credential broker for AI-agent sandboxes

Usage:
  airlock <command> [flags] [args]
`,
	Commands: []cli.Command{
		{Name: "run", Summary: "serve one sandbox's sidecar: proxy, DNS filter, model API, kernel enforcement, admin", Run: runCmd},
		{Name: "policy", Summary: "check, explain and test policy files, list placeholders, learn and replay (policy check|explain|test|placeholders|learn|replay)", Run: policyCmd},
		{Name: "ca", Summary: "print the sidecar's TLS interception CA (ca export)", Run: caCmd},
		{Name: "sandbox", Summary: "create, enter, list and remove local sandboxes (sandbox create|exec|list|delete|reap|doctor)", Run: sandboxCmd},
		{Name: "webhook", Summary: "serve the Kubernetes admission webhook that injects the sidecar into labelled pods (runs airlock-kube)", Run: forwardCmd("webhook")},
		{Name: "node", Summary: "run the node agent that holds kernel enforcement for the labelled pods of its node (runs airlock-kube)", Run: forwardCmd("node")},
		{Name: "health", Summary: "probe a loopback admin endpoint (the injected sidecar's exec probe)", Run: healthCmd},
		{Name: "usage", Summary: "print model usage per model and the budget left, from the ledger", Run: usageCmd},
		{Name: "approvals", Summary: "list, grant, deny and revoke a sidecar's asks to the operator (approvals list|grant|deny|revoke)", Run: approvalsCmd},
		{Name: "audit", Summary: "verify audit logs, make the checkpoint signing key, export evidence packs (audit verify|keygen|pubkey|export)", Run: auditCmd},
		{Name: "version", Summary: "print the version", Run: cli.VersionCmd("airlock")},
	},
}

func main() {
	os.Exit(program.Main(os.Args[1:], os.Stdout, os.Stderr))
}
