//go:build linux

package testnet

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// The names every World's DNS server answers, and what they resolve to.
const (
	NameAllowed   = "allowed.test"     // A 198.18.0.10 (World.Allowed)
	NameAPI       = "api.allowed.test" // A 198.19.0.10 (World.API)
	NameDenied    = "denied.test"      // A 198.18.0.20 (World.Denied)
	NameIntercept = "intercept.test"   // A 198.18.0.30 (World.Intercept)
	NameLoopback  = "loopback.test"    // A 127.0.0.1
	NameMetadata  = "metadata.test"    // A 169.254.169.254
	NamePrivate   = "private.test"     // A 10.0.0.1
	NameMapped    = "mapped.test"      // AAAA ::ffff:127.0.0.1 only
	NameRebind    = "rebind.test"      // first A 198.18.0.10, then 127.0.0.1, TTL 0
)

// DefaultTTL is the TTL of the World's fixed names.
const DefaultTTL = 60

// World is the fixture end-to-end tests share: a Topology, a test CA, the DNS server at
// DNSAddr, and four upstream hosts serving HTTP on 80 and HTTPS on 443. Later suites (DNS
// filter, eBPF, sandbox manager, benchmarks) add their own hosts with AddUpstream.
type World struct {
	*Topology
	// Dir is a temporary directory removed when the test ends.
	Dir string
	// CA signs every upstream certificate; CA.File is what airlock trusts.
	CA *CA
	// DNS is the authoritative server for "test.", playing the outside resolver.
	DNS *DNSServer
	// The fixed upstream hosts (see the Name* constants).
	Allowed, API, Denied, Intercept *Upstream
}

// NewWorld builds a World and tears it down when t ends. The caller must have called
// privtest.Require.
func NewWorld(t testing.TB) *World {
	t.Helper()
	w := &World{Topology: NewTopology(t), Dir: t.TempDir()}
	w.CA = NewCA(t, w.Dir)
	w.AddUpstreamAddr(t, DNSAddr.Addr())
	w.DNS = StartDNSServer(t, w.Upstream, DNSAddr)

	w.Allowed = w.AddUpstream(t, netip.MustParseAddr("198.18.0.10"), NameAllowed)
	w.API = w.AddUpstream(t, netip.MustParseAddr("198.19.0.10"), NameAPI)
	w.Denied = w.AddUpstream(t, netip.MustParseAddr("198.18.0.20"), NameDenied)
	w.Intercept = w.AddUpstream(t, netip.MustParseAddr("198.18.0.30"), NameIntercept)

	w.DNS.Set(NameLoopback, DefaultTTL, netip.MustParseAddr("127.0.0.1"))
	w.DNS.Set(NameMetadata, DefaultTTL, netip.MustParseAddr("169.254.169.254"))
	w.DNS.Set(NamePrivate, DefaultTTL, netip.MustParseAddr("10.0.0.1"))
	w.DNS.Set(NameMapped, DefaultTTL, netip.MustParseAddr("::ffff:127.0.0.1"))
	w.DNS.SetRebinding(NameRebind, w.Allowed.Addr, netip.MustParseAddr("127.0.0.1"))
	return w
}

// AddUpstream adds an upstream host at addr serving HTTP on 80 and HTTPS on 443, and makes
// every name resolve to it (TTL DefaultTTL).
func (w *World) AddUpstream(t testing.TB, addr netip.Addr, names ...string) *Upstream {
	t.Helper()
	w.AddUpstreamAddr(t, addr)
	u := newUpstream(w.Upstream, w.CA, addr)
	u.ListenHTTP(t, 80)
	u.ListenHTTPS(t, 443)
	for _, n := range names {
		w.DNS.Set(n, DefaultTTL, addr)
	}
	return u
}

// HTTPClient returns an HTTP client whose connections are dialled from inside the namespace,
// without a proxy, trusting roots (nil: the system roots) for TLS.
func (n *Netns) HTTPClient(t testing.TB, roots *x509.CertPool) *http.Client {
	t.Helper()
	tr := &http.Transport{
		Proxy:             nil,
		DialContext:       n.DialContext,
		TLSClientConfig:   &tls.Config{RootCAs: roots},
		DisableKeepAlives: true,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// CurlResult is the outcome of one curl run.
type CurlResult struct {
	Stdout, Stderr string
	// ExitCode is curl's exit status (0 success, 22 HTTP error with --fail, 56 proxy refused
	// CONNECT, ...).
	ExitCode int
}

// Curl runs the real curl binary inside the sidecar namespace with a clean environment (no
// *_proxy variables) and the given arguments, after "--silent --show-error --max-time 20".
// A non-zero exit is a result, not an error; failing to run curl at all fails t.
func (w *World) Curl(t testing.TB, args ...string) CurlResult {
	t.Helper()
	return w.CurlIn(t, func(ctx context.Context, name string, args ...string) *exec.Cmd {
		return w.Sidecar.Command(ctx, name, args...)
	}, args...)
}

// CurlIn is Curl with the command built by command (for example inside a sandbox cgroup).
func (w *World) CurlIn(t testing.TB, command func(ctx context.Context, name string, args ...string) *exec.Cmd, args ...string) CurlResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := command(ctx, "curl", append([]string{"--silent", "--show-error", "--max-time", "20"}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + w.Dir}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := CurlResult{Stdout: stdout.String(), Stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.Exited():
		res.ExitCode = ee.ExitCode()
	default:
		t.Fatalf("run curl %v: %v: %s", args, err, stderr.String())
	}
	return res
}

// WriteFile writes data to a file in w.Dir and returns its path.
func (w *World) WriteFile(t testing.TB, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(w.Dir, name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
