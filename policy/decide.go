package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Decide is the pure decision function: request facts in, decision out. It never fails and
// never does I/O; a request it cannot make sense of is denied with ReasonInvalidHost or
// ReasonInvalidPath.
//
// The stages: normalise the host and apply the scheme's default port; find the rules naming
// the host (by hosts for a name, by cidrs for an IP literal); keep those allowing the port;
// keep the protocol: http ones. For a connection-level request (Method "" or "CONNECT") the
// first of those allows, and Intercept says whether any of them needs to see requests. For a
// request with a method, the first rule in file order whose L7 rules allow the method and the
// path wins. Each stage that leaves no rule denies, naming the closest rule. In report mode a
// deny becomes Allow with WouldDeny set, keeping Reason, Rule and Detail.
func (p *Policy) Decide(r Request) Decision {
	return p.applyMode(p.decide(r))
}

// applyMode turns a deny into a reported allow in report mode, and with
// spec.report.interceptAll asks for every connection to be intercepted.
func (p *Policy) applyMode(d Decision) Decision {
	d.Identity = p.identity
	if p.mode == ModeReport && d.Verdict == Deny {
		d.Verdict, d.WouldDeny = Allow, true
	}
	if p.interceptAll {
		d.Intercept = true
	}
	return d
}

// deny fills in a deny decision.
func deny(d Decision, reason Reason, rule *rule, format string, args ...any) Decision {
	d.Verdict, d.Reason, d.Detail = Deny, reason, fmt.Sprintf(format, args...)
	if rule != nil {
		d.Rule = rule.spec.Name
	}
	return d
}

// allow fills in an allow decision by rule r.
func allow(d Decision, r *rule, detail string) Decision {
	d.Verdict, d.Reason, d.Rule, d.Detail = Allow, ReasonRuleMatched, r.spec.Name, detail
	d.Grant = r.grant
	d.Secrets = slices.Clone(r.secrets)
	d.Intercept = r.intercept()
	return d
}

func (p *Policy) decide(r Request) Decision {
	port, msg := requestPort(r)
	h, err := NormalizeHost(r.Host)
	d := Decision{Host: h.Name, Port: port}
	switch {
	case err != nil:
		return deny(d, ReasonInvalidHost, nil, "%v", err)
	case msg != "":
		return deny(d, ReasonPortNotAllowed, nil, "%s", msg)
	case len(p.rules) == 0:
		return deny(d, ReasonOffline, nil, "policy %q allows no egress", p.name)
	}
	byHost := p.rulesForHost(h)
	if len(byHost) == 0 {
		if h.IsIP() {
			return deny(d, ReasonNoRule, nil, "address %s is not in any egress rule's cidrs", h.Name)
		}
		return deny(d, ReasonNoRule, nil, "host %q is not named by any egress rule", h.Name)
	}
	byPort := filterRules(byHost, func(x *rule) bool { return x.allowsPort(port) })
	if len(byPort) == 0 {
		return deny(d, ReasonPortNotAllowed, byHost[0], "rule %q allows ports %s, not %d",
			byHost[0].spec.Name, formatPorts(byHost[0].ports), port)
	}
	proxied := filterRules(byPort, func(x *rule) bool { return !x.tcp })
	if len(proxied) == 0 {
		return deny(d, ReasonTCPOnly, byPort[0], "rule %q allows port %d as raw TCP only (protocol: tcp); it is not proxied",
			byPort[0].spec.Name, port)
	}
	method := strings.ToUpper(r.Method)
	if method == "" || method == "CONNECT" {
		d = allow(d, proxied[0], fmt.Sprintf("rule %q allows connections to %s port %d", proxied[0].spec.Name, h.Name, port))
		d.Intercept = slices.ContainsFunc(proxied, (*rule).intercept)
		d.AllowMissingSNI = slices.ContainsFunc(proxied, func(x *rule) bool { return x.spec.AllowMissingSNI })
		return d
	}
	override := r.OverrideHeader
	if override == "" {
		override = queryOverride(r.Path)
	}
	return decideRequest(d, proxied, method, r.Path, override)
}

