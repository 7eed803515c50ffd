package policy

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// DefaultDNSPort is the port of an upstream resolver given without one.
const DefaultDNSPort = 53

// upstreamError is an ErrInvalidUpstream with the message (and fix) policy validation prints.
type upstreamError struct{ msg string }

func (e *upstreamError) Error() string { return e.msg }
func (e *upstreamError) Unwrap() error { return ErrInvalidUpstream }

// ParseUpstream parses one DNS resolver address, the form of spec.dns.upstreams and
// --upstream-dns: "ip:port", "[ipv6]:port", or a bare IP, which means port 53
// (DefaultDNSPort). The address must be an IP literal without a zone (a name would need a
// resolver of its own) and the port 1-65535. Errors wrap ErrInvalidUpstream and say the fix.
func ParseUpstream(s string) (netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		if a, perr := netip.ParseAddr(strings.Trim(s, "[]")); perr == nil && a.Zone() == "" {
			return netip.AddrPortFrom(a, DefaultDNSPort), nil
		}
		return netip.AddrPort{}, &upstreamError{fmt.Sprintf("invalid resolver %q; use an address and port such as \"10.96.0.10:53\"", s)}
	}
	a, err := netip.ParseAddr(host)
	if err != nil || a.Zone() != "" {
		return netip.AddrPort{}, &upstreamError{fmt.Sprintf("resolver %q must be an IP address (a name would need a resolver); e.g. \"10.96.0.10:53\"", host)}
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return netip.AddrPort{}, &upstreamError{fmt.Sprintf("invalid port %q; use 1-65535, usually 53", port)}
	}
	return netip.AddrPortFrom(a, uint16(n)), nil
}

// ParseUpstreams parses a list of resolvers with ParseUpstream, in order, ignoring spaces
// around each (a comma-separated flag split at its commas). The error names the first bad
// one and wraps ErrInvalidUpstream.
func ParseUpstreams(ss []string) ([]netip.AddrPort, error) {
	out := make([]netip.AddrPort, 0, len(ss))
	for _, s := range ss {
		ap, err := ParseUpstream(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("parse DNS upstream: %w", err)
		}
		out = append(out, ap)
	}
	return out, nil
}

// checkUpstream checks one spec.dns.upstreams entry: ParseUpstream's rules, and a policy
// file names the port explicitly. It returns the message, or "" when u is valid.
func checkUpstream(u string) string {
	if _, _, err := net.SplitHostPort(u); err != nil {
		if a, perr := netip.ParseAddr(strings.Trim(u, "[]")); perr == nil {
			return fmt.Sprintf("add the port; use %q", netip.AddrPortFrom(a, DefaultDNSPort).String())
		}
	}
	if _, err := ParseUpstream(u); err != nil {
		return err.Error()
	}
	return ""
}
