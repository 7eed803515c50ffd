package sidecar

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
)

// systemTrustFiles are the trust stores the bundle starts from, in the order Go's crypto/x509
// tries them on Linux.
var systemTrustFiles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// writeCABundle atomically writes file: the system roots (the first store found; none found
// leaves only the CA, so tunnelled TLS fails closed) followed by caPEM. An empty file does
// nothing.
func writeCABundle(file string, caPEM []byte) error {
	if file == "" {
		return nil
	}
	var b bytes.Buffer
	for _, f := range systemTrustFiles {
		if data, err := os.ReadFile(f); err == nil {
			b.Write(data)
			if len(data) > 0 && data[len(data)-1] != '\n' {
				b.WriteByte('\n')
			}
			break
		}
	}
	b.WriteString("# airlock sidecar interception CA\n")
	b.Write(caPEM)
	tmp, err := os.CreateTemp(filepath.Dir(file), ".ca-bundle-*")
	if err != nil {
		return fmt.Errorf("--ca-bundle-out: %v", err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename there is nothing to remove
	if _, err := tmp.Write(b.Bytes()); err != nil {
		tmp.Close()
		return fmt.Errorf("--ca-bundle-out: write %s: %v", tmp.Name(), err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("--ca-bundle-out: %v", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("--ca-bundle-out: %v", err)
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return fmt.Errorf("--ca-bundle-out: %v", err)
	}
	return nil
}