// requestPort applies the scheme's default port.
func requestPort(r Request) (int, string) {
	switch {
	case r.Port < 0 || r.Port > 65535:
		return r.Port, fmt.Sprintf("port %d is not a valid port", r.Port)
	case r.Port != 0:
		return r.Port, ""
	}
	switch strings.ToLower(r.Scheme) {
	case "https":
		return 443, ""
	case "http", "":
		return 80, ""
	}
	return 0, fmt.Sprintf("scheme %q has no default port; give the port", r.Scheme)
}

// decideRequest picks the first rule whose L7 rules allow method and the raw path. The path
// is normalised only when a rule restricts paths, so a path that cannot be normalised is
// still allowed by a rule that allows every path. override names a method-override header or
// parameter the request carries ("" for none): an L7 entry that limits methods never allows
// such a request.
func decideRequest(d Decision, rules []*rule, method, rawPath, override string) Decision {
	if !isToken(method) {
		return deny(d, ReasonMethodNotAllowed, rules[0], "method %q is not a valid HTTP method", method)
	}
	pc := pathCheck{raw: rawPath}
	var overrideRule *rule
	for _, r := range rules {
		if len(r.http) == 0 {
			return allow(d, r, "rule "+strconv.Quote(r.spec.Name)+" allows every request to "+d.Host)
		}
		for _, m := range r.http {
			if m.methods != nil && !slices.Contains(m.methods, method) {
				continue
			}
			if m.methods != nil && override != "" {
				overrideRule = cmpOr(overrideRule, r)
				continue
			}
			if m.paths == nil {
				d.LimitsMethods = m.methods != nil
				return allow(d, r, "rule "+strconv.Quote(r.spec.Name)+" allows "+method+" on every path")
			}
			if pp, ok := pc.match(r, m.paths); ok {
				d.LimitsMethods = m.methods != nil
				// Concatenated rather than formatted (once per allowed request): the same text.
				return allow(d, r, "rule "+strconv.Quote(r.spec.Name)+" allows "+method+" "+pc.path+" (pattern "+strconv.Quote(pp.raw)+")")
			}
		}
	}
	switch {
	case overrideRule != nil:
		return deny(d, ReasonMethodOverride, overrideRule,
			"rule %q limits methods and the request carries method override %q (a server may run another method than %s)",
			overrideRule.spec.Name, override, method)
	case pc.invalidRule != nil:
		return deny(d, pc.code, pc.invalidRule, "path %q is invalid: %s", rawPath, pc.reason)
	case pc.pathRule != nil:
		return deny(d, ReasonPathNotAllowed, pc.pathRule, "rule %q does not allow %s %s", pc.pathRule.spec.Name, method, pc.path)
	}
	return deny(d, ReasonMethodNotAllowed, rules[0], "rule %q does not allow method %s", rules[0].spec.Name, method)
}

// pathCheck normalises a request's path once, when the first rule that limits paths needs
// it, and remembers the closest rules for the denial.
type pathCheck struct {
	raw         string
	done        bool
	path        string
	reason      string // why the path is refused, "" when it normalised
	code        Reason // ReasonInvalidPath or ReasonAmbiguousPath, with reason
	invalidRule *rule  // the first rule that limits paths when the path is refused
	pathRule    *rule  // the first rule whose patterns did not match
}

// match reports the pattern of paths that matches the request's path, for rule r.
func (pc *pathCheck) match(r *rule, paths []pathPattern) (pathPattern, bool) {
	if !pc.done {
		pc.path, pc.reason, pc.code = normalizePath(pc.raw)
		pc.done = true
	}
	if pc.reason != "" {
		pc.invalidRule = cmpOr(pc.invalidRule, r)
		return pathPattern{}, false
	}
	for _, pp := range paths {
		if pp.match(pc.path) {
			return pp, true
		}
	}
	pc.pathRule = cmpOr(pc.pathRule, r)
	return pathPattern{}, false
}

