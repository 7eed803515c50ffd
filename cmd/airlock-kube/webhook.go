package main

import (
	"context"
	"errors"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/internal/cli"
	"github.com/airlock-dev/airlock/sandbox/kube"
)

const webhookLong = `
Serve the Kubernetes mutating admission webhook that injects the airlock sidecar into pods
labelled airlock.dev/inject: "true" (POST /mutate, admission.k8s.io/v1; GET /healthz).

An injected pod gets: the sidecar as a native sidecar (an init container with restartPolicy
Always, started and probed before the app containers) running "airlock run" with the policy
from the ConfigMap named by the pod's airlock.dev/policy annotation (key airlock.dev/policy-key,
default policy.yaml) running without privilege, kernel enforcement held by the node agent
(--node-agent; airlock node, a DaemonSet), the CA
bundle in a shared read-only volume, the proxy and CA environment in every app container, and
the pod's DNS pointed at the sidecar's DNS filter. A labelled pod without a policy annotation is
refused unless --default-policy-configmap is set. Pods in --namespace are never injected.

Vault: with --vault-addr and --vault-k8s-role, each sidecar logs in to Vault with Kubernetes
auth, using a service-account token (audience --vault-k8s-audience) projected into the sidecar
alone; the app containers get no such token, and a pod that projects one for that audience
itself is refused. Secrets fetched this way are injected upstream by the sidecar and never
enter the pod.

Audit: every sidecar writes its hash-chained audit log and signed checkpoints on a volume of
its own (an emptyDir of --audit-size-limit, or the PVC a pod's airlock.dev/audit-volume-claim
names), sealed every --audit-max-bytes or --audit-max-age; a pod's
airlock.dev/audit-signing-secret names the Secret holding its signing key. With
--audit-s3-bucket the sealed files are shipped there (docs/audit.md, "Shipping").

TLS: the certificate and key files are reloaded when they change (cert-manager rotation) and on
SIGHUP. SIGTERM or SIGINT stops the server gracefully.

Every flag can also be set from the environment: --tls-cert from AIRLOCK_TLS_CERT, and so on.`

// webhookConfig is what airlock webhook is told by flags and environment.
type webhookConfig struct {
	addr, certFile, keyFile string
	logLevel                string
	opts                    kube.Options
}

