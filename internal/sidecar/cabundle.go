package sidecar

import (
	"fmt"

	"github.com/airlock-dev/airlock/internal/trust"
)

// writeCABundle atomically writes file, the trust bundle for the sandbox's SSL_CERT_FILE
// (--ca-bundle-out): the system roots (none found leaves only the CA, so tunnelled TLS fails
// closed) followed by caPEM. In a Kubernetes pod the app containers mount it read-only, so
// they trust the interception CA without ever seeing its key (which stays in --state-dir).
// upstreamCA (--upstream-proxy-ca) is appended: an inspecting upstream proxy re-signs the
// origins of passthrough tunnels, which the sandbox's clients then verify. An empty file
// does nothing.
func writeCABundle(file string, caPEM, upstreamCA []byte) error {
	if file == "" {
		return nil
	}
	if len(upstreamCA) > 0 {
		caPEM = append(append(append([]byte(nil), caPEM...), '\n'), upstreamCA...)
	}
	bundle, err := trust.Build(nil, "airlock sidecar interception CA", caPEM)
	if err != nil {
		return fmt.Errorf("--ca-bundle-out: %v", err)
	}
	if err := trust.Write(file, bundle); err != nil {
		return fmt.Errorf("--ca-bundle-out: %v", err)
	}
	return nil
}
