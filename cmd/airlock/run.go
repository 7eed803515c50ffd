package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/airlock-dev/airlock/internal/cli"
	"github.com/airlock-dev/airlock/internal/sidecar"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/proxy"
	"github.com/airlock-dev/airlock/sandbox"
)

const runLong = `
Serve the sidecar for one sandbox:
  - the explicit HTTP/HTTPS proxy (absolute-form requests and CONNECT), decided against the
    policy before any upstream connection, with TLS interception only for rules that need it
    and credentials from the broker (env, file or Vault sources) injected where rules say;
  - the DNS filter (--dns-addr): allowed names forwarded, others REFUSED;
  - kernel enforcement with eBPF on the sandbox's cgroup (--cgroup), with the transparent
    listener (--transparent-addr) for redirected connections;
  - the local model API (--llm-addr: OpenAI- and Anthropic-compatible, provider keys, model
    allowlist and budget held here, usage in the state directory's ledger);
  - the admin endpoints (/healthz, /readyz, /metrics, /v1/decisions, /v1/usage).
Audit events go to stderr as JSON lines and, with --audit-log, to a file.

The policy is reloaded on SIGHUP and when its file changes; a new policy that does not load
leaves the old one in force and logs why. SIGTERM or SIGINT stops the sidecar gracefully.

Every flag can also be set from the environment: --proxy-addr from AIRLOCK_PROXY_ADDR, and so
on. An address set to "off" disables that listener.`

// runCmd is `airlock run`: flags → config → sidecar.Run → wait for SIGTERM or SIGINT.
func runCmd(args []string, stdout, stderr io.Writer) error {
	fs, cfg := runFlags(stderr)
	rest, err := fs.ParseArgs(args, stdout, true)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return cli.Failf("run: unexpected argument %q (policy goes in --policy)", rest[0])
	}
	if cfg.PolicyFile == "" {
		fs.Usage()
		return cli.Failf("run: --policy is required (try deploy/examples/policy.yaml)")
	}
	vaultEnv(&cfg.Vault)
	if err := cfg.Validate(); err != nil {
		return cli.Failf("%v", err)
	}
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGCPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	cfg.ReloadSignal, cfg.Stderr = hup, stderr
	// Told once, as systemd's sd_notify does with unset_environment: nothing the sidecar
	// starts inherits it.
	cfg.NotifySocket = os.Getenv("NOTIFY_SOCKET")
	_ = os.Unsetenv("NOTIFY_SOCKET")
	if err := sidecar.Run(ctx, *cfg); err != nil {
		// One line per problem: a policy load error is "file:line:col: field: message".
		return &cli.ExitError{Code: 1, Msg: strings.TrimSpace(err.Error())}
	}
	return nil
}

// defaultGCPercent is the GC target airlock runs with unless GOGC is set. The proxy's live
// heap is small (policy, pools, per-request state), so letting it grow to 5× before a
// collection costs little memory and buys about 10% throughput (make bench: most garbage is
// per-request and short-lived). GOMEMLIMIT still caps the heap where the operator sets it.
const defaultGCPercent = 400

