package proxy

import (
	"bytes"
	"container/list"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// CA files in the state directory.
const (
	caCertFile = "ca.crt"
	caKeyFile  = "ca.key"
)

const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 24 * time.Hour
	// leafRenew is how long before its end a cached leaf is replaced.
	leafRenew = time.Hour
	// clockSkew backdates certificates for clients whose clocks run slow.
	clockSkew = time.Hour
	// leafCacheSize bounds the leaf cache (one entry per intercepted host).
	leafCacheSize = 1024
)

// CA is the sidecar's certificate authority for TLS interception: an ECDSA P-256 key and a
// self-signed certificate kept in the state directory, and the short-lived leaf certificates
// it signs for intercepted hosts, cached in a bounded LRU. Sandboxes trust its certificate
// (airlock ca export). It is safe for concurrent use.
type CA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	now     func() time.Time

	maxLeaves int // leaf cache bound

	// mu guards leaves, order and the ticket keys.
	mu     sync.Mutex
	leaves map[string]*list.Element // host -> element of order holding a *leafEntry
	order  *list.List               // most recently used first
	// tickets are the session ticket keys of intercepted connections, newest first, and
	// ticketsAt when the newest was made (see ticketKeys).
	tickets   [][32]byte
	ticketsAt time.Time
}

// ticketRotation is how long a session ticket key issues tickets; the one before it is still
// accepted for as long again, so a ticket lives at most twice this.
const ticketRotation = 24 * time.Hour

// ticketKeys returns the session ticket keys every intercepted connection shares, so a
// client can resume its TLS session with the sidecar in a later tunnel (an abbreviated
// handshake: no certificate, no signature). The keys live only in memory and rotate every
// ticketRotation.
func (c *CA) ticketKeys() [][32]byte {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.tickets) == 0 || now.Sub(c.ticketsAt) >= ticketRotation || now.Before(c.ticketsAt) {
		var k [32]byte
		if _, err := rand.Read(k[:]); err != nil { // crypto/rand does not fail on supported platforms
			panic(fmt.Sprintf("read random ticket key: %v", err))
		}
		c.tickets = append([][32]byte{k}, c.tickets[:min(len(c.tickets), 1)]...)
		c.ticketsAt = now
	}
	return c.tickets
}

type leafEntry struct {
	host string
	cert *tls.Certificate
}

// LoadOrCreateCA loads the CA from dir (ca.crt and ca.key), or creates it there when
// neither file exists: the directory with mode 0700, the key with 0600. now is the clock
// (nil means time.Now). Errors: ErrCAIncomplete when only one file exists, ErrInvalidCA
// when they exist but cannot be used, or the I/O error.
func LoadOrCreateCA(dir string, now func() time.Time) (*CA, error) {
	return loadOrCreateCA(dir, now, true)
}

// LoadOrCreateCANoSync is LoadOrCreateCA for a CA that is of no use after a crash of the host
// (an `exec --ephemeral` sandbox's, which lives as long as its one command): a new CA's files
// are still written whole and renamed into place, so no reader ever sees a partial one, but
// not fsynced.
func LoadOrCreateCANoSync(dir string, now func() time.Time) (*CA, error) {
	return loadOrCreateCA(dir, now, false)
}

func loadOrCreateCA(dir string, now func() time.Time, durable bool) (*CA, error) {
	if now == nil {
		now = time.Now
	}
	certPath, keyPath := filepath.Join(dir, caCertFile), filepath.Join(dir, caKeyFile)
	_, certErr := os.Stat(certPath)
	_, keyErr := os.Stat(keyPath)
	switch {
	case certErr == nil && keyErr == nil:
		return loadCA(certPath, keyPath, now)
	case errors.Is(certErr, fs.ErrNotExist) && errors.Is(keyErr, fs.ErrNotExist):
		return createCA(dir, now, durable)
	case certErr == nil && errors.Is(keyErr, fs.ErrNotExist):
		return nil, fmt.Errorf("load CA: %s exists without %s (remove it to create a new CA): %w", certPath, caKeyFile, ErrCAIncomplete)
	case keyErr == nil && errors.Is(certErr, fs.ErrNotExist):
		return nil, fmt.Errorf("load CA: %s exists without %s (remove it to create a new CA): %w", keyPath, caCertFile, ErrCAIncomplete)
	}
	return nil, fmt.Errorf("load CA: %w", errors.Join(certErr, keyErr))
}

