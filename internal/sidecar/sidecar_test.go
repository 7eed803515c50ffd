package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// inprocPolicy allows the loopback upstream on its port (the SSRF guard refuses loopback
// unless a rule names it by CIDR) and nothing else.
const inprocPolicy = `apiVersion: airlock/v1
kind: EgressPolicy
metadata:
  name: inproc
spec:
  egress:
    - name: loopback-upstream
      cidrs: ["127.0.0.1/32"]
      ports: [%d]
`

// A whole sidecar starts in-process on 127.0.0.1:0 ports without kernel enforcement: the
// proxy passes an allowed request to a loopback upstream and refuses a denied one, the DNS
// filter answers its own name and refuses a denied one, /readyz says ready, and Close leaves
// no goroutine behind.
func TestSidecarInProcess(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "upstream says hi")
	}))
	defer upstream.Close()
	port := upstream.Listener.Addr().(*net.TCPAddr).Port
	file := filepath.Join(t.TempDir(), "policy.yaml")
	writePolicy(t, file, fmt.Sprintf(inprocPolicy, port))
	var stderr syncBuffer
	s, err := New(testConfig(t, file, &stderr))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	addrs := s.Addrs()
	client := proxyClient(addrs.Proxy)
	defer client.CloseIdleConnections()

	t.Run("allowed request", func(t *testing.T) {
		status, body, _ := get(t, client, upstream.URL)
		if status != http.StatusOK || body != "upstream says hi" {
			t.Errorf("got %d %q, want 200 from the upstream", status, body)
		}
	})
	t.Run("denied request", func(t *testing.T) {
		status, body, h := get(t, client, "http://denied.example/")
		if status != http.StatusForbidden || h.Get("X-Airlock-Decision") != "deny" || !strings.Contains(body, "egress_denied") {
			t.Errorf("got %d %q %v, want 403 egress_denied", status, body, h)
		}
	})
	t.Run("dns", func(t *testing.T) {
		r := resolverAt(addrs.DNS)
		ips, err := r.LookupNetIP(ctx, "ip4", "llm.airlock.internal.")
		if err != nil || len(ips) != 1 || ips[0] != addrs.LLM.Addr() {
			t.Errorf("llm.airlock.internal: got %v, %v; want %v", ips, err, addrs.LLM.Addr())
		}
		_, err = r.LookupNetIP(ctx, "ip4", "denied.example.")
		var dnsErr *net.DNSError
		if !errors.As(err, &dnsErr) || dnsErr.IsNotFound {
			t.Errorf("denied.example: got %v, want a refusal (not NXDOMAIN)", err)
		}
	})
	t.Run("admin", func(t *testing.T) {
		status, body, _ := get(t, http.DefaultClient, "http://"+addrs.Admin.String()+"/readyz")
		if status != http.StatusOK || body != "ready: policy inproc\n" {
			t.Errorf("/readyz: got %d %q", status, body)
		}
	})
	client.CloseIdleConnections()
	http.DefaultClient.CloseIdleConnections()
	cancel()
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	for _, line := range []string{"airlock listening", "DNS filter listening", "model API listening"} {
		if !strings.Contains(stderr.String(), line) {
			t.Errorf("log lacks %q:\n%s", line, stderr.String())
		}
	}
}

// A start that fails part-way closes what it opened: the listeners are free again.
func TestSidecarFailedStartUnwinds(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	file := filepath.Join(t.TempDir(), "policy.yaml")
	writePolicy(t, file, fmt.Sprintf(inprocPolicy, 443))
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	var stderr syncBuffer
	cfg := testConfig(t, file, &stderr)
	proxyLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.ProxyAddr = proxyLn.Addr().String()
	proxyLn.Close()
	cfg.LLMAddr = busy.Addr().String() // the model API cannot listen: the start fails after the DNS filter
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Start(context.Background())
	if err == nil || !strings.HasPrefix(err.Error(), "--llm-addr: ") {
		t.Fatalf("Start: got %v, want the --llm-addr error", err)
	}
	ln, err := net.Listen("tcp", cfg.ProxyAddr)
	if err != nil {
		t.Fatalf("the proxy listener was not closed by the unwind: %v", err)
	}
	ln.Close()
}

func proxyClient(proxyAddr netip.AddrPort) *http.Client {
	u := &url.URL{Scheme: "http", Host: proxyAddr.String()}
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u)}}
}

func get(t *testing.T, c *http.Client, u string) (int, string, http.Header) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read body: %v", u, err)
	}
	return resp.StatusCode, string(b), resp.Header
}