// runFlags registers airlock run's flags; every one is also read from its AIRLOCK_* variable.
func runFlags(stderr io.Writer) (*cli.FlagSet, *sidecar.Config) {
	fs := cli.NewFlagSet("run", "airlock run --policy FILE [flags]", runLong, stderr)
	c := &sidecar.Config{}
	fs.StringVar(&c.PolicyFile, "policy", "", "policy YAML file (required)")
	fs.StringVar(&c.ProxyAddr, "proxy-addr", "127.0.0.1:3128", "explicit proxy listener (HTTP_PROXY/HTTPS_PROXY point here)")
	fs.StringVar(&c.TransparentAddr, "transparent-addr", "127.0.0.1:15001", "transparent proxy listener for kernel-redirected connections (needs --cgroup)")
	fs.StringVar(&c.DNSAddr, "dns-addr", "127.0.0.1:5353", "DNS filter listener, UDP and TCP (the sandbox's resolver: :53 in a pod); off disables it")
	fs.StringVar(&c.LLMAddr, "llm-addr", "127.0.0.1:4000", "local model API listener (OpenAI- and Anthropic-compatible); off disables it")
	fs.StringVar(&c.AdminAddr, "admin-addr", "127.0.0.1:9090", "admin listener: /healthz, /readyz, /metrics, /v1/decisions, /v1/usage (never reachable from the sandbox)")
	fs.StringVar(&c.StateDir, "state-dir", cli.DefaultStateDir(), "state directory: TLS interception CA, LLM usage ledger, placeholder key")
	fs.StringVar(&c.Cgroup, "cgroup", "", "cgroup v2 directory to attach kernel enforcement (eBPF) to; pins under /sys/fs/bpf/airlock/<sandbox>")
	fs.StringVar(&c.SandboxNetns, "sandbox-netns", "", "with --cgroup: the network namespace the sandbox lives in (/run/netns/NAME); when it is not the sidecar's own, the sandbox may reach its own loopback (sandbox create sets it)")
	fs.StringVar(&c.TransparentPorts, "transparent-ports", sidecar.DefaultTransparentPorts, "TCP ports the kernel redirects to the transparent listener (with --cgroup)")
	// The Kubernetes webhook injects the sidecar with exactly `--pod-cgroup --cgroup-root
	// /host/sys/fs/cgroup`.
	fs.BoolVar(&c.PodCgroup, "pod-cgroup", false, "Kubernetes pod mode: attach kernel enforcement to the pod's cgroup (the parent of this container's cgroup), exempting this container's own cgroup; not with --cgroup")
	fs.BoolVar(&c.NodeAgent, "node-agent", false, "Kubernetes pod mode without privilege: the node agent (airlock node, a DaemonSet) holds kernel enforcement on the pod's cgroup; the start waits for it to confirm; not with --cgroup or --pod-cgroup")
	fs.Var(identityMapFlag{&c.IdentityContainers}, "identity-containers", "with --node-agent: which identity of the policy's spec.identities each of the pod's containers is, CONTAINER=IDENTITY,... (the webhook sets it from the pod's airlock.dev/identities annotation); other containers are the sandbox's own policy")
	fs.DurationVar(&c.NodeAgentWait, "node-agent-wait", sidecar.DefaultNodeAgentWait, "with --node-agent: how long the start waits for the node agent (then production refuses to start)")
	fs.StringVar(&c.CgroupRoot, "cgroup-root", "", "where the host's cgroup v2 hierarchy is visible, e.g. a hostPath mount /host/sys/fs/cgroup (with --pod-cgroup); default: the cgroup2 mount of /proc/self/mountinfo")
	// In a pod the sidecar writes the app containers' trust store into a volume they mount
	// read-only, so they trust its interception CA without ever seeing its key.
	fs.StringVar(&c.CABundleOut, "ca-bundle-out", "", "write a CA bundle (system roots + this sidecar's interception CA) to this file at start, for the sandbox's SSL_CERT_FILE")
	fs.StringVar(&c.PacketGuard, "packet-guard", "auto", "refusing packet sockets needs the BPF LSM: required | best-effort | auto (required in production); best-effort is for sandboxes without CAP_NET_RAW")
	fs.StringVar(&c.Environment, "environment", "development", "production | staging | development; production refuses to run without kernel enforcement")
	fs.StringVar(&c.AuditLog, "audit-log", "", "also append audit events (JSON lines) to this file")
	fs.StringVar(&c.UpstreamDNS, "upstream-dns", "", "resolver the sidecar uses (host:port); default: the policy's dns.upstreams, else /etc/resolv.conf")
	fs.StringVar(&c.Sandbox, "sandbox", "default", "sandbox name in audit events and metrics")
	fs.StringVar(&c.LogLevel, "log-level", "info", "operational log level: debug | info | warn | error")
	fs.BoolVar(&c.AdminPprof, "admin-pprof", false, "serve Go profiles at /debug/pprof/ on the admin listener")
	limitFlags(fs, &c.Limits)
	credentialFlags(fs, c)
	auditFlags(fs, c)
	upstreamProxyFlags(fs, &c.UpstreamProxy)
	return fs, c
}

