package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/credentials"
	"github.com/airlock-dev/airlock/credentials/vault"
)

// Off is the address value that disables a listener.
const Off = "off"

// Config is everything a sidecar is told. cmd/airlock fills it from flags and the
// environment; the field comments name the flag. Error messages name the flags too.
type Config struct {
	// PolicyFile is the policy YAML (--policy). Required.
	PolicyFile string
	// ProxyAddr is the explicit proxy listener (--proxy-addr); never Off.
	ProxyAddr string
	// TransparentAddr is the transparent listener (--transparent-addr), used only with
	// kernel enforcement; Off disables it.
	TransparentAddr string
	// DNSAddr is the DNS filter's UDP and TCP listener (--dns-addr); Off disables it.
	DNSAddr string
	// LLMAddr is the local model API listener (--llm-addr); Off disables it.
	LLMAddr string
	// AdminAddr is the admin listener (--admin-addr); Off disables it.
	AdminAddr string
	// StateDir holds the interception CA, the usage ledger and the placeholder key
	// (--state-dir). Required.
	StateDir string
	// Cgroup is the cgroup v2 directory kernel enforcement attaches to (--cgroup); empty
	// means none (unless PodCgroup).
	Cgroup string
	// SandboxNetns is the network namespace the sandbox's processes live in (--sandbox-netns,
	// a path such as /run/netns/NAME; used with Cgroup, refused in pod modes). When it is not the sidecar's own, the
	// sandbox's loopback is its own and the kernel allows it; empty denies loopback but the
	// listeners, as in a pod, where the sandbox shares the sidecar's loopback.
	SandboxNetns string
	// PodCgroup is Kubernetes pod mode (--pod-cgroup): enforce on the pod's cgroup, exempt
	// the sidecar's own.
	PodCgroup bool
	// CgroupRoot is where the host's cgroup v2 hierarchy is visible in pod mode
	// (--cgroup-root); empty means the cgroup2 mount of /proc/self/mountinfo.
	CgroupRoot string
	// NodeAgent is Kubernetes pod mode with the node agent (--node-agent): kernel enforcement
	// on the pod's cgroup is held by `airlock node`, reached over its abstract socket in the
	// pod's network namespace; the sidecar needs no privilege. Not with Cgroup or PodCgroup.
	NodeAgent bool
	// NodeAgentWait is how long the start waits for the node agent to confirm enforcement
	// (--node-agent-wait); zero means DefaultNodeAgentWait.
	NodeAgentWait time.Duration
	// IdentityContainers maps the pod's container names to identities of the policy's
	// spec.identities (--identity-containers; the webhook sets it from the pod's
	// airlock.dev/identities annotation). With NodeAgent only: the node agent tells which
	// container connected. A container not named is the sandbox's own policy. Nil: none.
	IdentityContainers map[string]string
	// CABundleOut, when set, is where the trust bundle for the sandbox is written at start
	// (--ca-bundle-out).
	CABundleOut string
	// TransparentPorts are the TCP ports the kernel redirects, "80,443"
	// (--transparent-ports).
	TransparentPorts string
	// PacketGuard is required | best-effort | auto (--packet-guard).
	PacketGuard string
	// Environment is production | staging | development (--environment).
	Environment string
	// AuditLog, when set, is a file audit events are appended to too (--audit-log), hash
	// chained, written before each HTTP request is answered, rotated and checkpointed.
	AuditLog string
	// Audit holds the audit file's rotation and signing settings (--audit-* flags).
	Audit AuditConfig
	// Ship is where the audit file's sealed parts are shipped (--audit-ship-* flags); the
	// zero value ships nothing.
	Ship ShipConfig
	// UpstreamDNS is the resolver the sidecar uses, "ip:port[,ip:port]" (--upstream-dns);
	// empty means the policy's dns.upstreams, else /etc/resolv.conf.
	UpstreamDNS string
	// Sandbox is the sandbox name in audit events and metrics (--sandbox).
	Sandbox string
	// LogLevel is debug | info | warn | error (--log-level).
	LogLevel string
	// AdminPprof serves Go profiles on the admin listener (--admin-pprof).
	AdminPprof bool
	// Limits are the proxy's resource limits.
	Limits Limits
	// Vault configures the Vault source of the credential broker; an empty Address means
	// vault secrets are unavailable.
	Vault VaultConfig
	// CredentialCacheTTL is how long a fetched secret may be used (--credential-cache-ttl).
	CredentialCacheTTL time.Duration
	// UpstreamProxy is the corporate proxy every connection goes through (--upstream-proxy
	// and its companions); the zero value means none.
	UpstreamProxy UpstreamProxyConfig

	// Stderr receives operational logs and audit events (JSON lines), scrubbed of every
	// secret value the broker knows. Nil means os.Stderr.
	Stderr io.Writer
	// NotifySocket is the unix datagram socket told "READY=1" once the sidecar is ready, by
	// the systemd notification protocol (a path, or "@name" for an abstract one); cmd/airlock
	// takes it from $NOTIFY_SOCKET, so `airlock run` works as a systemd Type=notify service and
	// the sandbox manager waits for its sidecar without polling. Empty: no notification.
	NotifySocket string
	// ReloadSignal triggers a policy reload on every value received (cmd/airlock feeds it
	// SIGHUP). Nil means only file changes reload.
	ReloadSignal <-chan os.Signal
	// AttachKernel attaches kernel enforcement. Nil means the in-process eBPF enforcer.
	// Kernel enforcement is set up only when Cgroup or PodCgroup is set.
	AttachKernel AttachFunc
}

