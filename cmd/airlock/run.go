package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/egress"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/proxy"
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

// runConfig is everything airlock run is told by flags and environment.
type runConfig struct {
	policyFile       string
	proxyAddr        string
	transparentAddr  string
	dnsAddr          string
	llmAddr          string
	adminAddr        string
	stateDir         string
	cgroup           string
	pod              podConfig
	caBundleOut      string
	transparentPorts string
	packetGuard      string
	environment      string
	auditLog         string
	upstreamDNS      string
	sandbox          string
	logLevel         string
	adminPprof       bool
	limits           limits
	creds            *credConfig
}

// limits are the proxy's resource limits, as flags.
type limits struct {
	MaxTunnels            int
	DialTimeout           time.Duration
	IdleTimeout           time.Duration
	ResponseHeaderTimeout time.Duration
	MaxHeaderBytes        int
	MaxRequestBodyBytes   int64
}

func runFlags(stderr io.Writer) (*flagSet, *runConfig) {
	fs := newFlagSet("run", "airlock run --policy FILE [flags]", runLong, stderr)
	c := &runConfig{}
	fs.StringVar(&c.policyFile, "policy", "", "policy YAML file (required)")
	fs.StringVar(&c.proxyAddr, "proxy-addr", "127.0.0.1:3128", "explicit proxy listener (HTTP_PROXY/HTTPS_PROXY point here)")
	fs.StringVar(&c.transparentAddr, "transparent-addr", "127.0.0.1:15001", "transparent proxy listener for kernel-redirected connections (needs --cgroup)")
	fs.StringVar(&c.dnsAddr, "dns-addr", "127.0.0.1:5353", "DNS filter listener, UDP and TCP (the sandbox's resolver: :53 in a pod); off disables it")
	fs.StringVar(&c.llmAddr, "llm-addr", "127.0.0.1:4000", "local model API listener (OpenAI- and Anthropic-compatible); off disables it")
	fs.StringVar(&c.adminAddr, "admin-addr", "127.0.0.1:9090", "admin listener: /healthz, /readyz, /metrics, /v1/decisions, /v1/usage (never reachable from the sandbox)")
	fs.StringVar(&c.stateDir, "state-dir", defaultStateDir(), "state directory: TLS interception CA, LLM usage ledger, placeholder key")
	fs.StringVar(&c.cgroup, "cgroup", "", "cgroup v2 directory to attach kernel enforcement (eBPF) to; pins under /sys/fs/bpf/airlock/<sandbox>")
	fs.StringVar(&c.transparentPorts, "transparent-ports", defaultTransparentPorts, "TCP ports the kernel redirects to the transparent listener (with --cgroup)")
	podFlags(fs, c)
	caBundleFlags(fs, c)
	fs.StringVar(&c.packetGuard, "packet-guard", "auto", "refusing packet sockets needs the BPF LSM: required | best-effort | auto (required in production); best-effort is for sandboxes without CAP_NET_RAW")
	fs.StringVar(&c.environment, "environment", "development", "production | staging | development; production refuses to run without kernel enforcement")
	fs.StringVar(&c.auditLog, "audit-log", "", "also append audit events (JSON lines) to this file")
	fs.StringVar(&c.upstreamDNS, "upstream-dns", "", "resolver the sidecar uses (host:port); default: the policy's dns.upstreams, else /etc/resolv.conf")
	fs.StringVar(&c.sandbox, "sandbox", "default", "sandbox name in audit events and metrics")
	fs.StringVar(&c.logLevel, "log-level", "info", "operational log level: debug | info | warn | error")
	fs.BoolVar(&c.adminPprof, "admin-pprof", false, "serve Go profiles at /debug/pprof/ on the admin listener")
	fs.IntVar(&c.limits.MaxTunnels, "max-tunnels", proxy.DefaultMaxTunnels, "concurrent CONNECT tunnels; beyond this requests get 429 with Retry-After")
	fs.DurationVar(&c.limits.DialTimeout, "dial-timeout", proxy.DefaultDialTimeout, "upstream resolve+connect timeout (504 when exceeded)")
	fs.DurationVar(&c.limits.IdleTimeout, "idle-timeout", proxy.DefaultIdleTimeout, "close tunnels and keep-alive connections idle this long")
	fs.DurationVar(&c.limits.ResponseHeaderTimeout, "response-header-timeout", proxy.DefaultResponseHeaderTimeout, "wait this long for upstream response headers (504 when exceeded)")
	fs.IntVar(&c.limits.MaxHeaderBytes, "max-header-bytes", proxy.DefaultMaxHeaderBytes, "largest request header block accepted")
	fs.Int64Var(&c.limits.MaxRequestBodyBytes, "max-request-body", proxy.DefaultMaxRequestBodyBytes, "largest request body accepted (413 beyond)")
	c.creds = credentialFlags(fs)
	return fs, c
}