// upstreamProxyFlags registers the corporate proxy the sidecar's connections go through. They
// are the operator's (flags, AIRLOCK_* variables, the webhook's flags for injected sidecars),
// never a policy's; HTTP_PROXY, HTTPS_PROXY and NO_PROXY in airlock's own environment are
// ignored.
func upstreamProxyFlags(fs *cli.FlagSet, u *sidecar.UpstreamProxyConfig) {
	fs.StringVar(&u.URL, "upstream-proxy", "", "send every connection (the sandbox's and airlock's own: Vault, model providers) through this HTTP proxy with CONNECT: http://host:port or https://host:port; empty: direct")
	fs.StringVar(&u.CAFile, "upstream-proxy-ca", "", "PEM file of CAs to trust besides the system roots: an https:// upstream proxy's, and an inspecting proxy's that re-signs origins (also added to --ca-bundle-out)")
	fs.StringVar(&u.AuthFile, "upstream-proxy-auth-file", "", "file holding the upstream proxy's Basic credentials, user:password; re-read after a 407")
	fs.StringVar(&u.AuthVault, "upstream-proxy-auth-vault", "", "Vault KV path whose fields username and password are the upstream proxy's Basic credentials (Vault must be in --upstream-no-proxy); re-read after a 407")
	fs.StringVar(&u.NoProxy, "upstream-no-proxy", "", "comma-separated destinations reached directly, not through --upstream-proxy: host patterns as the policy writes them (api.corp.example, *.corp.example) and CIDR ranges")
	fs.BoolVar(&u.ByName, "upstream-proxy-by-name", false, "ask the upstream proxy to CONNECT to the name instead of the address airlock resolved and checked, for networks where airlock cannot resolve external names; the proxy's resolution then decides the address")
	fs.DurationVar(&u.ConnectTimeout, "upstream-proxy-connect-timeout", sidecar.DefaultUpstreamConnectTimeout, "bound on each CONNECT through the upstream proxy: connecting to it, its TLS handshake and its answer (502 upstream_proxy_failed beyond)")
}

// limitFlags registers the proxy's resource limits.
func limitFlags(fs *cli.FlagSet, l *sidecar.Limits) {
	fs.IntVar(&l.MaxTunnels, "max-tunnels", proxy.DefaultMaxTunnels, "concurrent CONNECT tunnels; beyond this requests get 429 with Retry-After")
	fs.DurationVar(&l.DialTimeout, "dial-timeout", proxy.DefaultDialTimeout, "upstream resolve+connect timeout (504 when exceeded)")
	fs.DurationVar(&l.IdleTimeout, "idle-timeout", proxy.DefaultIdleTimeout, "close tunnels and keep-alive connections idle this long")
	fs.DurationVar(&l.ResponseHeaderTimeout, "response-header-timeout", proxy.DefaultResponseHeaderTimeout, "wait this long for upstream response headers (504 when exceeded)")
	fs.IntVar(&l.MaxHeaderBytes, "max-header-bytes", proxy.DefaultMaxHeaderBytes, "largest request header block accepted")
	fs.Int64Var(&l.MaxRequestBodyBytes, "max-request-body", proxy.DefaultMaxRequestBodyBytes, "largest request body accepted (413 beyond)")
	fs.StringVar(&l.HTTP1FastPath, "http1-fastpath", "auto", "auto: HTTP/1.1 requests in intercepted tunnels and absolute-form http:// requests go through the proxy's strict forwarder (anything outside its subset through net/http); off: all through net/http")
}

