package sidecar

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/egress"
	"github.com/airlock-dev/airlock/policy"
)

func TestUpstreamProxyConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   UpstreamProxyConfig
		vault string
		want  string // substring of the error; "" for none
	}{
		{name: "none", cfg: UpstreamProxyConfig{}},
		{name: "plain", cfg: UpstreamProxyConfig{URL: "http://proxy.corp:3128", NoProxy: "*.corp.example, 10.0.0.0/8"}},
		{name: "companion without proxy", cfg: UpstreamProxyConfig{NoProxy: "a.test"}, want: "need --upstream-proxy"},
		{name: "by name without proxy", cfg: UpstreamProxyConfig{ByName: true}, want: "need --upstream-proxy"},
		{name: "credentials in the URL", cfg: UpstreamProxyConfig{URL: "http://u:p@proxy:3128"}, want: "--upstream-proxy"},
		{name: "socks", cfg: UpstreamProxyConfig{URL: "socks5://proxy:1080"}, want: "scheme"},
		{name: "bad no-proxy", cfg: UpstreamProxyConfig{URL: "http://proxy:3128", NoProxy: "10.0.0.0/99"}, want: "--upstream-no-proxy"},
		{name: "two credential sources", cfg: UpstreamProxyConfig{URL: "http://proxy:3128", AuthFile: "f", AuthVault: "secret/data/p"}, vault: "https://v:8200", want: "exclusive"},
		{name: "vault credentials without vault", cfg: UpstreamProxyConfig{URL: "http://proxy:3128", AuthVault: "secret/data/p"}, want: "--vault-addr"},
		{name: "negative timeout", cfg: UpstreamProxyConfig{URL: "http://proxy:3128", ConnectTimeout: -1}, want: "negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.validate(tc.vault)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("got %v, want no error", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "u:p@") {
				t.Fatalf("error %q shows the URL's credentials", err)
			}
		})
	}
}

// TestVaultMustBeDirect: the proxy's credentials from Vault need Vault outside the proxy.
func TestVaultMustBeDirect(t *testing.T) {
	np := mustNoProxy(t, "127.0.0.0/8,vault.corp.example")
	for addr, ok := range map[string]bool{
		"https://127.0.0.1:8200": true, "https://vault.corp.example:8200": true,
		"https://vault.other.example:8200": false, "https://10.1.1.1:8200": false,
	} {
		if err := vaultDirect(addr, np); (err == nil) != ok {
			t.Errorf("%s: got %v, want ok=%t", addr, err, ok)
		}
	}
}

func mustNoProxy(t *testing.T, list string) egress.NoProxy {
	t.Helper()
	np, err := egress.ParseNoProxy(strings.Split(list, ","))
	if err != nil {
		t.Fatal(err)
	}
	return np
}

// failingResolver answers every name with an error, as a network without external DNS.
type failingResolver struct{}

func (failingResolver) LookupTTL(context.Context, string, bool) ([]netip.Addr, time.Duration, error) {
	return nil, 0, &net.DNSError{Err: "server misbehaving", Name: "x", IsTemporary: true}
}

// TestUpstreamResolutionHint: behind an upstream proxy, a start whose resolver cannot
// resolve the policy's names says so and names --upstream-proxy-by-name; with it set (or
// with no proxy), nothing is said.
func TestUpstreamResolutionHint(t *testing.T) {
	pol, err := policy.Parse("p.yaml", []byte("apiVersion: airlock/v1\nkind: EgressPolicy\nmetadata:\n  name: p\nspec:\n  egress:\n    - name: a\n      hosts: [\"*.wild.test\", \"api.example.test\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		byName bool
		proxy  bool
		warn   bool
	}{{"proxy, names by address", false, true, true}, {"proxy by name", true, true, false}, {"no proxy", false, false, false}} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := logrus.New()
			log.SetOutput(&buf)
			s := &Sidecar{log: log, resolver: egress.NewCachingResolver(egress.NewAnswerCache(egress.CacheConfig{}), failingResolver{})}
			if tc.proxy {
				if s.upstream, err = egress.NewUpstream(egress.UpstreamConfig{URL: "http://proxy.test:3128", ByName: tc.byName}); err != nil {
					t.Fatal(err)
				}
			}
			s.checkUpstreamResolution(pol)
			got := buf.String()
			if warned := strings.Contains(got, "--upstream-proxy-by-name") && strings.Contains(got, "api.example.test"); warned != tc.warn {
				t.Fatalf("log %q: warned %t, want %t", got, warned, tc.warn)
			}
		})
	}
}
