package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlock-dev/airlock/dnsfilter"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/proxy"
)

// This file wires the DNS filter (package dnsfilter) into airlock run: its listeners on
// --dns-addr, its upstreams, the LLM name and, with kernel enforcement, the allow map.

// dnsListener is the DNS filter of a running sidecar and its sockets.
type dnsListener struct {
	filter *dnsfilter.Filter
	pc     net.PacketConn
	ln     net.Listener
}

// listenDNS opens the DNS filter's UDP and TCP sockets on --dns-addr, before anything else
// needs their address (the kernel programs allow it, the proxy never dials it); nil (and no
// error) when --dns-addr is off.
func listenDNS(cfg *runConfig) (*dnsListener, error) {
	if cfg.dnsAddr == "off" {
		return nil, nil
	}
	pc, ln, err := dnsfilter.Listen(cfg.dnsAddr)
	if err != nil {
		return nil, failf("--dns-addr: %v", err)
	}
	return &dnsListener{pc: pc, ln: ln}, nil
}

// start builds the filter on the open sockets. allow is the kernel allow map the filter
// feeds before each answer, nil without kernel enforcement.
//
// The upstreams follow the proxy resolver's order (newResolver): --upstream-dns, else the
// policy's dns.upstreams (read per query, so a reload applies), else /etc/resolv.conf.
func (d *dnsListener) start(cfg *runConfig, s *sidecar, reg prometheus.Registerer, allow dnsfilter.AllowMap) error {
	if d == nil {
		return nil
	}
	var upstreams []netip.AddrPort
	if cfg.upstreamDNS != "" {
		var err error
		if upstreams, err = policy.ParseUpstreams(strings.Split(cfg.upstreamDNS, ",")); err != nil {
			return failf("--upstream-dns %q: want ip:port: %v", cfg.upstreamDNS, err)
		}
		for _, ap := range upstreams {
			if slices.Contains(d.addrs(), ap) {
				return failf("--upstream-dns %s is the DNS filter's own --dns-addr; name the resolver it should forward to", ap)
			}
		}
	}
	var llm netip.AddrPort
	if cfg.llmAddr != "off" {
		if ap, err := netip.ParseAddrPort(cfg.llmAddr); err == nil {
			llm = ap
		} else {
			s.log.WithField("llm_addr", cfg.llmAddr).Warn("DNS filter: --llm-addr is not ip:port; " +
				strings.TrimSuffix(dnsfilter.LLMName, ".") + " will not resolve")
		}
	}
	f, err := dnsfilter.New(dnsfilter.Config{
		Policy:     s.store,
		Upstreams:  upstreams,
		AllowMap:   allow,
		LLMAddr:    llm,
		Audit:      s.audit,
		Logger:     s.log,
		Registerer: reg,
	})
	if err != nil {
		return failf("dns filter: %v", err)
	}
	d.filter = f
	return nil
}

// nameAddrs is the proxy's NameAddrs: the filter, or nil when --dns-addr is off. (A nil
// *dnsfilter.Filter in the interface would not be nil; this returns a true nil.)
func (d *dnsListener) nameAddrs() proxy.NameAddrs {
	if d == nil || d.filter == nil {
		return nil
	}
	return d.filter
}

// addrs returns the listener's address, for the proxy's SelfAddrs.
func (d *dnsListener) addrs() []netip.AddrPort {
	if d == nil {
		return nil
	}
	return listenerAddrs(d.ln)
}

// serve starts answering queries; an unexpected end is reported like any listener's.
func (d *dnsListener) serve(s *sidecar) {
	if d == nil || d.filter == nil {
		return
	}
	s.goServe("dns", func() error { return d.filter.Serve(d.pc, d.ln) })
	s.log.WithField("dns", d.ln.Addr().String()).Info("DNS filter listening (UDP and TCP)")
}

// close stops the filter and closes its sockets (also when it never served).
func (d *dnsListener) close(ctx context.Context) error {
	if d == nil {
		return nil
	}
	var err error
	if d.filter != nil {
		if err = d.filter.Close(ctx); err != nil {
			err = fmt.Errorf("dns filter: %w", err)
		}
	}
	// Serve owns the sockets once called and closes them; closing them again is harmless.
	d.pc.Close()
	d.ln.Close()
	return err
}

// validateDNS checks --dns-addr before anything starts: "off", or ip:port.
func validateDNS(c *runConfig) error {
	if c.dnsAddr == "off" {
		return nil
	}
	if _, err := netip.ParseAddrPort(c.dnsAddr); err != nil {
		return failf("--dns-addr %q: want ip:port (e.g. 127.0.0.1:5353, or 0.0.0.0:53 in a pod) or off", c.dnsAddr)
	}
	return nil
}

// policyChanged narrows the allow-map entries of earlier answers to a reloaded policy.
func (d *dnsListener) policyChanged(s *sidecar, p *policy.Policy) {
	if d == nil || d.filter == nil {
		return
	}
	n, err := d.filter.PolicyChanged(p)
	if err != nil {
		s.log.WithField("error", err.Error()).Error("DNS filter: allow-map entries not narrowed after policy reload; they expire with their TTL")
		return
	}
	if n > 0 {
		s.log.WithField("entries", n).Info("DNS filter: revoked what the reloaded policy no longer allows")
	}
}
