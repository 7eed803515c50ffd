package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/credentials"
	"github.com/airlock-dev/airlock/dnsfilter"
	"github.com/airlock-dev/airlock/egress"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/proxy"
)

// shutdownTimeout bounds Close: open requests and tunnels get this long to finish.
const shutdownTimeout = 10 * time.Second

// component is one part of the sidecar. Its constructor has no side effects; Start opens
// its sockets and starts serving (reporting an unexpected end of a serve loop through
// Sidecar.goServe); Close stops it and is idempotent, and safe after a failed or missing
// Start.
type component interface {
	name() string
	start(ctx context.Context) error
	close(ctx context.Context) error
}

// Sidecar is one running airlock sidecar. New builds it, Start starts it, Close stops it;
// Run does all three around a wait.
type Sidecar struct {
	cfg Config

	// Shared inputs, built once by Start and handed to the components.
	log      *logrus.Logger
	redactor *credentials.Redactor
	audit    *audit.Logger
	transit  *transitSigner // --audit-sign vault-transit:, else nil
	store    *policy.Store
	reg      *prometheus.Registry
	resolver *egress.CachingResolver
	// answers is the resolver's answer cache, which the DNS filter fills too.
	answers *egress.AnswerCache
	// brake is the DNS exfiltration brake the DNS filter and the resolver share.
	brake *dnsfilter.Brake
	ca    *proxy.CA
	guard *egress.Guard
	// operator is the dial path of the sidecar's own connections (Vault, model providers):
	// the guard's resolver, own listeners and upstream proxy, none of the sandbox's policy.
	operator *egress.Operator
	// upstream is the upstream proxy both paths go through (nil: direct).
	upstream *egress.Upstream
	// self is the guard's own-address list: every listener registers into it as it opens,
	// and the proxy and the model API never dial any of them.
	self *egress.SelfAddrs

	// The components, in start order.
	sockets *sockets
	kernel  *kernel
	creds   *credentialBroker
	appr    *approvals
	dns     *dnsComponent
	usage   *usageComponent
	llm     *llmComponent
	proxy   *proxyComponent
	admin   *adminComponent
	reload  *reloader
	ship    *shipper

	ready chan struct{}
	errs  chan error
	wg    sync.WaitGroup // serve loops

	// mu guards started and closed.
	mu      sync.Mutex
	started []component
	closed  bool
}

// New checks cfg and builds a sidecar; it opens nothing.
func New(cfg Config) (*Sidecar, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.PolicyFile == "" {
		return nil, errors.New("--policy is required")
	}
	if cfg.Stderr == nil {
		cfg.Stderr = os.Stderr
	}
	switch {
	case cfg.AttachKernel != nil:
	case cfg.NodeAgent:
		wait := cfg.NodeAgentWait
		if wait == 0 {
			wait = DefaultNodeAgentWait
		}
		cfg.AttachKernel = AttachNodeAgent("", wait)
	default:
		cfg.AttachKernel = AttachEBPF
	}
	s := &Sidecar{cfg: cfg, redactor: credentials.NewRedactor(), self: egress.NewSelfAddrs(nil),
		ready: make(chan struct{}), errs: make(chan error, 1)}
	s.sockets = &sockets{s: s}
	s.kernel = &kernel{s: s}
	s.creds = &credentialBroker{s: s}
	s.appr = &approvals{s: s}
	s.dns = &dnsComponent{s: s}
	s.usage = &usageComponent{s: s}
	s.llm = &llmComponent{s: s}
	s.proxy = &proxyComponent{s: s}
	s.admin = &adminComponent{s: s}
	s.reload = newReloader(s)
	s.ship = &shipper{s: s}
	return s, nil
}

// components lists the components in start order: sockets first (the kernel programs need
// every listener's address), kernel enforcement before the DNS filter (which feeds its
// allow map) and the proxy (whose transparent listener asks it for original destinations),
// the credential broker before the audit shipper (its S3 keys may come from Vault), the
// model API and the proxy (which take keys and injection from it), the approval stage before
// the DNS filter and the proxy (which read the effective policy, grants included, from it),
// the usage meter after kernel enforcement (its counters) and before the model API (so that
// it stops after it, with the spend of the last calls), the reloader last.
func (s *Sidecar) components() []component {
	return []component{s.sockets, s.kernel, s.creds, s.ship, s.appr, s.dns, s.usage, s.llm, s.proxy, s.admin, s.reload}
}

// Run starts the sidecar, waits until ctx ends or a listener fails, and stops it.
func Run(ctx context.Context, cfg Config) error {
	s, err := New(cfg)
	if err != nil {
		return err
	}
	return s.Run(ctx)
}

// Run starts s, waits until ctx ends (nil) or a listener stops unexpectedly (its error),
// and closes s.
func (s *Sidecar) Run(ctx context.Context) error {
	if err := s.Start(ctx); err != nil {
		return err
	}
	defer s.Close()
	select {
	case <-ctx.Done():
		s.log.Info("shutting down")
		return nil
	case err := <-s.errs:
		return err
	}
}