func webhookFlags(stderr io.Writer) (*cli.FlagSet, *webhookConfig) {
	fs := cli.NewFlagSet("webhook", "airlock webhook --tls-cert FILE --tls-key FILE --image IMAGE --upstream-dns ADDR [flags]", webhookLong, stderr)
	c := &webhookConfig{}
	fs.StringVar(&c.addr, "addr", ":8443", "HTTPS listen address")
	fs.StringVar(&c.certFile, "tls-cert", "", "TLS certificate file (PEM; required), e.g. from a cert-manager Secret")
	fs.StringVar(&c.keyFile, "tls-key", "", "TLS private key file (PEM; required)")
	fs.StringVar(&c.opts.Image, "image", "", "airlock image of the injected sidecar (required)")
	fs.StringVar(&c.opts.ImagePullPolicy, "image-pull-policy", "", "sidecar imagePullPolicy: Always | IfNotPresent | Never (default: Kubernetes' own)")
	fs.StringVar(&c.opts.UpstreamDNS, "upstream-dns", "", "resolver the sidecars use, ip:port (required; the cluster DNS service, e.g. 10.96.0.10:53)")
	fs.StringVar(&c.opts.Environment, "environment", "production", "sidecar --environment: production | staging | development; a pod's airlock.dev/environment annotation may only be stricter")
	fs.StringVar(&c.opts.Namespace, "namespace", "airlock-system", "the webhook's own namespace, whose pods are never injected")
	fs.StringVar(&c.opts.DefaultPolicyConfigMap, "default-policy-configmap", "", "policy ConfigMap for labelled pods without an airlock.dev/policy annotation (default: refuse such pods)")
	fs.StringVar(&c.opts.ClusterDomain, "cluster-domain", "cluster.local", "cluster DNS domain for the injected pods' search list")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug | info | warn | error")
	v := &c.opts.Vault
	fs.StringVar(&v.Address, "vault-addr", "", "Vault URL the sidecars log in to with Kubernetes auth, for the policies' vault: secrets (default: no Vault)")
	fs.StringVar(&v.Role, "vault-k8s-role", "", "Vault Kubernetes auth role of the sandbox pods (required with --vault-addr); bind it to --vault-k8s-audience")
	fs.StringVar(&v.AuthMount, "vault-k8s-mount", "kubernetes", "Vault Kubernetes auth mount path")
	fs.StringVar(&v.Audience, "vault-k8s-audience", "vault", "audience of the service-account token projected into the sidecar alone (the Vault role must require it)")
	fs.StringVar(&v.CAConfigMap, "vault-ca-configmap", "", "ConfigMap in each sandbox namespace whose key ca.crt is the CA of Vault's certificate (default: the image's CA bundle)")
	u := &c.opts.UpstreamProxy
	fs.StringVar(&u.URL, "upstream-proxy", "", "corporate proxy the injected sidecars send every connection through (their --upstream-proxy): http://host:port or https://host:port (default: direct)")
	fs.StringVar(&u.NoProxy, "upstream-no-proxy", "", "the sidecars' --upstream-no-proxy: comma-separated host patterns and CIDRs reached directly (cluster services, Vault)")
	fs.BoolVar(&u.ByName, "upstream-proxy-by-name", false, "the sidecars' --upstream-proxy-by-name: the proxy resolves names (it decides the address)")
	fs.StringVar(&u.CAConfigMap, "upstream-proxy-ca-configmap", "", "ConfigMap in each sandbox namespace whose key ca.crt is the upstream proxy's CA (https:// or inspecting proxy), mounted in the sidecar alone")
	fs.StringVar(&u.AuthSecret, "upstream-proxy-auth-secret", "", "Secret in each sandbox namespace whose key auth is the proxy's Basic credentials (user:password), mounted in the sidecar alone; pods that use it are refused")
	fs.StringVar(&u.AuthVault, "upstream-proxy-auth-vault", "", "the sidecars' --upstream-proxy-auth-vault: Vault KV path with fields username and password")
	auditWebhookFlags(fs, &c.opts.Audit)
	return fs, c
}

func webhookCmd(args []string, stdout, stderr io.Writer) error {
	fs, cfg := webhookFlags(stderr)
	rest, err := fs.ParseArgs(args, stdout, true)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return cli.Failf("webhook: unexpected argument %q", rest[0])
	}
	if cfg.certFile == "" || cfg.keyFile == "" {
		return cli.Failf("webhook: --tls-cert and --tls-key are required (the API server only calls webhooks over HTTPS)")
	}
	lvl, err := logrus.ParseLevel(cfg.logLevel)
	if err != nil {
		return cli.Failf("--log-level %q: use debug, info, warn or error", cfg.logLevel)
	}
	log := logrus.New()
	log.SetOutput(stderr)
	log.SetFormatter(&logrus.JSONFormatter{TimestampFormat: time.RFC3339Nano})
	log.SetLevel(lvl)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serveWebhook(ctx, cfg, log, nil)
}

