// Package trust owns building the sandbox trust bundle: the roots a sandbox trusts anyway (the
// file SSL_CERT_FILE names, else the system store) followed by the sidecar's TLS interception
// CA, written atomically so that a reader sees a whole bundle or none. It imports nothing of
// ours; cmd/airlock (--ca-bundle-out, for a pod's app containers) and sandbox (the local
// sandbox's public CA bundle) use it. It does not create or hold the CA: its caller passes the
// certificate in.
package trust

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// SystemBundles are the trust stores Roots starts from when SSL_CERT_FILE is not set, in the
// order Go's crypto/x509 tries them on Linux.
func SystemBundles() []string {
	return []string{
		"/etc/ssl/certs/ca-certificates.crt",
		"/etc/pki/tls/certs/ca-bundle.crt",
		"/etc/ssl/ca-bundle.pem",
		"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
		"/etc/ssl/cert.pem",
	}
}

// Roots returns the PEM roots to trust besides the sidecar CA: the file SSL_CERT_FILE names in
// env (an unreadable one is an error, never an empty store), else the first of bundles that
// can be read. Nothing found is not an error: the bundle then holds only the sidecar CA, so
// tunnelled TLS to anything else fails closed.
func Roots(env, bundles []string) ([]byte, error) {
	for _, kv := range env {
		if f, ok := strings.CutPrefix(kv, "SSL_CERT_FILE="); ok && f != "" {
			data, err := os.ReadFile(f)
			if err != nil {
				return nil, fmt.Errorf("read SSL_CERT_FILE %s: %w", f, err)
			}
			return data, nil
		}
	}
	for _, f := range bundles {
		if data, err := os.ReadFile(f); err == nil {
			return data, nil
		}
	}
	return nil, nil
}

// Bundle is roots, then the comment line "# label", then caPEM: the bundle a sandbox's
// SSL_CERT_FILE names.
func Bundle(roots []byte, label string, caPEM []byte) []byte {
	var b bytes.Buffer
	b.Write(roots)
	if len(roots) > 0 && !bytes.HasSuffix(roots, []byte("\n")) {
		b.WriteByte('\n')
	}
	b.WriteString("# " + label + "\n")
	b.Write(caPEM)
	return b.Bytes()
}

// Build reads the roots (Roots of env and SystemBundles) and returns the bundle with caPEM
// under label.
func Build(env []string, label string, caPEM []byte) ([]byte, error) {
	roots, err := Roots(env, SystemBundles())
	if err != nil {
		return nil, err
	}
	return Bundle(roots, label, caPEM), nil
}

// Write replaces file with bundle (mode 0644: the sandbox's processes run as any user) through a
// temporary file in the same directory and a rename, so that a reader sees the old or the new
// bundle, never a mix. It does not fsync: the bundle is rebuilt at every start.
func Write(file string, bundle []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", file, err)
	}
	if _, err := tmp.Write(bundle); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", file, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	return nil
}
