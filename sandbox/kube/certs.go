package kube

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"

	"github.com/sirupsen/logrus"
)

// CertReloader serves the webhook's TLS certificate and picks up a new one when the files
// change (cert-manager rotates the Secret the Deployment mounts; the kubelet swaps the files
// in place) or when Reload is called (SIGHUP). A new pair that does not load leaves the old
// one in use.
type CertReloader struct {
	certFile, keyFile string
	log               logrus.FieldLogger

	// mu guards cert, stamp, badStamp and badErr.
	mu    sync.Mutex
	cert  *tls.Certificate
	stamp string
	// badStamp is the version of the files that last failed to load, with its error: it is
	// not read (nor logged) again until the files change.
	badStamp string
	badErr   error
}

// NewCertReloader loads the key pair; errors name the files. log gets a line for every
// rotation and every failed reload.
func NewCertReloader(certFile, keyFile string, log logrus.FieldLogger) (*CertReloader, error) {
	r := &CertReloader{certFile: certFile, keyFile: keyFile, log: log}
	if _, _, err := r.load(); err != nil {
		return nil, err
	}
	return r, nil
}

// stampOf identifies the files' current versions by size and modification time (stat
// follows the kubelet's ..data symlink to the new files).
func (r *CertReloader) stampOf() (string, error) {
	var s string
	for _, f := range []string{r.certFile, r.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return "", fmt.Errorf("stat TLS file: %w", err)
		}
		s += fmt.Sprintf("%d/%d;", fi.Size(), fi.ModTime().UnixNano())
	}
	return s, nil
}

// Reload reads the key pair again if the files changed since the last load; it reports
// whether a new certificate is now in use, and logs a rotation or a failure.
func (r *CertReloader) Reload() (bool, error) {
	changed, fresh, err := r.load()
	switch {
	case err != nil && fresh:
		r.log.WithField("error", err.Error()).Error("TLS certificate not reloaded; keeping the previous one")
	case changed:
		r.log.WithField("cert", r.certFile).Info("TLS certificate reloaded")
	}
	return changed, err
}

// load reads the key pair if the files changed; fresh is false when the outcome is the
// remembered one of an earlier attempt on the same files.
func (r *CertReloader) load() (changed, fresh bool, err error) {
	stamp, err := r.stampOf()
	if err != nil {
		return false, true, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.cert != nil && stamp == r.stamp:
		return false, false, nil
	case stamp == r.badStamp:
		return false, false, r.badErr
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		r.badStamp, r.badErr = stamp, fmt.Errorf("load TLS key pair %s, %s: %w", r.certFile, r.keyFile, err)
		return false, true, r.badErr
	}
	r.cert, r.stamp, r.badStamp, r.badErr = &cert, stamp, "", nil
	return true, true, nil
}

// GetCertificate is for tls.Config: it checks the files (a stat each, cheap at webhook
// rates) and returns the current certificate.
func (r *CertReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	_, _ = r.Reload() // a half-written pair keeps the previous certificate; the next handshake retries
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cert, nil
}

// TLSConfig is the webhook server's TLS configuration (TLS 1.2 or later).
func (r *CertReloader) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate}
}
