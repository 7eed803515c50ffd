package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/credentials"
	"github.com/airlock-dev/airlock/egress"
	"github.com/airlock-dev/airlock/policy"
)

// UpstreamProxyConfig is the corporate proxy every connection of the sidecar goes through
// (--upstream-proxy and its companions). The operator sets it, never a policy: a tenant who
// edits a policy cannot choose where the sidecar's connections go.
type UpstreamProxyConfig struct {
	// URL is the proxy, http://host:port or https://host:port (--upstream-proxy). Empty
	// means none: every connection is direct.
	URL string
	// CAFile is a PEM file of CAs (--upstream-proxy-ca): an https:// proxy's, and an
	// inspecting proxy's that re-signs origins. Both dial paths and the sandbox's CA bundle
	// (--ca-bundle-out) trust it. Empty means the system roots only.
	CAFile string
	// AuthFile holds the proxy's Basic credentials, "user:password"
	// (--upstream-proxy-auth-file); re-read after a 407.
	AuthFile string
	// AuthVault is a Vault KV path whose fields username and password are the proxy's Basic
	// credentials (--upstream-proxy-auth-vault), read through the --vault-* settings;
	// re-read after a 407. Vault must then be reachable without the proxy
	// (--upstream-no-proxy names it). Not with AuthFile.
	AuthVault string
	// NoProxy lists destinations dialled directly, comma-separated host patterns as the
	// policy writes them and CIDR ranges (--upstream-no-proxy).
	NoProxy string
	// ByName sends the destination's name to the proxy instead of the checked address
	// (--upstream-proxy-by-name), for networks where the sidecar cannot resolve external
	// names. It gives up "dial only the checked address": the proxy's resolution decides.
	ByName bool
	// ConnectTimeout bounds each CONNECT through the proxy
	// (--upstream-proxy-connect-timeout); zero means egress.DefaultConnectTimeout.
	ConnectTimeout time.Duration
}

// validate checks the settings that need no file. Errors name the flag.
func (u UpstreamProxyConfig) validate(vaultAddr string) error {
	if u.URL == "" {
		if u.CAFile != "" || u.AuthFile != "" || u.AuthVault != "" || u.NoProxy != "" || u.ByName {
			return errors.New("--upstream-proxy-* and --upstream-no-proxy need --upstream-proxy")
		}
		return nil
	}
	if _, err := egress.NewUpstream(egress.UpstreamConfig{URL: u.URL}); err != nil {
		return fmt.Errorf("--upstream-proxy: %v", err)
	}
	if _, err := egress.ParseNoProxy(strings.Split(u.NoProxy, ",")); err != nil {
		return fmt.Errorf("--upstream-no-proxy: %v", err)
	}
	switch {
	case u.ConnectTimeout < 0:
		return errors.New("--upstream-proxy-connect-timeout must not be negative")
	case u.AuthFile != "" && u.AuthVault != "":
		return errors.New("--upstream-proxy-auth-file and --upstream-proxy-auth-vault are exclusive: use one")
	case u.AuthVault != "" && vaultAddr == "":
		return errors.New("--upstream-proxy-auth-vault needs --vault-addr")
	}
	return nil
}

// buildUpstream builds the upstream proxy of Config (nil when none) and its CA PEM. Errors
// name the flag and file.
func (s *Sidecar) buildUpstream() (*egress.Upstream, []byte, error) {
	u := s.cfg.UpstreamProxy
	if u.URL == "" {
		return nil, nil, nil
	}
	np, err := egress.ParseNoProxy(strings.Split(u.NoProxy, ","))
	if err != nil {
		return nil, nil, fmt.Errorf("--upstream-no-proxy: %v", err)
	}
	var caPEM []byte
	if u.CAFile != "" {
		if caPEM, err = os.ReadFile(u.CAFile); err != nil {
			return nil, nil, fmt.Errorf("--upstream-proxy-ca: %v", err)
		}
	}
	var creds egress.ProxyCredentials
	switch {
	case u.AuthFile != "":
		fc := egress.NewFileCredentials(u.AuthFile)
		if err := fc.Check(); err != nil {
			return nil, nil, fmt.Errorf("--upstream-proxy-auth-file: %v", err)
		}
		creds = redactingCreds{fc, s.redactor}
	case u.AuthVault != "":
		if err := vaultDirect(s.cfg.Vault.Addr, np); err != nil {
			return nil, nil, err
		}
		creds = redactingCreds{&vaultProxyCreds{cb: s.creds, path: u.AuthVault}, s.redactor}
	}
	up, err := egress.NewUpstream(egress.UpstreamConfig{URL: u.URL, CAPEM: caPEM, Credentials: creds,
		ConnectTimeout: u.ConnectTimeout, ByName: u.ByName, NoProxy: np})
	if err != nil {
		return nil, nil, fmt.Errorf("--upstream-proxy: %v", err)
	}
	return up, caPEM, nil
}