// Limits are the proxy's resource limits (--max-tunnels, --dial-timeout, ...). Zero values
// take the proxy package's defaults.
type Limits struct {
	MaxTunnels            int
	DialTimeout           time.Duration
	IdleTimeout           time.Duration
	ResponseHeaderTimeout time.Duration
	MaxHeaderBytes        int
	MaxRequestBodyBytes   int64
	// HTTP1FastPath is auto (the proxy's strict HTTP/1.1 forwarder, handing what it does
	// not take to net/http) or off (net/http for every request) (--http1-fastpath); "" is
	// auto.
	HTTP1FastPath string
}

// AuditConfig is the audit file's part of Config. Zero values: no rotation, the signing key
// at StateDir/audit-signing.key (created when absent), checkpoints beside the log.
type AuditConfig struct {
	// Key is the Ed25519 signing key (PKCS #8 PEM) checkpoints are signed with
	// (--audit-key); it is created when absent. Unused with Sign.
	Key string
	// Sign is who signs checkpoints (--audit-sign): "" or "local" for Key,
	// "vault-transit:MOUNT/KEY" for an ed25519 key of Vault's Transit engine (the private
	// key never enters the sidecar; needs --vault-addr).
	Sign string
	// Checkpoints is the checkpoint file (--audit-checkpoints); "" means AuditLog +
	// ".checkpoints".
	Checkpoints string
	// MaxBytes and MaxAge rotate the audit file (--audit-max-bytes, --audit-max-age); 0
	// never rotates on that ground.
	MaxBytes int64
	MaxAge   time.Duration
	// CheckpointEvery is the period of checkpoints (--audit-checkpoint-every); 0 means
	// audit.DefaultCheckpointEvery.
	CheckpointEvery time.Duration
}

// VaultConfig is the Vault source's part of Config (--vault-* flags, VAULT_ADDR,
// VAULT_CACERT, VAULT_TOKEN).
type VaultConfig struct {
	Addr         string
	Auth         string
	CACert       string
	Token        string
	TokenFile    string
	RoleIDFile   string
	SecretIDFile string
	AppRoleMount string
	K8sRole      string
	K8sJWTFile   string
	K8sMount     string
}

// Source is a Vault source (not started) for v, dialling Vault with dial and logging to log
// (nil: nowhere); the sidecar's credential broker uses it, and so does `sandbox create` for
// an image's registry login.
func (v *VaultConfig) Source(log *logrus.Logger, dial func(ctx context.Context, network, addr string) (net.Conn, error)) (*vault.Source, error) {
	return vault.New(vault.Config{
		Address: v.Addr, CACertFile: v.CACert, Auth: v.Auth,
		Token: v.Token, TokenFile: v.TokenFile,
		RoleIDFile: v.RoleIDFile, SecretIDFile: v.SecretIDFile, AppRoleMount: v.AppRoleMount,
		KubernetesRole: v.K8sRole, KubernetesJWTFile: v.K8sJWTFile, KubernetesMount: v.K8sMount,
		Logger: log, Dial: dial,
	})
}

// Defaults of Config fields that cmd/airlock's flags show.
const (
	// DefaultTransparentPorts are the TCP ports redirected to the transparent listener.
	DefaultTransparentPorts = "80,443"
	// DefaultVaultAuth is the Vault auth method: a token (VAULT_TOKEN or a token file).
	DefaultVaultAuth = vault.AuthToken
	// DefaultVaultK8sJWTFile is the service-account JWT for Vault's kubernetes auth.
	DefaultVaultK8sJWTFile = vault.DefaultKubernetesJWTFile
	// DefaultNodeAgentWait is how long the start waits for the node agent.
	DefaultNodeAgentWait = 60 * time.Second
	// DefaultCredentialCacheTTL is how long a fetched secret may be used.
	DefaultCredentialCacheTTL = credentials.DefaultCacheTTL
)

