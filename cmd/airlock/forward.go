package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/airlock-dev/airlock/internal/cli"
)

// airlock does not link the Kubernetes client: Go initialises every linked package at every
// start, and the Kubernetes client's packages alone fault in about 6 MiB of the binary, which
// every injected sidecar would pay at idle (tools/bench/README.md). The Kubernetes commands are
// airlock-kube's (cmd/airlock-kube, installed beside airlock); airlock replaces itself with it
// (execve), so signals, the exit code and a container's PID 1 are airlock-kube's own. What is
// handed over, and how:
//
//	airlock webhook ARGS                          → airlock-kube webhook ARGS
//	airlock node ARGS                             → airlock-kube node ARGS
//	airlock sandbox create NAME --backend kubernetes ...  → airlock-kube sandbox create NAME KUBE-FLAGS
//	airlock sandbox list --backend kubernetes ...         → airlock-kube sandbox list KUBE-FLAGS
//	airlock sandbox delete --backend kubernetes NAME...   → airlock-kube sandbox delete KUBE-FLAGS NAME...
//
// The sandbox commands are parsed here first (so a bad flag is airlock's one-line error, and
// --help shows the Kubernetes flags), then handed over with only the Kubernetes backend's
// flags (cli.KubeCreate, cli.KubeCluster), rebuilt from their parsed values.

// kubeBinary is the file name of airlock's Kubernetes build.
const kubeBinary = "airlock-kube"

// envForwarded is set in the environment of the airlock-kube this binary executes: a binary
// that sees it and would forward again is not airlock-kube (a copy of airlock under that
// name), and refuses instead of executing itself forever.
const envForwarded = "AIRLOCK_KUBE_FORWARDED"

// forwardCmd returns the command that runs "airlock-kube NAME ARGS".
func forwardCmd(name string) cli.RunFunc {
	return func(args []string, _, _ io.Writer) error {
		return execKube(append([]string{name}, args...))
	}
}

// kubeCreate runs "airlock-kube sandbox create NAME" with the Kubernetes backend's flags.
func kubeCreate(name, policyFile string, o *cli.KubeCreate) error {
	args := []string{"sandbox", "create", name}
	if policyFile != "" {
		args = append(args, "--policy", policyFile)
	}
	return execKube(append(args, o.Args()...))
}

// kubeList runs "airlock-kube sandbox list" with the Kubernetes backend's flags.
func kubeList(k *cli.KubeCluster, all, asJSON bool) error {
	args := append([]string{"sandbox", "list"}, k.Args()...)
	if all {
		args = append(args, "--all-namespaces")
	}
	if asJSON {
		args = append(args, "--json")
	}
	return execKube(args)
}

// kubeDelete runs "airlock-kube sandbox delete NAME..." with the Kubernetes backend's flags.
func kubeDelete(k *cli.KubeCluster, names []string) error {
	args := append([]string{"sandbox", "delete"}, k.Args()...)
	return execKube(append(append(args, "--"), names...))
}

// execKube replaces this process with airlock-kube running cmdline (the arguments after the
// program name). It returns only on failure, with one line that says what is missing.
func execKube(cmdline []string) error {
	what := cmdline[0]
	if os.Getenv(envForwarded) != "" {
		return cli.Failf("%s: %s was started by airlock as %s but is not the Kubernetes build: build it with go build -o %s ./cmd/airlock-kube", what, os.Args[0], kubeBinary, kubeBinary)
	}
	path, err := findKube()
	if err != nil {
		return cli.Failf("%s needs %s, the Kubernetes build of airlock, which is %v: make build puts it in bin/, or go build -o %s ./cmd/airlock-kube", what, kubeBinary, err, kubeBinary)
	}
	env := append(os.Environ(), envForwarded+"=1")
	err = syscall.Exec(path, append([]string{path}, cmdline...), env)
	return cli.Failf("%s: execute %s: %v", what, path, err)
}

// findKube returns the airlock-kube next to this executable, else the one on $PATH. Its
// error completes "airlock-kube ... is <error>".
func findKube() (string, error) {
	where := "not on $PATH"
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), kubeBinary)
		if _, err := exec.LookPath(p); err == nil {
			return p, nil
		}
		where = "neither next to " + self + " nor on $PATH"
	}
	p, err := exec.LookPath(kubeBinary)
	switch {
	case err == nil:
		return p, nil
	case errors.Is(err, exec.ErrDot):
		// A relative $PATH entry would run whatever the current directory holds.
		return "", fmt.Errorf("%s (only a relative $PATH entry names one, and those are not used)", where)
	}
	return "", errors.New(where)
}
