// Package vault is the credential broker's HashiCorp Vault source and the only airlock
// package that imports github.com/hashicorp/vault/api (MPL-2.0; Vault's server code is never
// linked). It logs in (token, token file, AppRole, Kubernetes), keeps its token renewed with
// a lifetime watcher and logs in again when renewal ends, reads KV v2 secrets (path, field,
// optional version) and dynamic secrets, whose leases it renews before they expire and
// revokes on Close. Only cmd/airlock imports it; everything else sees credentials.Source.
package vault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/vault/api"
	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/credentials"
	"github.com/airlock-dev/airlock/policy"
)

// Auth methods.
const (
	AuthToken      = "token"
	AuthAppRole    = "approle"
	AuthKubernetes = "kubernetes"
)

// DefaultKubernetesJWTFile is the service-account token a pod gets.
const DefaultKubernetesJWTFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"

// Config configures a Source.
type Config struct {
	// Address is Vault's URL, e.g. "https://vault.example:8200". Required.
	Address string
	// CACertFile is a PEM file of CAs that sign Vault's certificate. Empty means the system
	// roots.
	CACertFile string
	// Auth is AuthToken, AuthAppRole or AuthKubernetes. Empty means AuthToken.
	Auth string
	// Token is a static token (VAULT_TOKEN) for AuthToken. Empty means TokenFile.
	Token string
	// TokenFile holds the token for AuthToken; it is read again when it changes (an agent
	// rotating it). Used when Token is empty.
	TokenFile string
	// RoleIDFile and SecretIDFile hold the AppRole credentials (read at each login).
	RoleIDFile   string
	SecretIDFile string
	// AppRoleMount is the AppRole mount path. Empty means "approle".
	AppRoleMount string
	// KubernetesRole is the Vault role for AuthKubernetes.
	KubernetesRole string
	// KubernetesJWTFile is the service-account JWT. Empty means DefaultKubernetesJWTFile.
	KubernetesJWTFile string
	// KubernetesMount is the Kubernetes auth mount path. Empty means "kubernetes".
	KubernetesMount string
	// Timeout bounds each Vault request. Zero means 5s.
	Timeout time.Duration
	// Logger receives operational logs (never tokens or values). Nil discards them.
	Logger *logrus.Logger
	// Dial connects to Vault: the sidecar passes its operator dial path
	// (egress.Operator.DialContext), which goes through the upstream proxy unless exempted.
	// Nil means a direct TCP net.Dialer. HTTP_PROXY, HTTPS_PROXY and NO_PROXY are never
	// consulted either way (vault/api's default transport would).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Source reads secrets from Vault. Create it with New, start it with Start, stop it with
// Close. It is safe for concurrent use.
type Source struct {
	cfg    Config
	client *api.Client
	log    *logrus.Logger

	cancel context.CancelFunc
	done   chan struct{}

	// mu guards leases, closed and loggedIn.
	mu       sync.Mutex
	leases   map[string]*lease // by Vault path
	closed   bool
	loggedIn bool

	stats Stats
}

// Stats counts what the source did (tests and metrics read them).
type Stats struct {
	mu            sync.Mutex
	Logins        int
	TokenRenewals int
	LeaseRenewals int
}

var (
	_ credentials.Source = (*Source)(nil)
	_ credentials.Closer = (*Source)(nil)
)

// New validates cfg and builds the client; it does not contact Vault.
func New(cfg Config) (*Source, error) {
	if cfg.Address == "" {
		return nil, errors.New("new vault source: Address is required")
	}
	switch cfg.Auth {
	case "", AuthToken:
		cfg.Auth = AuthToken
		if cfg.Token == "" && cfg.TokenFile == "" {
			return nil, errors.New("new vault source: token auth needs VAULT_TOKEN or --vault-token-file")
		}
	case AuthAppRole:
		if cfg.RoleIDFile == "" || cfg.SecretIDFile == "" {
			return nil, errors.New("new vault source: approle auth needs --vault-role-id-file and --vault-secret-id-file")
		}
	case AuthKubernetes:
		if cfg.KubernetesRole == "" {
			return nil, errors.New("new vault source: kubernetes auth needs --vault-k8s-role")
		}
	default:
		return nil, fmt.Errorf("new vault source: unknown auth %q; use token, approle or kubernetes", cfg.Auth)
	}
	if cfg.AppRoleMount == "" {
		cfg.AppRoleMount = "approle"
	}
	if cfg.KubernetesMount == "" {
		cfg.KubernetesMount = "kubernetes"
	}
	if cfg.KubernetesJWTFile == "" {
		cfg.KubernetesJWTFile = DefaultKubernetesJWTFile
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = logrus.New()
		cfg.Logger.SetOutput(io.Discard)
	}
	// DefaultConfig also reads VAULT_* variables; Config alone decides here (no environment
	// reads below cmd), and above all VAULT_SKIP_VERIFY must not turn verification off.
	ac := api.DefaultConfig()
	ac.Address, ac.AgentAddress = cfg.Address, ""
	ac.Timeout = cfg.Timeout
	ac.MaxRetries = 0 // the broker's cache rides out short outages; retries only delay 503s
	ac.SRVLookup, ac.Limiter = false, nil
	tr, ok := ac.HttpClient.Transport.(*http.Transport)
	if !ok {
		return nil, fmt.Errorf("new vault source: vault/api's transport is a %T, not an *http.Transport", ac.HttpClient.Transport)
	}
	// cleanhttp's transport (vault/api's default) takes its proxy from HTTP(S)_PROXY: a path
	// nobody chose. The connection goes where Dial sends it, and nowhere else.
	tr.Proxy = nil
	tr.DialContext = cfg.Dial
	if tr.DialContext == nil {
		tr.DialContext = (&net.Dialer{Timeout: cfg.Timeout}).DialContext
	}
	tr.TLSClientConfig.InsecureSkipVerify = false
	tr.TLSClientConfig.ServerName = ""
	tr.TLSClientConfig.RootCAs = nil // system roots unless CACertFile
	tr.TLSClientConfig.GetClientCertificate = nil
	if cfg.CACertFile != "" {
		if err := ac.ConfigureTLS(&api.TLSConfig{CACert: cfg.CACertFile}); err != nil {
			return nil, fmt.Errorf("new vault source: CA %s: %w", cfg.CACertFile, err)
		}
	}
	client, err := api.NewClient(ac)
	if err != nil {
		return nil, fmt.Errorf("new vault source: %w", err)
	}
	client.ClearToken() // never VAULT_TOKEN implicitly: Config.Token says what to use
	client.SetNamespace("")
	client.SetHeaders(http.Header{})
	return &Source{cfg: cfg, client: client, log: cfg.Logger, leases: map[string]*lease{}}, nil
}

// Start logs in once (an error is returned but the source keeps trying in the background,
// so requests fail closed until Vault answers) and starts the token renewal loop. Close
// stops it.
func (s *Source) Start(ctx context.Context) error {
	ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	s.done = make(chan struct{})
	first := make(chan error, 1)
	go s.authLoop(ctx, first)
	select {
	case err := <-first:
		return err
	case <-time.After(2 * s.cfg.Timeout):
		return errors.New("vault login: no answer yet; retrying in the background")
	}
}

// Snapshot returns a copy of the counters.
func (s *Source) Snapshot() (logins, tokenRenewals, leaseRenewals int) {
	s.stats.mu.Lock()
	defer s.stats.mu.Unlock()
	return s.stats.Logins, s.stats.TokenRenewals, s.stats.LeaseRenewals
}

func (s *Source) count(f func(*Stats)) {
	s.stats.mu.Lock()
	defer s.stats.mu.Unlock()
	f(&s.stats)
}

// Fetch reads the secret sec.Vault. Errors never hold values; a missing field or path is an
// error too (the broker fails closed).
func (s *Source) Fetch(ctx context.Context, name string, sec policy.Secret) (credentials.Value, error) {
	ref := sec.Vault
	if ref == nil {
		return credentials.Value{}, fmt.Errorf("read secret %q: not a vault secret", name)
	}
	s.mu.Lock()
	ready, closed := s.loggedIn, s.closed
	s.mu.Unlock()
	switch {
	case closed:
		return credentials.Value{}, fmt.Errorf("read secret %q: vault source is closed", name)
	case !ready:
		return credentials.Value{}, fmt.Errorf("read secret %q: not logged in to vault yet", name)
	case ref.Dynamic:
		return s.fetchDynamic(ctx, name, ref)
	}
	return s.fetchStatic(ctx, name, ref)
}

// Close stops renewing, revokes every lease the source took (and the token it logged in
// for, with AppRole or Kubernetes auth). It is idempotent.
func (s *Source) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	leases := s.leases
	s.leases = map[string]*lease{}
	s.mu.Unlock()
	var errs []error
	for path, l := range leases {
		l.watcher.Stop()
		if _, err := s.client.Logical().WriteWithContext(ctx, "sys/leases/revoke", map[string]any{"lease_id": l.id}); err != nil {
			errs = append(errs, fmt.Errorf("revoke lease of %s: %w", path, err))
		} else {
			s.log.WithField("path", path).Info("vault lease revoked")
		}
	}
	if s.cancel != nil {
		s.cancel()
		<-s.done
	}
	if s.cfg.Auth != AuthToken && s.client.Token() != "" {
		if err := s.client.Auth().Token().RevokeSelfWithContext(ctx, ""); err != nil {
			errs = append(errs, fmt.Errorf("revoke vault token: %w", err))
		}
	}
	return errors.Join(errs...)
}