// serveWebhook serves until ctx ends, then shuts down gracefully. listening, if not nil, is
// called with the bound address once the server accepts connections.
func serveWebhook(ctx context.Context, cfg *webhookConfig, log *logrus.Logger, listening func(net.Addr)) error {
	h, err := kube.NewHandler(cfg.opts, log)
	if err != nil {
		return cli.Failf("webhook: %v", err)
	}
	certs, err := kube.NewCertReloader(cfg.certFile, cfg.keyFile, log)
	if err != nil {
		return cli.Failf("webhook: %v", err)
	}
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return cli.Failf("--addr: %v", err)
	}
	srv := &http.Server{
		Handler:           h,
		TLSConfig:         certs.TLSConfig(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		ErrorLog:          stdLogger(log),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	go reloadOnHUP(ctx, certs)
	log.WithFields(logrus.Fields{
		"addr": ln.Addr().String(), "image": cfg.opts.Image, "environment": cfg.opts.Environment,
		"namespace": cfg.opts.Namespace, "default_policy_configmap": cfg.opts.DefaultPolicyConfigMap,
		"vault_addr": cfg.opts.Vault.Address, "vault_role": cfg.opts.Vault.Role,
	}).Info("airlock webhook listening")
	if listening != nil {
		listening(ln.Addr())
	}
	select {
	case err := <-errc:
		return cli.Failf("webhook: %v", err)
	case <-ctx.Done():
	}
	log.Info("webhook shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return cli.Failf("webhook shutdown: %v", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return cli.Failf("webhook: %v", err)
	}
	return nil
}

// reloadOnHUP reloads the TLS key pair on SIGHUP (GetCertificate also notices changed files
// on its own at the next handshake).
func reloadOnHUP(ctx context.Context, certs *kube.CertReloader) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			_, _ = certs.Reload() // Reload logs the outcome
		}
	}
}

// stdLogger routes net/http's server errors (TLS handshake failures and the like) into the
// JSON log.
func stdLogger(log logrus.FieldLogger) *stdlog.Logger {
	return stdlog.New(logWriter{log}, "", 0)
}

type logWriter struct{ log logrus.FieldLogger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.Warn(strings.TrimSpace(string(p)))
	return len(p), nil
}

// auditWebhookFlags registers the flags of every sidecar's audit trail and its shipping.
func auditWebhookFlags(fs *cli.FlagSet, a *kube.AuditOptions) {
	fs.Var(kube.QuantityFlag(&a.SizeLimit), "audit-size-limit", "sizeLimit of each pod's audit emptyDir; the shipping backlog is bounded at 3/4 of it")
	fs.Int64Var(&a.MaxBytes, "audit-max-bytes", 4<<20, "the sidecars' --audit-max-bytes: seal (rotate) the audit log at this size")
	fs.DurationVar(&a.MaxAge, "audit-max-age", 5*time.Minute, "the sidecars' --audit-max-age: seal the audit log at this age")
	fs.StringVar(&a.S3Bucket, "audit-s3-bucket", "", "ship every sidecar's sealed audit files to this S3 bucket (default: keep them in the pod)")
	fs.StringVar(&a.S3Prefix, "audit-s3-prefix", "", "key prefix in the bucket; keys go on with namespace/pod/pod-uid/chain-id/")
	fs.StringVar(&a.S3Region, "audit-s3-region", "us-east-1", "region of the bucket")
	fs.StringVar(&a.S3Endpoint, "audit-s3-endpoint", "", "endpoint URL of S3-compatible storage (default: AWS)")
	fs.StringVar(&a.S3CredentialsSecret, "audit-s3-credentials-secret", "", "Secret in each sandbox namespace whose key credentials is ACCESS_KEY_ID:SECRET_ACCESS_KEY, mounted in the sidecar alone")
	fs.StringVar(&a.S3CredentialsVault, "audit-s3-credentials-vault", "", "Vault KV path with fields access_key_id and secret_access_key, read with the sidecars' Vault login (instead of the Secret)")
	fs.StringVar(&a.RetentionMode, "audit-retention-mode", "", "Object Lock retention mode of every upload: COMPLIANCE or GOVERNANCE")
	fs.DurationVar(&a.Retention, "audit-retention", 0, "Object Lock retention period of every upload, e.g. 2160h")
	fs.BoolVar(&a.FailClosed, "audit-fail-closed", false, "the sidecars' --audit-ship-fail-closed: not ready while the shipping backlog is full")
}
