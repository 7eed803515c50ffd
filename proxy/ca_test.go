package proxy

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestLoadOrCreateCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	ca, err := LoadOrCreateCA(dir, nil)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	for name, want := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, caKeyFile): 0o600} {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s has mode %v, want %v", name, got, want)
		}
	}
	again, err := LoadOrCreateCA(dir, nil)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if !bytes.Equal(ca.CertPEM(), again.CertPEM()) {
		t.Error("a second start created a new CA, want the stored one")
	}
	cert := ca.Certificate()
	if !cert.IsCA || cert.PublicKeyAlgorithm != x509.ECDSA {
		t.Errorf("CA is IsCA=%v %v, want an ECDSA CA", cert.IsCA, cert.PublicKeyAlgorithm)
	}
}

func TestLoadOrCreateCAErrors(t *testing.T) {
	valid := t.TempDir()
	if _, err := LoadOrCreateCA(valid, nil); err != nil {
		t.Fatal(err)
	}
	certPEM, _ := os.ReadFile(filepath.Join(valid, caCertFile))
	keyPEM, _ := os.ReadFile(filepath.Join(valid, caKeyFile))
	other := t.TempDir()
	if _, err := LoadOrCreateCA(other, nil); err != nil {
		t.Fatal(err)
	}
	otherKey, _ := os.ReadFile(filepath.Join(other, caKeyFile))

	tests := []struct {
		name    string
		cert    []byte // nil: no file
		key     []byte
		keyMode os.FileMode
		now     time.Time
		want    error
	}{
		{name: "only the certificate", cert: certPEM, want: ErrCAIncomplete},
		{name: "only the key", key: keyPEM, keyMode: 0o600, want: ErrCAIncomplete},
		{name: "garbage certificate", cert: []byte("nope"), key: keyPEM, keyMode: 0o600, want: ErrInvalidCA},
		{name: "garbage key", cert: certPEM, key: []byte("nope"), keyMode: 0o600, want: ErrInvalidCA},
		{name: "key of another CA", cert: certPEM, key: otherKey, keyMode: 0o600, want: ErrInvalidCA},
		{name: "key readable by others", cert: certPEM, key: keyPEM, keyMode: 0o644, want: ErrInvalidCA},
		{name: "expired", cert: certPEM, key: keyPEM, keyMode: 0o600, now: time.Now().Add(11 * 365 * 24 * time.Hour), want: ErrInvalidCA},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.cert != nil {
				os.WriteFile(filepath.Join(dir, caCertFile), tc.cert, 0o644)
			}
			if tc.key != nil {
				os.WriteFile(filepath.Join(dir, caKeyFile), tc.key, tc.keyMode)
			}
			var now func() time.Time
			if !tc.now.IsZero() {
				now = func() time.Time { return tc.now }
			}
			if _, err := LoadOrCreateCA(dir, now); !errors.Is(err, tc.want) {
				t.Errorf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestCALeaves(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	ca, err := LoadOrCreateCA(t.TempDir(), clock)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate())
	tests := []struct {
		name, host string
		verify     x509.VerifyOptions
	}{
		{name: "name", host: "api.test", verify: x509.VerifyOptions{DNSName: "api.test"}},
		{name: "IPv4", host: "198.18.0.1", verify: x509.VerifyOptions{DNSName: "198.18.0.1"}},
		{name: "IPv6", host: "2001:db8::1", verify: x509.VerifyOptions{DNSName: "2001:db8::1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ca.leaf(tc.host)
			if err != nil {
				t.Fatal(err)
			}
			tc.verify.Roots, tc.verify.CurrentTime = roots, now
			if _, err := c.Leaf.Verify(tc.verify); err != nil {
				t.Errorf("leaf for %s does not verify: %v", tc.host, err)
			}
			if c.Leaf.NotAfter.Sub(now) > leafValidity {
				t.Errorf("leaf valid until %v, want at most %v", c.Leaf.NotAfter, leafValidity)
			}
			if again, _ := ca.leaf(tc.host); again != c {
				t.Error("second leaf for the same host was not cached")
			}
		})
	}
	now = now.Add(leafValidity) // past renewal
	c, _ := ca.leaf("api.test")
	if !c.Leaf.NotAfter.After(now) {
		t.Errorf("leaf near its end was served from cache (ends %v, now %v)", c.Leaf.NotAfter, now)
	}
}

func TestCALeafCacheBounded(t *testing.T) {
	ca, err := LoadOrCreateCA(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ca.maxLeaves = 8
	first, _ := ca.leaf("h0.test")
	for i := 1; i <= ca.maxLeaves; i++ {
		if _, err := ca.leaf(fmt.Sprintf("h%d.test", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := ca.order.Len(); n != ca.maxLeaves || len(ca.leaves) != ca.maxLeaves {
		t.Errorf("cache holds %d (%d), want %d", n, len(ca.leaves), ca.maxLeaves)
	}
	if again, _ := ca.leaf("h0.test"); again == first {
		t.Error("the least recently used leaf was not evicted")
	}
}
