package main

import "github.com/airlock-dev/airlock/internal/trust"

// caBundleFlags registers --ca-bundle-out: in a Kubernetes pod the sidecar writes the trust
// store of the app containers into a volume they mount read-only, so they trust its
// interception CA without ever seeing its key (which stays in --state-dir).
func caBundleFlags(fs *flagSet, c *runConfig) {
	fs.StringVar(&c.caBundleOut, "ca-bundle-out", "", "write a CA bundle (system roots + this sidecar's interception CA) to this file at start, for the sandbox's SSL_CERT_FILE")
}

// writeCABundle atomically writes file: the system roots (the first store found; none found
// leaves only the CA, so tunnelled TLS fails closed) followed by caPEM. An empty file does
// nothing.
func writeCABundle(file string, caPEM []byte) error {
	if file == "" {
		return nil
	}
	bundle, err := trust.Build(nil, "airlock sidecar interception CA", caPEM)
	if err != nil {
		return failf("--ca-bundle-out: %v", err)
	}
	if err := trust.Write(file, bundle); err != nil {
		return failf("--ca-bundle-out: %v", err)
	}
	return nil
}