// Start loads the policy, builds the shared inputs and starts every component in order. On
// error it closes what it started and returns the error; a policy that does not load is
// returned as from policy.Load. ctx bounds the sidecar's background work (reloads, credential
// renewal) as well as the start.
func (s *Sidecar) Start(ctx context.Context) (err error) {
	if err := s.shared(); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if err := s.startAuditSigner(ctx); err != nil {
		return err
	}
	for _, c := range s.components() {
		s.mu.Lock()
		s.started = append(s.started, c)
		s.mu.Unlock()
		if err := c.start(ctx); err != nil {
			return err
		}
	}
	pol := s.store.Current()
	s.log.WithFields(logrus.Fields{
		"proxy": s.cfg.ProxyAddr, "admin": s.cfg.AdminAddr, "policy": pol.Name(), "mode": pol.Mode(),
		"sandbox": s.cfg.Sandbox, "environment": s.cfg.Environment, "state_dir": s.cfg.StateDir,
		"egress": s.operator.String(),
	}).Info("airlock listening")
	close(s.ready)
	if err := notifyReady(s.cfg.NotifySocket); err != nil {
		s.log.WithError(err).Warn("could not tell the service manager the sidecar is ready")
	}
	s.checkUpstreamResolution(pol)
	return nil
}

// shared builds the inputs every component shares: logger, policy store, audit logger,
// interception CA (and the sandbox's trust bundle), resolver, dial guard and metrics registry.
func (s *Sidecar) shared() error {
	stderr := s.redactor.Writer(s.cfg.Stderr) // no secret value reaches a log line or an audit event
	s.log = logrus.New()
	s.log.SetOutput(stderr)
	s.log.SetFormatter(&logrus.JSONFormatter{TimestampFormat: time.RFC3339Nano})
	lvl, _ := logrus.ParseLevel(s.cfg.LogLevel)
	s.log.SetLevel(lvl)

	pol, err := policy.Load(s.cfg.PolicyFile)
	if err != nil {
		return err
	}
	if err := pol.CheckIdentityMap(s.cfg.IdentityContainers); err != nil {
		return fmt.Errorf("--identity-containers (the pod's airlock.dev/identities annotation): %w", err)
	}
	s.store = policy.NewStore(s.cfg.PolicyFile, pol)
	// Audit lines are scrubbed as they are built (openAudit's Redact), so their stderr copy
	// skips the second scan the log's writer would give them.
	if s.audit, err = s.openAudit(s.cfg.Stderr); err != nil {
		return err
	}
	if _, err := s.archivePolicy(); err != nil { // evidence only: the sidecar still serves
		s.log.WithError(err).Warn("policy not archived for evidence packs")
	}
	if s.ca, err = proxy.LoadOrCreateCA(s.cfg.StateDir, time.Now); err != nil {
		s.audit.Close()
		return err
	}
	var upstreamCA []byte
	if s.upstream, upstreamCA, err = s.buildUpstream(); err != nil {
		s.audit.Close()
		return err
	}
	if err := writeCABundle(s.cfg.CABundleOut, s.ca.CertPEM(), upstreamCA); err != nil {
		s.audit.Close()
		return err
	}
	s.brake = dnsfilter.NewBrake(nil)
	if s.resolver, s.answers, err = newResolver(s.cfg.UpstreamDNS, pol, s.store, s.brake); err != nil {
		s.audit.Close()
		return err
	}
	// One SSRF dial guard for everything the sandbox reaches (the proxy), one operator dial
	// path for the sidecar's own connections (Vault, the model API's providers); both share
	// the resolver, the own-address list and the upstream proxy.
	gc := egress.Config{Resolver: s.resolver, DialTimeout: s.cfg.Limits.DialTimeout, Self: s.self, Upstream: s.upstream}
	if s.guard, err = egress.New(gc); err != nil {
		s.audit.Close()
		return err
	}
	if s.operator, err = egress.NewOperator(gc); err != nil {
		s.audit.Close()
		return err
	}
	s.reg = prometheus.NewRegistry()
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.registerSigningMetrics()
	if err := s.appr.build(); err != nil {
		s.audit.Close()
		return err
	}
	return nil
}

// Close stops the started components in reverse order, waits (bounded) for open requests,
// tunnels and serve loops, and closes the audit log. It is idempotent.
func (s *Sidecar) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	started := s.started
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	var errs []error
	for i := len(started) - 1; i >= 0; i-- {
		if err := started[i].close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("close %s: %w", started[i].name(), err))
		}
	}
	s.wg.Wait()
	if s.audit != nil {
		if err := s.audit.Close(); err != nil {
			// Run's caller does not see Close's error: say it (unsigned checkpoints, say).
			s.log.WithField("error", err.Error()).Error("audit log closed with an error")
			errs = append(errs, err)
		}
		// The log sealed its tail at Close: ship it and the closing marker.
		if err := s.ship.finish(); err != nil {
			// The sidecar's last word on what the store will miss: say it (Run's caller
			// does not see Close's error).
			s.log.WithField("error", err.Error()).Error("audit shipping at shutdown failed: the chain stays open in the store")
			errs = append(errs, err)
		}
	}
	if err := s.closeAuditSigner(ctx); err != nil {
		errs = append(errs, fmt.Errorf("close audit signer: %w", err))
	}
	return errors.Join(errs...)
}

// Ready is closed once every component has started.
func (s *Sidecar) Ready() <-chan struct{} { return s.ready }

// goServe runs a listener's serve loop; an unexpected end is reported to Run.
func (s *Sidecar) goServe(name string, serve func() error) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		err := serve()
		if err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			select {
			case s.errs <- fmt.Errorf("%s listener: %w", name, err):
			default: // Run already has an error to return
			}
		}
	}()
}
