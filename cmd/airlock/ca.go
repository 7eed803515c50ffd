package main

import (
	"io"
	"time"

	"github.com/airlock-dev/airlock/internal/cli"
	"github.com/airlock-dev/airlock/proxy"
)

const caUsage = `Usage: airlock ca export [--state-dir DIR]

  export   print the sidecar's TLS interception CA certificate as PEM (created if missing)
`

func caCmd(args []string, stdout, stderr io.Writer) error {
	return cli.Dispatch("ca", caUsage, map[string]cli.RunFunc{"export": caExport}, args, stdout, stderr)
}

func caExport(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("ca export", "airlock ca export [--state-dir DIR]", `
Print the PEM certificate of the CA that signs the leaf certificates airlock presents on
TLS-intercepted connections (rules with L7 "http" rules or "inject"). Install it in the
sandbox's trust store (SSL_CERT_FILE, NODE_EXTRA_CA_CERTS, REQUESTS_CA_BUNDLE, GIT_SSL_CAINFO).
The CA is created in the state directory on first use; the private key never leaves it.`, stderr)
	stateDir := fs.String("state-dir", cli.DefaultStateDir(), "state directory holding the CA (env AIRLOCK_STATE_DIR)")
	rest, err := fs.ParseArgs(args, stdout, true)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		fs.Usage()
		return cli.ErrUsage
	}
	ca, err := proxy.LoadOrCreateCA(*stateDir, time.Now)
	if err != nil {
		return cli.Failf("%v", err)
	}
	_, err = stdout.Write(ca.CertPEM())
	return err
}