// vaultDirect refuses Vault behind the proxy when the proxy's credentials come from Vault:
// the login would need the credentials it is to fetch.
func vaultDirect(addr string, np egress.NoProxy) error {
	u, err := url.Parse(addr)
	if err != nil || u.Hostname() == "" {
		return fmt.Errorf("--vault-addr %q: not a URL", addr)
	}
	if !np.Match(u.Hostname(), netipOf(u.Hostname())) {
		return fmt.Errorf("--upstream-proxy-auth-vault: Vault (%s) must be reached without the proxy whose credentials it holds: add it to --upstream-no-proxy", u.Hostname())
	}
	return nil
}

// vaultProxyCreds reads the proxy's Basic credentials from Vault through the credential
// broker's Vault source, caching them until the proxy answers 407.
type vaultProxyCreds struct {
	cb   *credentialBroker
	path string

	// mu guards user, pass and loaded.
	mu         sync.Mutex
	user, pass string
	loaded     bool
}

var _ egress.ProxyCredentials = (*vaultProxyCreds)(nil)

// ProxyCredentials returns the cached credentials, or reads them (fields username and
// password of the KV path) when fresh or not read yet. Errors name the path, never a value.
func (v *vaultProxyCreds) ProxyCredentials(ctx context.Context, fresh bool) (string, string, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.loaded && !fresh {
		return v.user, v.pass, nil
	}
	src := v.cb.vaultSource()
	if src == nil {
		return "", "", fmt.Errorf("--upstream-proxy-auth-vault %s: vault is not started", v.path)
	}
	var got [2]string
	for i, field := range []string{"username", "password"} {
		val, err := src.Fetch(ctx, "upstream-proxy-"+field, policy.Secret{Vault: &policy.VaultRef{Path: v.path, Field: field}})
		if err != nil {
			return "", "", fmt.Errorf("--upstream-proxy-auth-vault %s: %w", v.path, err)
		}
		got[i] = val.Secret
	}
	v.user, v.pass, v.loaded = got[0], got[1], true
	return v.user, v.pass, nil
}

// redactingCreds hands every password it passes on to the redactor: it never reaches a log
// line, an audit event, or a response the sandbox reads.
type redactingCreds struct {
	inner    egress.ProxyCredentials
	redactor *credentials.Redactor
}

func (r redactingCreds) ProxyCredentials(ctx context.Context, fresh bool) (string, string, error) {
	user, pass, err := r.inner.ProxyCredentials(ctx, fresh)
	if err == nil && pass != "" {
		r.redactor.Add(pass)
	}
	return user, pass, err
}

// netipOf parses an IP literal host; the zero Addr for a name.
func netipOf(host string) netip.Addr {
	h, err := policy.NormalizeHost(host)
	if err != nil || !h.IsIP() {
		return netip.Addr{}
	}
	return h.Addr
}

// DefaultUpstreamConnectTimeout is --upstream-proxy-connect-timeout's default.
const DefaultUpstreamConnectTimeout = egress.DefaultConnectTimeout

// resolveHintTimeout bounds the start's check that external names resolve.
const resolveHintTimeout = 5 * time.Second

// checkUpstreamResolution tells the operator, at start, when the sidecar cannot resolve the
// policy's names although it asks the upstream proxy for checked addresses: every request
// would then fail with resolve_failed. It resolves the policy's first exact host name and,
// on failure, logs a warning naming --upstream-proxy-by-name and what it gives up. It never
// stops the start (the resolver may come up later).
func (s *Sidecar) checkUpstreamResolution(pol *policy.Policy) {
	if s.upstream == nil || s.upstream.ByName() {
		return
	}
	name := ""
	for _, r := range pol.Rules() {
		for _, h := range r.Hosts {
			if !strings.HasPrefix(h, "*") && !s.upstream.Direct(h, netip.Addr{}) && name == "" {
				name = h
			}
		}
	}
	if name == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), resolveHintTimeout)
	defer cancel()
	if _, err := s.resolver.LookupNetIP(ctx, "ip", name); err != nil {
		s.log.WithFields(logrus.Fields{"host": name, "error": err.Error(), "upstream_proxy": s.upstream.String()}).Warn(
			"the sidecar cannot resolve the policy's names, so it cannot ask the upstream proxy for checked addresses: " +
				"fix --upstream-dns, or set --upstream-proxy-by-name to let the proxy resolve them (the proxy's answer then decides the address: an internal answer there is not caught)")
	}
}