// Validate rejects settings this build cannot honour, so nothing silently runs with less
// enforcement than asked for. Each error is one line naming the flag.
func (c *Config) Validate() error {
	switch c.Environment {
	case "production", "staging", "development":
	default:
		return fmt.Errorf("--environment %q: use production, staging or development", c.Environment)
	}
	if c.Environment == "production" && !c.kernelEnabled() {
		return errors.New("--environment production requires kernel enforcement: set --cgroup to the sandbox's cgroup v2 directory (or --node-agent in a Kubernetes pod)")
	}
	if c.ProxyAddr == Off {
		return errors.New("--proxy-addr off: the explicit proxy is the only egress path in this build")
	}
	if err := c.validateKernel(); err != nil {
		return err
	}
	if c.DNSAddr != Off {
		if _, err := netip.ParseAddrPort(c.DNSAddr); err != nil {
			return fmt.Errorf("--dns-addr %q: want ip:port (e.g. 127.0.0.1:5353, or 0.0.0.0:53 in a pod) or off", c.DNSAddr)
		}
	}
	if c.CredentialCacheTTL <= 0 {
		return fmt.Errorf("--credential-cache-ttl %s: must be positive", c.CredentialCacheTTL)
	}
	switch c.Vault.Auth {
	case vault.AuthToken, vault.AuthAppRole, vault.AuthKubernetes:
	default:
		return fmt.Errorf("--vault-auth %q: use token, approle or kubernetes", c.Vault.Auth)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("--log-level %q: use debug, info, warn or error", c.LogLevel)
	}
	switch c.Limits.HTTP1FastPath {
	case "", "auto", "off":
	default:
		return fmt.Errorf("--http1-fastpath %q: use auto or off", c.Limits.HTTP1FastPath)
	}
	if err := c.validateAuditSign(); err != nil {
		return err
	}
	if err := c.Ship.validate(c.AuditLog, c.Vault.Addr); err != nil {
		return err
	}
	return c.UpstreamProxy.validate(c.Vault.Addr)
}

// validateKernel checks the kernel enforcement settings.
func (c *Config) validateKernel() error {
	switch c.PacketGuard {
	case "auto", "required", "best-effort":
	default:
		return fmt.Errorf("--packet-guard %q: use auto, required or best-effort", c.PacketGuard)
	}
	if _, err := ParsePorts(c.TransparentPorts); err != nil {
		return fmt.Errorf("--transparent-ports %q: %v", c.TransparentPorts, err)
	}
	switch {
	case c.PodCgroup && c.Cgroup != "":
		return errors.New("--pod-cgroup and --cgroup are mutually exclusive: --pod-cgroup finds the pod's cgroup itself")
	case !c.PodCgroup && c.CgroupRoot != "":
		return errors.New("--cgroup-root is used only with --pod-cgroup")
	case c.NodeAgent && (c.PodCgroup || c.Cgroup != ""):
		return errors.New("--node-agent is exclusive with --cgroup and --pod-cgroup: the node agent finds the pod's cgroup")
	case c.SandboxNetns != "" && (c.PodCgroup || c.NodeAgent):
		return errors.New("--sandbox-netns is for a local sandbox (--cgroup) in a network namespace of its own, never a pod, whose containers share the sidecar's")
	case c.NodeAgentWait < 0:
		return errors.New("--node-agent-wait must not be negative")
	case len(c.IdentityContainers) > 0 && !c.NodeAgent:
		return errors.New("--identity-containers is for a pod with --node-agent (the node agent tells which container connected); a local sandbox's identities are cgroups (sandbox exec --as)")
	}
	if c.kernelEnabled() && c.TransparentAddr != Off {
		ap, err := listenAddrPort(c.TransparentAddr)
		if err != nil || !ap.Addr().Unmap().Is4() {
			return fmt.Errorf("--transparent-addr %q: want an IPv4 ip:port (IPv4-mapped destinations are redirected to it too) or off", c.TransparentAddr)
		}
	}
	return nil
}

// kernelEnabled says whether kernel enforcement is asked for.
func (c *Config) kernelEnabled() bool { return c.Cgroup != "" || c.PodCgroup || c.NodeAgent }

// packetGuardRequired says whether a missing packet socket guard (BPF LSM) stops the start:
// PacketGuard auto means yes in production only.
func (c *Config) packetGuardRequired() bool {
	return c.PacketGuard == "required" || (c.PacketGuard == "auto" && c.Environment == "production")
}