func runCmd(args []string, stdout, stderr io.Writer) error {
	fs, cfg := runFlags(stderr)
	rest, err := fs.parse(args, stdout, true)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return failf("run: unexpected argument %q (policy goes in --policy)", rest[0])
	}
	if cfg.policyFile == "" {
		fs.Usage()
		return failf("run: --policy is required (try deploy/examples/policy.yaml)")
	}
	if err := cfg.validate(fs); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serve(ctx, cfg, stderr)
}

// validate rejects flag combinations this build cannot honour, so nothing silently runs with
// less enforcement than asked for.
func (c *runConfig) validate(fs *flagSet) error {
	switch c.environment {
	case "production", "staging", "development":
	default:
		return failf("--environment %q: use production, staging or development", c.environment)
	}
	if c.environment == "production" && c.cgroup == "" && !c.pod.enabled {
		return failf("--environment production requires kernel enforcement: set --cgroup to the sandbox's cgroup v2 directory (or --pod-cgroup in a Kubernetes pod)")
	}
	if c.proxyAddr == "off" {
		return failf("--proxy-addr off: the explicit proxy is the only egress path in this build")
	}
	if err := validateKernel(c); err != nil {
		return err
	}
	if err := validateDNS(c); err != nil {
		return err
	}
	if err := c.creds.validate(); err != nil {
		return err
	}
	switch c.logLevel {
	case "debug", "info", "warn", "error":
	default:
		return failf("--log-level %q: use debug, info, warn or error", c.logLevel)
	}
	return nil
}

// sidecar is a running airlock: what serve started and must stop.
type sidecar struct {
	log    *logrus.Logger
	audit  audit.Sink
	store  *policy.Store
	proxy  *proxy.Proxy
	creds  *credentialBroker
	llm    *llmSidecar
	kernel *kernel
	dns    *dnsListener
	admin  *http.Server
	// listeners are the TCP listeners start opened itself; stop closes them.
	listeners []net.Listener
	ready     chan struct{}
	errs      chan error
	serving   int
}

// defaultGCPercent is the GC target airlock runs with unless GOGC is set. The proxy's live
// heap is small (policy, pools, per-request state), so letting it grow to 5× before a
// collection costs little memory and buys about 10% throughput (make bench: most garbage is
// per-request and short-lived). GOMEMLIMIT still caps the heap where the operator sets it.
const defaultGCPercent = 400

func serve(ctx context.Context, cfg *runConfig, stderr io.Writer) error {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGCPercent)
	}
	stderr = cfg.creds.redact(stderr) // no secret value reaches a log line or an audit event
	log := logrus.New()
	log.SetOutput(stderr)
	log.SetFormatter(&logrus.JSONFormatter{TimestampFormat: time.RFC3339Nano})
	lvl, _ := logrus.ParseLevel(cfg.logLevel)
	log.SetLevel(lvl)

	pol, err := policy.Load(cfg.policyFile)
	if err != nil {
		return loadErr(err)
	}
	al, err := audit.New(audit.Options{Sandbox: cfg.sandbox, Writer: stderr, File: cfg.auditLog, Keep: 256,
		Redact: cfg.creds.redactor.Bytes})
	if err != nil {
		return failf("open audit log: %v", err)
	}
	defer al.Close()

	s, err := start(cfg, pol, log, al)
	if err != nil {
		return err
	}
	defer s.stop()

	go s.watchPolicy(ctx, cfg.policyFile)
	log.WithFields(logrus.Fields{
		"proxy": cfg.proxyAddr, "admin": cfg.adminAddr, "policy": pol.Name(), "mode": pol.Mode(),
		"sandbox": cfg.sandbox, "environment": cfg.environment, "state_dir": cfg.stateDir,
	}).Info("airlock listening")
	close(s.ready)

	select {
	case <-ctx.Done():
		log.Info("shutting down")
		return nil
	case err := <-s.errs:
		return failf("%v", err)
	}
}

