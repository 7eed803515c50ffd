package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/credentials"
	"github.com/airlock-dev/airlock/credentials/vault"
	"github.com/airlock-dev/airlock/llmproxy"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/proxy"
)

// credConfig is what airlock run is told about the credential broker.
type credConfig struct {
	vaultAddr         string
	vaultAuth         string
	vaultCACert       string
	vaultTokenFile    string
	vaultRoleIDFile   string
	vaultSecretIDFile string
	vaultAppRoleMount string
	vaultK8sRole      string
	vaultK8sJWTFile   string
	vaultK8sMount     string
	cacheTTL          time.Duration

	// redactor scrubs secret values from stderr and the audit log; serve wraps its writers
	// with it before any logger exists, and the broker teaches it every value it fetches.
	redactor *credentials.Redactor
}

// credentialFlags registers the credential broker's flags on fs.
func credentialFlags(fs *flagSet) *credConfig {
	c := &credConfig{redactor: credentials.NewRedactor()}
	fs.StringVar(&c.vaultAddr, "vault-addr", "", "Vault address for `vault:` secrets (also read from VAULT_ADDR); empty: vault secrets are unavailable")
	fs.StringVar(&c.vaultAuth, "vault-auth", vault.AuthToken, "Vault auth method: token (VAULT_TOKEN or --vault-token-file) | approle | kubernetes")
	fs.StringVar(&c.vaultCACert, "vault-ca-cert", "", "PEM file of the CA that signs Vault's certificate (also read from VAULT_CACERT)")
	fs.StringVar(&c.vaultTokenFile, "vault-token-file", "", "file holding the Vault token, re-read when it changes (token auth without VAULT_TOKEN)")
	fs.StringVar(&c.vaultRoleIDFile, "vault-role-id-file", "", "file holding the AppRole role_id (approle auth)")
	fs.StringVar(&c.vaultSecretIDFile, "vault-secret-id-file", "", "file holding the AppRole secret_id, read at each login (approle auth)")
	fs.StringVar(&c.vaultAppRoleMount, "vault-approle-mount", "approle", "AppRole auth mount path")
	fs.StringVar(&c.vaultK8sRole, "vault-k8s-role", "", "Vault role for kubernetes auth")
	fs.StringVar(&c.vaultK8sJWTFile, "vault-k8s-jwt-file", vault.DefaultKubernetesJWTFile, "service-account JWT for kubernetes auth")
	fs.StringVar(&c.vaultK8sMount, "vault-k8s-mount", "kubernetes", "Kubernetes auth mount path")
	fs.DurationVar(&c.cacheTTL, "credential-cache-ttl", credentials.DefaultCacheTTL, "how long a fetched secret may be used; refreshed after half of it, served while the source is down until all of it has passed")
	return c
}

// applyVaultEnv takes VAULT_ADDR and VAULT_CACERT for flags not set otherwise.
func (c *credConfig) applyVaultEnv() {
	if c.vaultAddr == "" {
		c.vaultAddr = os.Getenv("VAULT_ADDR")
	}
	if c.vaultCACert == "" {
		c.vaultCACert = os.Getenv("VAULT_CACERT")
	}
}

// validate checks the credential flags.
func (c *credConfig) validate() error {
	c.applyVaultEnv()
	if c.cacheTTL <= 0 {
		return failf("--credential-cache-ttl %s: must be positive", c.cacheTTL)
	}
	switch c.vaultAuth {
	case vault.AuthToken, vault.AuthAppRole, vault.AuthKubernetes:
	default:
		return failf("--vault-auth %q: use token, approle or kubernetes", c.vaultAuth)
	}
	return nil
}

// redact wraps w so nothing written through it holds a known secret value.
func (c *credConfig) redact(w io.Writer) io.Writer { return c.redactor.Writer(w) }

// credentialBroker is the running broker and its Vault source.
type credentialBroker struct {
	broker *credentials.Broker
	vault  *vault.Source
	log    *logrus.Logger

	// store, placeholders and stateDir rewrite placeholders.json on a policy reload.
	store        *policy.Store
	placeholders *credentials.Placeholders
	stateDir     string

	// writeMu serialises placeholders.json rewrites, so the last one holds the policy in
	// force (two reloads, SIGHUP and the file watch, may report at once).
	writeMu sync.Mutex
}

