package sidecar

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"

	"github.com/airlock-dev/airlock/dnsfilter"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/proxy"
)

// The DNS filter tells the proxy's transparent listener which addresses it handed out for a
// name.
var _ proxy.NameAddrs = (*dnsfilter.Filter)(nil)

// dnsComponent is the DNS filter of a running sidecar, serving on the sockets opened first.
type dnsComponent struct {
	s *Sidecar

	filter *dnsfilter.Filter // nil with --dns-addr off

	// mu guards gen and applied: the generation and policy last applied (PolicyChanged), and
	// serialises applies.
	mu      sync.Mutex
	gen     uint64
	applied *policy.Policy

	closeOnce sync.Once
}

func (d *dnsComponent) name() string { return "DNS filter" }

// start builds the filter on the open sockets, feeding the kernel allow map (if any) before
// each answer, and starts answering.
//
// The upstreams follow the proxy resolver's order (newResolver): --upstream-dns, else the
// policy's dns.upstreams (read per query, so a reload applies), else /etc/resolv.conf.
func (d *dnsComponent) start(context.Context) error {
	s := d.s
	if s.sockets.dnsLn == nil {
		return nil
	}
	upstreams, err := d.upstreams()
	if err != nil {
		return err
	}
	var llm netip.AddrPort
	if s.cfg.LLMAddr != Off {
		if ap, err := netip.ParseAddrPort(s.cfg.LLMAddr); err == nil {
			llm = ap
		} else {
			s.log.WithField("llm_addr", s.cfg.LLMAddr).Warn("DNS filter: --llm-addr is not ip:port; " +
				strings.TrimSuffix(dnsfilter.LLMName, ".") + " will not resolve")
		}
	}
	f, err := dnsfilter.New(dnsfilter.Config{
		Policy:     s.appr.stage,
		Approvals:  s.appr.stage,
		Upstreams:  upstreams,
		AllowMap:   s.kernel.allowMap(),
		Answers:    s.answers,
		LLMAddr:    llm,
		Audit:      s.audit,
		Logger:     s.log,
		Registerer: s.reg,
		Brake:      s.brake,
		Identities: s.identitiesOf(false),
	})
	if err != nil {
		return fmt.Errorf("dns filter: %v", err)
	}
	d.filter, d.applied = f, s.appr.stage.Current()
	pc, ln := s.sockets.dnsPC, s.sockets.dnsLn
	s.goServe("dns", func() error { return f.Serve(pc, ln) })
	s.log.WithField("dns", ln.Addr().String()).Info("DNS filter listening (UDP and TCP)")
	return nil
}

// upstreams parses --upstream-dns; empty means the policy's (per query).
func (d *dnsComponent) upstreams() ([]netip.AddrPort, error) {
	flag := d.s.cfg.UpstreamDNS
	if flag == "" {
		return nil, nil
	}
	out, err := policy.ParseUpstreams(strings.Split(flag, ","))
	if err != nil {
		return nil, fmt.Errorf("--upstream-dns %q: want ip:port: %v", flag, err)
	}
	own := addrOf(d.s.sockets.dnsLn)
	for _, ap := range out {
		if ap == own {
			return nil, fmt.Errorf("--upstream-dns %s is the DNS filter's own --dns-addr; name the resolver it should forward to", ap)
		}
	}
	return out, nil
}

// nameAddrs is the proxy's NameAddrs: the filter, or nil when --dns-addr is off. (A nil
// *dnsfilter.Filter in the interface would not be nil; this returns a true nil.)
func (d *dnsComponent) nameAddrs() proxy.NameAddrs {
	if d.filter == nil {
		return nil
	}
	return d.filter
}

// applyPolicy narrows the allow-map entries of earlier answers to a reloaded policy, unless
// a newer generation was applied already.
func (d *dnsComponent) applyPolicy(gen uint64, p *policy.Policy) {
	if d.filter == nil {
		return
	}
	log := d.s.log
	d.mu.Lock()
	defer d.mu.Unlock()
	if gen <= d.gen {
		log.WithField("generation", gen).Warn("DNS filter: refused a policy older than the one applied")
		return
	}
	d.gen, d.applied = gen, p
	n, err := d.filter.PolicyChanged(p)
	if err != nil {
		log.WithField("error", err.Error()).Error("DNS filter: allow-map entries not narrowed after policy reload; they expire with their TTL")
		return
	}
	if n > 0 {
		log.WithField("entries", n).Info("DNS filter: revoked what the reloaded policy no longer allows")
	}
}

// appliedPolicy returns the policy last applied and its generation.
func (d *dnsComponent) appliedPolicy() (uint64, *policy.Policy) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.gen, d.applied
}

// close stops the filter (which closes its sockets).
func (d *dnsComponent) close(ctx context.Context) error {
	d.closeOnce.Do(func() {
		if d.filter == nil {
			return
		}
		if err := d.filter.Close(ctx); err != nil {
			d.s.log.WithError(fmt.Errorf("dns filter: %w", err)).Warn("DNS filter shutdown did not finish cleanly")
		}
	})
	return nil
}