// start builds every component and opens every listener; on any error it unwinds what it
// already started.
func start(cfg *runConfig, pol *policy.Policy, log *logrus.Logger, al *audit.Logger) (s *sidecar, err error) {
	ca, err := proxy.LoadOrCreateCA(cfg.stateDir, time.Now)
	if err != nil {
		return nil, failf("%v", err)
	}
	if err := writeCABundle(cfg.caBundleOut, ca.CertPEM()); err != nil {
		return nil, err
	}
	resolver, err := newResolver(cfg.upstreamDNS, pol)
	if err != nil {
		return nil, failf("%v", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	s = &sidecar{log: log, audit: al, store: policy.NewStore(cfg.policyFile, pol), ready: make(chan struct{}), errs: make(chan error, 4)}
	started := s // the error returns below set s to nil
	defer func() {
		if err != nil {
			started.stop()
		}
	}()

	proxyLn, err := s.listen("proxy-addr", cfg.proxyAddr)
	if err != nil {
		return nil, err
	}
	var adminLn net.Listener
	if cfg.adminAddr != "off" {
		if adminLn, err = s.listen("admin-addr", cfg.adminAddr); err != nil {
			return nil, err
		}
	}
	if s.dns, err = listenDNS(cfg); err != nil {
		return nil, err
	}
	// Kernel enforcement before the proxy: the transparent listener needs it, and the DNS
	// filter writes into its allow map (s.dns.start below); the proxy's transparent listener
	// asks the filter which addresses it handed out for a name (NameAddrs).
	if s.kernel, err = startKernel(cfg, pol, log, al, reg, proxyLn); err != nil {
		return nil, err
	}
	if s.creds, err = startCredentials(cfg, cfg.creds, s.store, log, al, reg); err != nil {
		return nil, err
	}
	if err = s.dns.start(cfg, s, reg, s.kernel.allowMap()); err != nil {
		return nil, err
	}
	// One SSRF guard and one own-address list for everything that dials out: each listener
	// registers once (the proxy's and the model API's register themselves as they serve).
	guard, err := egress.New(egress.Config{Resolver: resolver, DialTimeout: cfg.limits.DialTimeout})
	if err != nil {
		return nil, failf("%v", err)
	}
	for _, ap := range slices.Concat(listenerAddrs(proxyLn, adminLn, s.kernel.listener()), s.dns.addrs()) {
		guard.Self().Add(ap)
	}
	if s.llm, err = startLLM(cfg, s, reg, guard, al); err != nil {
		return nil, err
	}
	s.proxy, err = proxy.New(proxy.Config{
		Policy:      s.store,
		Guard:       guard,
		Audit:       al,
		Logger:      log,
		Registerer:  reg,
		CA:          ca,
		NameAddrs:   s.dns.nameAddrs(),
		OriginalDst: s.kernel.originalDst(),
		Injector:    s.creds.injector(),

		MaxTunnels:            cfg.limits.MaxTunnels,
		DialTimeout:           cfg.limits.DialTimeout,
		IdleTimeout:           cfg.limits.IdleTimeout,
		ResponseHeaderTimeout: cfg.limits.ResponseHeaderTimeout,
		MaxHeaderBytes:        cfg.limits.MaxHeaderBytes,
		MaxRequestBodyBytes:   cfg.limits.MaxRequestBodyBytes,
	})
	if err != nil {
		return nil, failf("%v", err)
	}
	s.goServe("proxy", func() error { return s.proxy.Serve(proxyLn) })
	s.dns.serve(s)
	if adminLn != nil {
		s.admin = newAdminServer(reg, s.store, al, s.ready, cfg.adminPprof, s.llm.usageHandler())
		s.goServe("admin", func() error { return s.admin.Serve(adminLn) })
	}
	if s.kernel != nil && s.kernel.transparentLn != nil {
		ln := s.kernel.transparentLn
		s.goServe("transparent", func() error { return s.proxy.ServeTransparent(ln) })
	} else if cfg.transparentAddr != "off" {
		log.WithField("transparent", cfg.transparentAddr).Info("transparent listener not started: it needs kernel enforcement (--cgroup) to learn original destinations")
	}
	return s, nil
}

// listen opens a TCP listener for the flag and remembers it, so that stop closes it even when
// start fails before a server took it over.
func (s *sidecar) listen(flagName, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, failf("--%s: %v", flagName, err)
	}
	s.listeners = append(s.listeners, ln)
	return ln, nil
}

// goServe runs a listener's serve loop; an unexpected end is reported on s.errs.
func (s *sidecar) goServe(name string, serve func() error) {
	s.serving++
	go func() {
		err := serve()
		if err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			s.errs <- fmt.Errorf("%s listener: %w", name, err)
		}
	}()
}

