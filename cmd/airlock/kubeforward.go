//go:build !kube

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// This is the sidecar build of airlock (the default): it does not link the Kubernetes client.
// Go initialises every linked package at every start, and the Kubernetes client's packages
// alone fault in about 6 MiB of the binary, which every injected sidecar would pay at idle
// (bench/README.md). "airlock webhook", "airlock node" and "airlock sandbox create|list|delete
// --backend kubernetes" are in the kube build (go build -tags kube, installed as airlock-kube
// beside airlock); this build replaces itself with it (execve), so signals, the exit code and
// a container's PID 1 are the kube build's own.

// kubeBinary is the file name of the kube build.
const kubeBinary = "airlock-kube"

// envForwarded is set in the environment of the airlock-kube this build executes: a binary
// that sees it and would forward again is not the kube build (a copy of this one under that
// name), and refuses instead of executing itself forever.
const envForwarded = "AIRLOCK_KUBE_FORWARDED"

// webhookCmd runs "airlock-kube webhook ARGS".
func webhookCmd(args []string, _, _ io.Writer) error {
	return execKube(append([]string{"webhook"}, args...))
}

// nodeCmd runs "airlock-kube node ARGS".
func nodeCmd(args []string, _, _ io.Writer) error {
	return execKube(append([]string{"node"}, args...))
}

// kubeCreate runs airlock-kube with the command line of "sandbox create --backend kubernetes".
func kubeCreate(_ context.Context, cmdline []string, _, _ string, _ *kubeCreateOptions, _ io.Writer) error {
	return execKube(cmdline)
}

// kubeList runs airlock-kube with the command line of "sandbox list --backend kubernetes".
func kubeList(_ context.Context, cmdline []string, _ *kubeClusterFlags, _, _ bool, _ io.Writer) error {
	return execKube(cmdline)
}

// kubeDelete runs airlock-kube with the command line of "sandbox delete --backend kubernetes".
func kubeDelete(_ context.Context, cmdline []string, _ *kubeClusterFlags, _ []string, _ io.Writer) error {
	return execKube(cmdline)
}

// execKube replaces this process with airlock-kube running cmdline (the arguments after the
// program name). It returns only on failure, with one line that says what is missing.
func execKube(cmdline []string) error {
	what := cmdline[0]
	if os.Getenv(envForwarded) != "" {
		return failf("%s: %s was started by airlock as %s but is not the Kubernetes build: rebuild it with go build -tags kube -o %s ./cmd/airlock", what, os.Args[0], kubeBinary, kubeBinary)
	}
	path, err := findKube()
	if err != nil {
		return failf("%s needs %s, the Kubernetes build of airlock, which is %v: make build puts it in bin/, or go build -tags kube -o %s ./cmd/airlock", what, kubeBinary, err, kubeBinary)
	}
	env := append(os.Environ(), envForwarded+"=1")
	err = syscall.Exec(path, append([]string{path}, cmdline...), env)
	return failf("%s: execute %s: %v", what, path, err)
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
