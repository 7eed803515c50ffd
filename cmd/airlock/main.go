// Command airlock is the egress proxy and credential broker sidecar for AI-agent sandboxes.
//
// This package is thin: it parses flags and environment variables into configs, hands them to
// the packages that do the work (internal/sidecar for airlock run, sandbox, policy) and maps
// their errors onto exit codes. It holds no business logic; nothing imports it. What it may
// import is held by internal/depcheck.
//
// It is built twice. The default build is airlock, the sidecar and every command but the
// Kubernetes ones, without the Kubernetes client (kubeforward.go hands those commands to
// airlock-kube). With -tags kube it is airlock-kube, which has every command (webhook.go,
// node.go, sandbox_kube.go).
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// exitError carries an exit code through the command tree; its message (if any) is printed
// on one line to stderr by main.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// errUsage signals that usage was already printed and the exit code is 2.
var errUsage = &exitError{code: 2}

// runFunc runs a (sub)command with its arguments.
type runFunc func(args []string, stdout, stderr io.Writer) error

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     runFunc
}

// dispatch runs the subcommand of a command group ("airlock policy check ...") named by
// args[0], or prints the group's usage.
func dispatch(group, usage string, subs map[string]runFunc, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errUsage
	}
	if run, ok := subs[args[0]]; ok {
		return run(args[1:], stdout, stderr)
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprintf(stderr, "airlock %s: unknown subcommand %q\n", group, args[0])
	fmt.Fprint(stderr, usage)
	return errUsage
}

func commands() []command {
	return []command{
		{"run", "serve one sandbox's sidecar: proxy, DNS filter, model API, kernel enforcement, admin", runCmd},
		{"policy", "check, explain and test policy files, list placeholders, learn and replay (policy check|explain|test|placeholders|learn|replay)", policyCmd},
		{"ca", "print the sidecar's TLS interception CA (ca export)", caCmd},
		{"sandbox", "create, enter, list and remove local sandboxes (sandbox create|exec|list|delete|reap|doctor)", sandboxCmd},
		{"webhook", "serve the Kubernetes admission webhook that injects the sidecar into labelled pods", webhookCmd},
		{"node", "run the node agent that holds kernel enforcement for the labelled pods of its node (a DaemonSet)", nodeCmd},
		{"health", "probe a loopback admin endpoint (the injected sidecar's exec probe)", healthCmd},
		{"usage", "print model usage per model and the budget left, from the ledger", usageCmd},
		{"audit", "verify audit logs, make the checkpoint signing key, export evidence packs (audit verify|keygen|pubkey|export)", auditCmd},
		{"version", "print the version", versionCmd},
	}
}

const mainUsage = `airlock — egress proxy and credential broker for AI-agent sandboxes

Usage:
  airlock <command> [flags] [args]

Commands:
%s
Run "airlock <command> --help" for a command's flags.
`

func usage(w io.Writer) {
	var list string
	for _, c := range commands() {
		list += fmt.Sprintf("  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, mainUsage, list)
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches args to a subcommand and returns the process exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return 0
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return exitCode(c.run(args[1:], stdout, stderr), stderr)
		}
	}
	fmt.Fprintf(stderr, "airlock: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

// exitCode prints err (if it has a message) and maps it to an exit code.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintf(stderr, "airlock: %s\n", ee.msg)
		}
		return ee.code
	}
	fmt.Fprintf(stderr, "airlock: %v\n", err)
	return 1
}

// failf returns an exit-1 error with a formatted one-line message.
func failf(format string, a ...any) error {
	return &exitError{code: 1, msg: fmt.Sprintf(format, a...)}
}
