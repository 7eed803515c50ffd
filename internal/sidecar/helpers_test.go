package sidecar

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitTimeout bounds every wait in these tests; it is a failure deadline, not
// synchronisation.
const waitTimeout = 20 * time.Second

// syncBuffer is a bytes.Buffer safe for the sidecar's concurrent log writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testConfig is a sidecar on 127.0.0.1:0 ports without kernel enforcement, reading file.
func testConfig(t *testing.T, file string, stderr *syncBuffer) Config {
	t.Helper()
	return Config{
		PolicyFile:         file,
		ProxyAddr:          "127.0.0.1:0",
		TransparentAddr:    Off,
		DNSAddr:            "127.0.0.1:0",
		LLMAddr:            "127.0.0.1:0",
		AdminAddr:          "127.0.0.1:0",
		StateDir:           t.TempDir(),
		TransparentPorts:   DefaultTransparentPorts,
		PacketGuard:        "auto",
		Environment:        "development",
		UpstreamDNS:        "127.0.0.1:9", // never asked: the tests' names are answered or refused by the filter
		Sandbox:            "test",
		LogLevel:           "info",
		CredentialCacheTTL: time.Minute,
		Vault:              VaultConfig{Auth: "token"},
		Stderr:             stderr,
	}
}

// startSidecar starts cfg's sidecar and closes it when the test ends.
func startSidecar(t *testing.T, cfg Config) *Sidecar {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.Start(ctx); err != nil {
		cancel()
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// writePolicy writes a policy file.
func writePolicy(t *testing.T, file, body string) {
	t.Helper()
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// resolverAt is a Go resolver that asks only the DNS server at ap (UDP).
func resolverAt(ap netip.AddrPort) *net.Resolver {
	var d net.Dialer
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, ap.String())
	}}
}

// configMap lays out a directory like the kubelet's mount of a ConfigMap: policy.yaml ->
// ..data/policy.yaml, ..data -> ..<version>; swap replaces ..data atomically.
type configMap struct {
	dir string
	n   int
}

func (c *configMap) file() string { return filepath.Join(c.dir, "policy.yaml") }

// swap publishes body as the ConfigMap's new content, as the kubelet does: a new
// timestamped directory, a ..data_tmp symlink to it, renamed over ..data.
// It is not safe for concurrent use.
func (c *configMap) swap(body string) error {
	c.n++
	ts := filepath.Join(c.dir, "..2026_11_23_"+strconv.Itoa(c.n))
	if err := os.Mkdir(ts, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(ts, "policy.yaml"), []byte(body), 0o644); err != nil {
		return err
	}
	tmp := filepath.Join(c.dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(c.dir, "..data")); err != nil {
		return err
	}
	if c.n == 1 {
		return os.Symlink(filepath.Join("..data", "policy.yaml"), c.file())
	}
	return nil
}