// cmpOr returns a if it is set, else b.
func cmpOr(a, b *rule) *rule {
	if a != nil {
		return a
	}
	return b
}

// isToken reports whether s is an HTTP token (RFC 9110 §5.6.2), as a method must be.
func isToken(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return r > 0x7e || r <= ' ' || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r)
	})
}

// formatPorts prints ports as "[80, 443]".
func formatPorts(ports []int) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(p)
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// rulesForHost returns the rules naming h: by hosts for a name, by cidrs for an IP literal.
func (p *Policy) rulesForHost(h Host) []*rule {
	if h.IsIP() {
		a := h.Addr.Unmap()
		return filterRules(p.rules, func(r *rule) bool { return r.containsAddr(a) })
	}
	return filterRules(p.rules, func(r *rule) bool {
		return slices.ContainsFunc(r.hosts, func(hp hostPattern) bool { return hp.match(h.Name) })
	})
}

// containsAddr reports whether one of the rule's cidrs contains the (unmapped) address.
func (r *rule) containsAddr(a netip.Addr) bool {
	return slices.ContainsFunc(r.cidrs, func(c netip.Prefix) bool { return c.Contains(a) })
}

// allowsPort reports whether the rule allows port.
func (r *rule) allowsPort(port int) bool {
	_, ok := slices.BinarySearch(r.ports, port)
	return ok
}

// intercept reports whether requests under the rule must be seen: it has L7 rules or
// injects headers.
func (r *rule) intercept() bool { return len(r.http) > 0 || len(r.spec.Inject) > 0 }

// CheckAddr decides whether a connection to addr, which host (already allowed by Decide)
// resolved to, may be dialled on port: Allow for a public address (ReasonPublicAddress, no
// rule), or for any address a rule names by CIDR with that port (ReasonRuleMatched); Deny
// with ReasonInternalAddress otherwise. An IPv4-mapped addr is unmapped first. Report mode
// applies as in Decide.
func (p *Policy) CheckAddr(host string, port int, addr netip.Addr) Decision {
	return p.applyMode(p.checkAddr(host, port, addr))
}

// describeClass names a's class for a Detail; an embedding IPv6 form also names the IPv4
// address it carries and that address's class, so the reader sees what it would reach.
func describeClass(a netip.Addr) string {
	class := ClassifyAddr(a)
	if class != AddrEmbedded {
		return class.String()
	}
	if v4, ok := embeddedIPv4(a); ok {
		return fmt.Sprintf("an IPv6 form embedding %s (%s)", v4, ClassifyAddr(v4))
	}
	return class.String()
}

func (p *Policy) checkAddr(host string, port int, addr netip.Addr) Decision {
	d := Decision{Host: host, Port: port}
	if h, err := NormalizeHost(host); err == nil {
		d.Host = h.Name
	}
	if !addr.IsValid() {
		return deny(d, ReasonInternalAddress, nil, "no address to check for %q", host)
	}
	a := addr.WithZone("").Unmap()
	if ClassifyAddr(a) == AddrPublic {
		d.Verdict, d.Reason, d.Detail = Allow, ReasonPublicAddress, fmt.Sprintf("address %s of %q is public", a, host)
		return d
	}
	class := describeClass(a)
	var near *rule
	for _, r := range p.rules {
		if !r.containsAddr(a) {
			continue
		}
		if r.allowsPort(port) {
			return allow(d, r, fmt.Sprintf("address %s of %q is %s and in rule %q's cidrs", a, host, class, r.spec.Name))
		}
		near = cmpOr(near, r)
	}
	if near != nil {
		return deny(d, ReasonInternalAddress, near, "address %s of %q is %s; rule %q names it but allows ports %s, not %d",
			a, host, class, near.spec.Name, formatPorts(near.ports), port)
	}
	return deny(d, ReasonInternalAddress, nil, "address %s of %q is %s; name it in a rule's cidrs to allow it", a, host, class)
}