// stop closes the listeners and waits (bounded) for open requests and tunnels.
func (s *sidecar) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if s.admin != nil {
		_ = s.admin.Shutdown(ctx)
	}
	if s.proxy != nil {
		if err := s.proxy.Shutdown(ctx); err != nil {
			s.log.WithError(err).Warn("proxy shutdown did not finish cleanly")
		}
	}
	s.llm.stop(ctx)
	if err := s.dns.close(ctx); err != nil {
		s.log.WithError(err).Warn("DNS filter shutdown did not finish cleanly")
	}
	s.creds.close(ctx) // revoke leases: the sandbox's end
	s.kernel.close()
	for _, ln := range s.listeners {
		_ = ln.Close() // already closed by its server's Shutdown, unless start failed first
	}
}

// watchPolicy reloads the policy on SIGHUP and on file change, logging and auditing each
// attempt; a failed reload keeps the previous policy.
func (s *sidecar) watchPolicy(ctx context.Context, file string) {
	report := func(p *policy.Policy, err error) {
		ev := audit.Event{Kind: audit.KindPolicy, Destination: file}
		if err != nil {
			s.log.WithField("policy_file", file).WithField("error", err.Error()).Error("policy reload failed; keeping the previous policy")
			ev.Decision, ev.Error, ev.Policy = audit.DecisionDeny, err.Error(), s.store.Current().Name()
		} else {
			s.log.WithFields(logrus.Fields{"policy": p.Name(), "mode": p.Mode()}).Info("policy reloaded")
			s.dns.policyChanged(s, p)
			s.creds.policyChanged(ctx)
			if err := s.kernel.reload(p); err != nil {
				s.log.WithField("error", err.Error()).Error("kernel CIDR rules not updated after policy reload")
			}
			ev.Decision, ev.Policy = audit.DecisionAllow, p.Name()
		}
		s.audit.Log(ev)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				report(s.store.Reload())
			}
		}
	}()
	if err := s.store.Watch(ctx, report); err != nil && ctx.Err() == nil {
		s.log.WithError(err).Warn("policy file watch stopped; reload with SIGHUP")
	}
}

// listenerAddrs lists the addresses of the sidecar's own listeners, which the proxy refuses
// to connect to (no request may loop back into airlock).
func listenerAddrs(ls ...net.Listener) []netip.AddrPort {
	var out []netip.AddrPort
	for _, l := range ls {
		if l == nil {
			continue
		}
		if ap, err := netip.ParseAddrPort(l.Addr().String()); err == nil {
			out = append(out, ap)
		}
	}
	return out
}

// newResolver returns the resolver the proxy uses: --upstream-dns, else the policy's
// dns.upstreams, else the system's (/etc/resolv.conf).
func newResolver(flagAddr string, pol *policy.Policy) (*net.Resolver, error) {
	var upstreams []string
	switch {
	case flagAddr == "off":
		return nil, errors.New("--upstream-dns off: the proxy needs a resolver")
	case flagAddr != "":
		upstreams = strings.Split(flagAddr, ",")
	default:
		upstreams = pol.DNS().Upstreams
	}
	if len(upstreams) == 0 {
		return &net.Resolver{PreferGo: true}, nil
	}
	aps, err := policy.ParseUpstreams(upstreams)
	if err != nil {
		return nil, fmt.Errorf("upstream DNS: %w", err)
	}
	upstreams = make([]string, len(aps))
	for i, ap := range aps {
		upstreams[i] = ap.String()
	}
	var d net.Dialer
	return &net.Resolver{
		PreferGo: true,
		// Dial ignores the server the Go resolver picked from resolv.conf and asks ours, in
		// order, so the sidecar never falls back to a resolver the operator did not name.
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var firstErr error
			for _, u := range upstreams {
				c, err := d.DialContext(ctx, network, u)
				if err == nil {
					return c, nil
				}
				if firstErr == nil {
					firstErr = err
				}
			}
			return nil, firstErr
		},
	}, nil
}
