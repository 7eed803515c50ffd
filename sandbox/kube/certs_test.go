package kube

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// selfSigned returns a PEM certificate and key for commonName.
func selfSigned(t *testing.T, commonName string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: commonName},
		DNSNames:     []string{commonName},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// writePair writes a key pair and stamps it with mtime, so a rewrite within the same clock
// tick is still seen as a change.
func writePair(t *testing.T, certFile, keyFile string, cert, key []byte, mtime time.Time) {
	t.Helper()
	for f, data := range map[string][]byte{certFile: cert, keyFile: key} {
		if err := os.WriteFile(f, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(f, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
}

func commonName(t *testing.T, r *CertReloader) string {
	t.Helper()
	c, err := r.GetCertificate(nil)
	if err != nil || c == nil {
		t.Fatalf("GetCertificate: %v", err)
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf.Subject.CommonName
}

func TestCertReloader(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	base := time.Now().Add(-time.Minute)

	c1, k1 := selfSigned(t, "first.test")
	writePair(t, certFile, keyFile, c1, k1, base)
	r, err := NewCertReloader(certFile, keyFile, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	if got := commonName(t, r); got != "first.test" {
		t.Fatalf("certificate %q, want first.test", got)
	}

	c2, k2 := selfSigned(t, "second.test")
	writePair(t, certFile, keyFile, c2, k2, base.Add(time.Second))
	if got := commonName(t, r); got != "second.test" {
		t.Errorf("after rotation: certificate %q, want second.test", got)
	}

	// A broken pair (cert and key from different rotations) keeps the last good one.
	writePair(t, certFile, keyFile, c1, k2, base.Add(2*time.Second))
	if got := commonName(t, r); got != "second.test" {
		t.Errorf("after a broken rotation: certificate %q, want second.test kept", got)
	}
	if _, err := r.Reload(); err == nil {
		t.Errorf("Reload of a mismatched pair: no error")
	}

	if _, err := NewCertReloader(filepath.Join(dir, "none.crt"), keyFile, quietLogger()); err == nil {
		t.Errorf("NewCertReloader with a missing file: no error")
	}
}
