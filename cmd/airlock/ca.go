package main

import (
	"fmt"
	"io"
	"runtime/debug"
	"time"

	"github.com/airlock-dev/airlock/proxy"
)

const caUsage = `Usage: airlock ca export [--state-dir DIR]

  export   print the sidecar's TLS interception CA certificate as PEM (created if missing)
`

func caCmd(args []string, stdout, stderr io.Writer) error {
	return dispatch("ca", caUsage, map[string]runFunc{"export": caExport}, args, stdout, stderr)
}

func caExport(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("ca export", "airlock ca export [--state-dir DIR]", `
Print the PEM certificate of the CA that signs the leaf certificates airlock presents on
TLS-intercepted connections (rules with L7 "http" rules or "inject"). Install it in the
sandbox's trust store (SSL_CERT_FILE, NODE_EXTRA_CA_CERTS, REQUESTS_CA_BUNDLE, GIT_SSL_CAINFO).
The CA is created in the state directory on first use; the private key never leaves it.`, stderr)
	stateDir := fs.String("state-dir", defaultStateDir(), "state directory holding the CA (env AIRLOCK_STATE_DIR)")
	rest, err := fs.parse(args, stdout, true)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		fs.Usage()
		return errUsage
	}
	ca, err := proxy.LoadOrCreateCA(*stateDir, time.Now)
	if err != nil {
		return failf("%v", err)
	}
	_, err = stdout.Write(ca.CertPEM())
	return err
}

// version is set at build time with -ldflags "-X main.version=..."; otherwise the module
// version or VCS revision recorded by the Go toolchain is printed.
var version = ""

func versionString() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	v := info.Main.Version
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += " (" + s.Value[:12] + ")"
		}
	}
	return v
}

func versionCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "airlock version", "Print airlock's version.", stderr)
	if _, err := fs.parse(args, stdout, false); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "airlock %s\n", versionString())
	return nil
}