// loadCA reads and checks an existing CA.
func loadCA(certPath, keyPath string, now func() time.Time) (*CA, error) {
	if fi, err := os.Stat(keyPath); err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	} else if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("load CA: %s is readable by other users (mode %v; use chmod 600): %w", keyPath, fi.Mode().Perm(), ErrInvalidCA)
	}
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	cert, err := parseCertPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("load CA %s: %w: %w", certPath, ErrInvalidCA, err)
	}
	key, err := parseKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("load CA %s: %w: %w", keyPath, ErrInvalidCA, err)
	}
	switch pub, ok := cert.PublicKey.(*ecdsa.PublicKey); {
	case !ok || !pub.Equal(&key.PublicKey):
		return nil, fmt.Errorf("load CA: %s does not match %s: %w", keyPath, certPath, ErrInvalidCA)
	case !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0:
		return nil, fmt.Errorf("load CA: %s is not a CA certificate: %w", certPath, ErrInvalidCA)
	case now().After(cert.NotAfter):
		return nil, fmt.Errorf("load CA: %s expired on %s (remove both files to create a new CA): %w", certPath, cert.NotAfter.Format(time.DateOnly), ErrInvalidCA)
	}
	return newCA(cert, key, certPEM, now), nil
}

// createCA makes a new CA and writes it to dir; the key is written before the certificate,
// and each file is renamed into place whole.
func createCA(dir string, now func() time.Time, durable bool) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("create CA: %w", err)
	}
	t := now()
	serial := randomSerial()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("airlock sidecar CA %08x", serial.Uint64()&0xffffffff), Organization: []string{"airlock"}},
		NotBefore:             t.Add(-clockSkew),
		NotAfter:              t.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("create CA: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("create CA: %w", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create CA: %w", err)
	}
	if err := writeFileAtomic(dir, caKeyFile, keyPEM, 0o600, durable); err != nil {
		return nil, fmt.Errorf("create CA: %w", err)
	}
	if err := writeFileAtomic(dir, caCertFile, certPEM, 0o644, durable); err != nil {
		return nil, fmt.Errorf("create CA: %w", err)
	}
	return newCA(cert, key, certPEM, now), nil
}

func newCA(cert *x509.Certificate, key *ecdsa.PrivateKey, certPEM []byte, now func() time.Time) *CA {
	return &CA{cert: cert, key: key, certPEM: certPEM, now: now, maxLeaves: leafCacheSize,
		leaves: make(map[string]*list.Element), order: list.New()}
}

// writeFileAtomic writes data to dir/name through a temporary file renamed into place,
// fsynced before the rename when durable.
func writeFileAtomic(dir, name string, data []byte, mode os.FileMode, durable bool) error {
	f, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // after a successful rename this fails harmlessly
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if durable {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), filepath.Join(dir, name))
}

// CertPEM returns the CA certificate in PEM form, for clients to trust.
func (c *CA) CertPEM() []byte { return bytes.Clone(c.certPEM) }

// Certificate returns the parsed CA certificate.
func (c *CA) Certificate() *x509.Certificate { return c.cert }

// leaf returns a certificate for host (a normalised name or IP literal) signed by the CA,
// from the cache while it has more than leafRenew left.
func (c *CA) leaf(host string) (*tls.Certificate, error) {
	now := c.now()
	c.mu.Lock()
	if el, ok := c.leaves[host]; ok {
		e := el.Value.(*leafEntry)
		if now.Before(e.cert.Leaf.NotAfter.Add(-leafRenew)) {
			c.order.MoveToFront(el)
			c.mu.Unlock()
			return e.cert, nil
		}
	}
	c.mu.Unlock()
	cert, err := c.sign(host, now)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.leaves[host]; ok {
		c.order.Remove(el)
	}
	c.leaves[host] = c.order.PushFront(&leafEntry{host: host, cert: cert})
	for c.order.Len() > c.maxLeaves {
		oldest := c.order.Back()
		c.order.Remove(oldest)
		delete(c.leaves, oldest.Value.(*leafEntry).host)
	}
	return cert, nil
}

// sign issues a leaf for host: ECDSA P-256, valid leafValidity (never past the CA), with
// host as its only subject alternative name.
func (c *CA) sign(host string, now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("sign leaf for %s: %w", host, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     minTime(now.Add(leafValidity), c.cert.NotAfter),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if a, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = append(tmpl.IPAddresses, a.AsSlice())
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, fmt.Errorf("sign leaf for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("sign leaf for %s: %w", host, err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

func parseCertPEM(b []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no CERTIFICATE PEM block")
	}
	return x509.ParseCertificate(block.Bytes)
}

func parseKeyPEM(b []byte) (*ecdsa.PrivateKey, error) {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	if k, err := x509.ParseECPrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("key is %T, want ECDSA", k)
	}
	return ek, nil
}

func randomSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil { // crypto/rand does not fail on supported platforms
		panic(fmt.Sprintf("read random serial: %v", err))
	}
	return n.Add(n, big.NewInt(1))
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