// startCredentials builds the broker (and logs in to Vault when configured), fetches every
// secret of the policy once so values are cached and redacted before the first request, and
// writes the placeholders file. Fetch failures are logged, not fatal: requests that need a
// missing secret fail closed with 503.
func startCredentials(cfg *runConfig, c *credConfig, store *policy.Store, log *logrus.Logger, al audit.Sink, reg prometheus.Registerer) (*credentialBroker, error) {
	pol := store.Current()
	secrets := pol.Secrets()
	var vaultNames []string
	for name, s := range secrets {
		if s.Vault != nil {
			vaultNames = append(vaultNames, name)
		}
	}
	slices.Sort(vaultNames)
	cb := &credentialBroker{log: log, store: store, stateDir: cfg.stateDir}
	ctx := context.Background()
	if len(vaultNames) > 0 && c.vaultAddr == "" {
		return nil, failf("policy secrets %s come from Vault: set --vault-addr (or VAULT_ADDR)", strings.Join(vaultNames, ", "))
	}
	if c.vaultAddr != "" {
		src, err := vault.New(vault.Config{
			Address: c.vaultAddr, CACertFile: c.vaultCACert, Auth: c.vaultAuth,
			Token: os.Getenv("VAULT_TOKEN"), TokenFile: c.vaultTokenFile,
			RoleIDFile: c.vaultRoleIDFile, SecretIDFile: c.vaultSecretIDFile, AppRoleMount: c.vaultAppRoleMount,
			KubernetesRole: c.vaultK8sRole, KubernetesJWTFile: c.vaultK8sJWTFile, KubernetesMount: c.vaultK8sMount,
			Logger: log,
		})
		if err != nil {
			return nil, failf("%v", err)
		}
		if err := src.Start(ctx); err != nil {
			log.WithError(err).Warn("vault login failed at start; retrying in the background (vault secrets fail closed until then)")
		}
		cb.vault = src
	}
	ph, err := credentials.LoadPlaceholders(cfg.stateDir)
	if err != nil {
		cb.close(ctx)
		return nil, failf("--state-dir: %v", err)
	}
	bc := credentials.Config{Policy: store, Placeholders: ph, Redactor: c.redactor, Audit: al, Logger: log,
		Registerer: reg, CacheTTL: c.cacheTTL}
	if cb.vault != nil {
		bc.Vault = cb.vault
	}
	if cb.broker, err = credentials.New(bc); err != nil {
		cb.close(ctx)
		return nil, failf("%v", err)
	}
	cb.placeholders = ph
	if err := ph.Write(cfg.stateDir, slices.Sorted(maps.Keys(secrets))); err != nil {
		cb.close(ctx)
		return nil, failf("--state-dir: %v", err)
	}
	if err := cb.broker.Prefetch(ctx); err != nil {
		log.WithField("error", err.Error()).Warn("some secrets could not be fetched at start; requests needing them fail closed until they can")
	}
	if len(secrets) > 0 {
		log.WithFields(logrus.Fields{"secrets": len(secrets), "placeholders": cfg.stateDir + "/" + credentials.PlaceholdersFile}).Info("credential broker ready")
	}
	return cb, nil
}

// injector is the proxy's Injector (nil when the broker did not start).
func (cb *credentialBroker) injector() proxy.Injector {
	if cb == nil || cb.broker == nil {
		return nil
	}
	return cb.broker
}

// The broker is the LLM proxy's key source too (Vault, env and file secrets, cached, fail
// closed): llmproxy.Config.Keys can be s.creds.broker.
var _ llmproxy.Keys = (*credentials.Broker)(nil)

// close revokes the leases the broker holds (the sandbox's end) and stops renewing.
func (cb *credentialBroker) close(ctx context.Context) {
	if cb == nil {
		return
	}
	var err error
	if cb.broker != nil {
		err = cb.broker.Close(ctx)
	} else if cb.vault != nil {
		err = cb.vault.Close(ctx)
	}
	if err != nil {
		cb.log.WithField("error", err.Error()).Warn("credential broker shutdown incomplete")
	} else if cb.vault != nil {
		cb.log.Info("vault leases revoked")
	}
}

// policyPlaceholders is `airlock policy placeholders`.
func policyPlaceholders(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("policy placeholders", "airlock policy placeholders FILE [--state-dir DIR] [--json]", `
Print the placeholder of every secret of the policy: an opaque string a sandbox may hold
instead of the secret (for tools that insist on a token in an environment variable). airlock
run swaps it for the value only in requests the rule binds the secret to; anywhere else the
request is denied. Placeholders depend on the key in --state-dir (placeholder.key, made on
first use): give the same --state-dir as airlock run. They are not secret. airlock run also
writes them to placeholders.json in the state directory, at start and on each policy reload.`, stderr)
	stateDir := fs.String("state-dir", defaultStateDir(), "state directory of the airlock run that will serve the sandbox")
	asJSON := fs.Bool("json", false, "print a JSON object {name: placeholder}")
	files, err := fs.parse(args, stdout, true)
	if err != nil {
		return err
	}
	if len(files) != 1 {
		fs.Usage()
		return errUsage
	}
	p, err := policy.Load(files[0])
	if err != nil {
		return loadErr(err)
	}
	ph, err := credentials.LoadPlaceholders(*stateDir)
	if err != nil {
		return failf("--state-dir: %v", err)
	}
	names := slices.Sorted(maps.Keys(p.Secrets()))
	out := make(map[string]string, len(names))
	for _, n := range names {
		out[n] = ph.For(n)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	for _, n := range names {
		fmt.Fprintf(stdout, "%s\t%s\n", n, out[n])
	}
	return nil
}