// credentialFlags registers the credential broker's flags.
func credentialFlags(fs *cli.FlagSet, c *sidecar.Config) {
	v := &c.Vault
	fs.StringVar(&v.Addr, "vault-addr", "", "Vault address for `vault:` secrets (also read from VAULT_ADDR); empty: vault secrets are unavailable")
	fs.StringVar(&v.Auth, "vault-auth", sidecar.DefaultVaultAuth, "Vault auth method: token (VAULT_TOKEN or --vault-token-file) | approle | kubernetes")
	fs.StringVar(&v.CACert, "vault-ca-cert", "", "PEM file of the CA that signs Vault's certificate (also read from VAULT_CACERT)")
	fs.StringVar(&v.TokenFile, "vault-token-file", "", "file holding the Vault token, re-read when it changes (token auth without VAULT_TOKEN)")
	fs.StringVar(&v.RoleIDFile, "vault-role-id-file", "", "file holding the AppRole role_id (approle auth)")
	fs.StringVar(&v.SecretIDFile, "vault-secret-id-file", "", "file holding the AppRole secret_id, read at each login (approle auth)")
	fs.StringVar(&v.AppRoleMount, "vault-approle-mount", "approle", "AppRole auth mount path")
	fs.StringVar(&v.K8sRole, "vault-k8s-role", "", "Vault role for kubernetes auth")
	fs.StringVar(&v.K8sJWTFile, "vault-k8s-jwt-file", sidecar.DefaultVaultK8sJWTFile, "service-account JWT for kubernetes auth")
	fs.StringVar(&v.K8sMount, "vault-k8s-mount", "kubernetes", "Kubernetes auth mount path")
	fs.DurationVar(&c.CredentialCacheTTL, "credential-cache-ttl", sidecar.DefaultCredentialCacheTTL, "how long a fetched secret may be used; refreshed after half of it, served while the source is down until all of it has passed")
}

// vaultEnv takes VAULT_ADDR and VAULT_CACERT for flags not set otherwise, and VAULT_TOKEN.
func vaultEnv(v *sidecar.VaultConfig) {
	if v.Addr == "" {
		v.Addr = os.Getenv("VAULT_ADDR")
	}
	if v.CACert == "" {
		v.CACert = os.Getenv("VAULT_CACERT")
	}
	v.Token = os.Getenv("VAULT_TOKEN")
}

// identityMapFlag is --identity-containers: policy.ParseIdentityMap's syntax.
type identityMapFlag struct{ m *map[string]string }

func (f identityMapFlag) String() string {
	if f.m == nil {
		return ""
	}
	return policy.FormatIdentityMap(*f.m)
}

func (f identityMapFlag) Set(s string) error {
	m, err := policy.ParseIdentityMap(s)
	if err != nil {
		return err
	}
	*f.m = m
	return nil
}

// runHere is the Manager's RunSidecar: `airlock run ARGS` as goroutines of this process (exec
// --ephemeral's sandbox), parsed exactly as the sidecar process would parse them (flags, then
// the AIRLOCK_* and VAULT_* variables of this process's environment, which a sidecar process
// would have inherited), its log and audit lines to log.
func runHere(args []string, log io.Writer) (sandbox.HereSidecar, error) {
	if len(args) == 0 || args[0] != "run" {
		return nil, fmt.Errorf("not the arguments of airlock run: %q", args)
	}
	fs, cfg := runFlags(log)
	rest, err := fs.ParseArgs(args[1:], log, true)
	if err != nil {
		return nil, err
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("run: unexpected argument %q", rest[0])
	}
	vaultEnv(&cfg.Vault)
	cfg.Stderr = log
	s, err := sidecar.New(*cfg)
	if err != nil {
		return nil, err
	}
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGCPercent)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &hereSidecar{s: s, cancel: cancel, done: make(chan error, 1), ended: make(chan struct{})}
	go func() {
		err := s.Run(ctx)
		h.done <- err
		close(h.ended)
	}()
	return h, nil
}

// hereSidecar is one sidecar running in this process.
type hereSidecar struct {
	s      *sidecar.Sidecar
	cancel context.CancelFunc
	done   chan error    // Run's result, read once by Done's reader
	ended  chan struct{} // closed once Run returned
}

func (h *hereSidecar) Ready() <-chan struct{} { return h.s.Ready() }
func (h *hereSidecar) Done() <-chan error     { return h.done }

// Stop ends Run's context (the sidecar closes gracefully) and waits for Run to return.
func (h *hereSidecar) Stop() {
	h.cancel()
	<-h.ended
}

// AdminAddr is the admin listener's bound address ("" when it is off).
func (h *hereSidecar) AdminAddr() string {
	if a := h.s.Addrs().Admin; a.IsValid() {
		return a.String()
	}
	return ""
}
