package policy

import "net/netip"

// CIDRRule is one address range a policy rule names, compiled for kernel enforcement: the
// range, the TCP ports it is reachable on, and whether it is a raw TCP rule.
type CIDRRule struct {
	// Prefix is the range; an IPv4 range also covers its IPv4-mapped IPv6 form.
	Prefix netip.Prefix
	// Ports are the allowed destination ports: the rule's ports, or 80 and 443 when it names
	// none (the ports DNS-learned addresses get too).
	Ports []uint16
	// Raw marks a `protocol: tcp` rule: its connections go straight to the destination and
	// are never redirected to the transparent proxy.
	Raw bool
}

// CIDRRules lists the policy's CIDR rules for the kernel, in rule order. protocol tcp rules
// are raw TCP (never redirected); the others are reachable on their ports like DNS-learned
// addresses.
func (p *Policy) CIDRRules() []CIDRRule {
	var out []CIDRRule
	for _, r := range p.Rules() {
		if len(r.CIDRs) == 0 {
			continue
		}
		ports := r.Ports
		if len(ports) == 0 {
			ports = []int{80, 443}
		}
		p16 := make([]uint16, 0, len(ports))
		for _, port := range ports {
			p16 = append(p16, uint16(port))
		}
		for _, c := range r.CIDRs {
			pfx, err := netip.ParsePrefix(c)
			if err != nil {
				continue // the loader validated every CIDR; nothing to do with an impossible one
			}
			out = append(out, CIDRRule{Prefix: pfx, Ports: p16, Raw: r.Protocol == ProtocolTCP})
		}
	}
	return out
}
