package sidecar

import (
	"context"
	"sync"

	"github.com/airlock-dev/airlock/proxy"
)

// proxyComponent is the explicit proxy and, with kernel enforcement, the transparent
// listener.
type proxyComponent struct {
	s *Sidecar

	proxy *proxy.Proxy

	closeOnce sync.Once
}

func (p *proxyComponent) name() string { return "proxy" }

// start builds the proxy with every other listener in its own-address list and serves the
// explicit listener and, when the kernel records original destinations, the transparent one.
func (p *proxyComponent) start(context.Context) error {
	s, lim := p.s, p.s.cfg.Limits
	var err error
	p.proxy, err = proxy.New(proxy.Config{
		Policy:      s.appr.stage,
		Approvals:   s.appr.stage,
		Guard:       s.guard,
		Audit:       s.audit,
		Logger:      s.log,
		Registerer:  s.reg,
		CA:          s.ca,
		NameAddrs:   s.dns.nameAddrs(),
		OriginalDst: s.kernel.originalDst(),
		Identities:  s.identitiesOf(true),
		Injector:    s.creds.injector(),
		// Origins through an inspecting upstream proxy are re-signed by its CA.
		UpstreamRoots: s.upstream.Roots(),

		MaxTunnels:            lim.MaxTunnels,
		DialTimeout:           lim.DialTimeout,
		IdleTimeout:           lim.IdleTimeout,
		ResponseHeaderTimeout: lim.ResponseHeaderTimeout,
		MaxHeaderBytes:        lim.MaxHeaderBytes,
		MaxRequestBodyBytes:   lim.MaxRequestBodyBytes,
		DisableHTTP1FastPath:  lim.HTTP1FastPath == "off",
	})
	if err != nil {
		return err
	}
	px, ln := p.proxy, s.sockets.proxy
	s.goServe("proxy", func() error { return px.Serve(ln) })
	if tl := s.kernel.transparentLn; s.kernel.enf != nil && tl != nil {
		s.goServe("transparent", func() error { return px.ServeTransparent(tl) })
	} else if s.cfg.TransparentAddr != Off {
		s.log.WithField("transparent", s.cfg.TransparentAddr).Info("transparent listener not started: it needs kernel enforcement (--cgroup) to learn original destinations")
	}
	return nil
}

// close stops accepting and waits (bounded by ctx) for open requests and tunnels.
func (p *proxyComponent) close(ctx context.Context) error {
	p.closeOnce.Do(func() {
		if p.proxy == nil {
			return
		}
		if err := p.proxy.Shutdown(ctx); err != nil {
			p.s.log.WithError(err).Warn("proxy shutdown did not finish cleanly")
		}
	})
	return nil
}
