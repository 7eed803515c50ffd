package policy

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
)

// This file compiles the egress rules of one decoded document: it checks each field on its
// own (host globs, CIDRs, ports, methods, path patterns, inject templates) and builds the
// matchers Decide uses. Checks that need the whole policy (secret references, extends) are in
// validate.go and extends.go.

// rule is a compiled egress rule. It is immutable once built.
type rule struct {
	spec    Rule   // as written, with defaults applied and hosts normalised
	origin  string // name of the policy that wrote the rule
	hosts   []hostPattern
	hostIdx []int // hostIdx[i] is the index in the file of hosts[i], for error positions
	cidrs   []netip.Prefix
	cidrIdx []int // cidrIdx[i] is the index in the file of cidrs[i]
	ports   []int // sorted, each once
	tcp     bool
	http    []httpMatch
	secrets []string // names the inject entries use, sorted, each once
	grant   string   // the grant ID of a rule WithGrants added, "" for a written rule
}

// httpMatch is one compiled L7 rule.
type httpMatch struct {
	methods []string      // upper case; nil means every method
	paths   []pathPattern // nil means every path
}

// defaultPorts are the ports of a protocol: http rule that names none.
var defaultPorts = []int{80, 443}

// knownMethods are the methods an L7 rule may name (RFC 9110 §9, and PATCH, RFC 5789).
var knownMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"}

var (
	ruleNameRE   = nameMatcher{max: 63, inner: "._-", upper: true}
	policyNameRE = nameMatcher{max: 253, inner: ".-"}
	headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
)

// reservedHeaders frame the request or the connection; injecting them would let a policy
// break HTTP itself (RFC 9110 §7.6.1, RFC 9112 §6).
var reservedHeaders = []string{"host", "content-length", "transfer-encoding", "connection",
	"upgrade", "te", "trailer", "keep-alive", "proxy-connection"}

// errorf records a compile or validate error on a field path of the file being loaded. An
// error related to a field that already failed to decode is dropped as noise.
func (d *decoder) errorf(path, format string, args ...any) {
	for _, f := range d.failed {
		if related(f, path) {
			return
		}
	}
	p := d.at(path)
	d.errs = append(d.errs, &LoadError{File: d.file, Line: p.line, Col: p.col, Field: path,
		Message: fmt.Sprintf(format, args...), Err: ErrInvalidPolicy})
}

// errorAtf is errorf for an error about field that is best pointed at by the position of
// another field, posPath (a rule's host entry, say, for an error about the whole rule).
func (d *decoder) errorAtf(field, posPath, format string, args ...any) {
	n := len(d.errs)
	d.errorf(field, format, args...)
	if len(d.errs) > n {
		p := d.at(posPath)
		d.errs[n].Line, d.errs[n].Col = p.line, p.col
	}
}

// compileRules compiles spec.egress of a document written by policy origin.
func compileRules(d *decoder, rules []Rule, origin string) []*rule {
	return compileRulesAt(d, rules, origin, "spec.egress")
}

// compileRulesAt compiles a list of rules at field path base.
func compileRulesAt(d *decoder, rules []Rule, origin, base string) []*rule {
	out := make([]*rule, 0, len(rules))
	first := make(map[string]int, len(rules))
	for i, r := range rules {
		path := joinIndex(base, i)
		if j, dup := first[r.Name]; dup && r.Name != "" {
			d.errorf(path+".name", "duplicate rule name %q (first at %s); rule names must be unique", r.Name, joinIndex(base, j))
		} else {
			first[r.Name] = i
		}
		out = append(out, compileRule(d, r, path, origin))
	}
	return out
}

// compileRule compiles one rule; path is its field path ("spec.egress[2]").
func compileRule(d *decoder, r Rule, path, origin string) *rule {
	cr := &rule{origin: origin}
	switch {
	case r.Name == "":
		d.errorf(path+".name", "required; every rule needs a name, e.g. name: github-api")
	case !ruleNameRE.MatchString(r.Name):
		d.errorf(path+".name", "invalid rule name %q; use letters, digits, \".\", \"_\" and \"-\" (at most 63)", r.Name)
	}
	switch r.Protocol {
	case "":
		r.Protocol = ProtocolHTTP
	case ProtocolHTTP, ProtocolTCP:
	default:
		d.errorf(path+".protocol", "unknown protocol %q; use \"http\" or \"tcp\"", r.Protocol)
	}
	cr.tcp = r.Protocol == ProtocolTCP
	if len(r.Hosts) == 0 && len(r.CIDRs) == 0 {
		d.errorf(path, "rule %q names no destination; add hosts (names) or cidrs (address ranges)", r.Name)
	}
	r.Hosts, cr.hosts, cr.hostIdx = compileHosts(d, r.Hosts, path+".hosts")
	cr.cidrs, cr.cidrIdx = compileCIDRs(d, r.CIDRs, path+".cidrs")
	r.Ports = compilePorts(d, r, path)
	cr.ports = r.Ports
	cr.http = compileHTTP(d, r, path)
	r.HTTP = slices.Clone(r.HTTP)
	for i, m := range r.HTTP {
		r.HTTP[i].Methods = slices.Clone(m.Methods)
		for j, meth := range m.Methods {
			r.HTTP[i].Methods[j] = strings.ToUpper(meth)
		}
	}
	cr.secrets = compileInject(d, r, path)
	compileMissingSNI(d, r, path)
	cr.spec = r
	return cr
}

// compileHosts compiles a rule's hosts; it returns their normalised text, their patterns and
// the index in the file of each.
func compileHosts(d *decoder, hosts []string, path string) ([]string, []hostPattern, []int) {
	var norm []string
	var pats []hostPattern
	var idx []int
	for i, h := range hosts {
		p, msg := parseHostPattern(h)
		if msg != "" {
			d.errorf(joinIndex(path, i), "%s", msg)
			continue
		}
		if slices.Contains(pats, p) {
			d.errorf(joinIndex(path, i), "host %q is listed twice; remove one", h)
			continue
		}
		norm, pats, idx = append(norm, p.String()), append(pats, p), append(idx, i)
	}
	return norm, pats, idx
}

// compileCIDRs compiles a rule's cidrs; it returns them and the index in the file of each.
func compileCIDRs(d *decoder, cidrs []string, path string) ([]netip.Prefix, []int) {
	var out []netip.Prefix
	var idx []int
	for i, s := range cidrs {
		p, msg := parseCIDR(s)
		if msg != "" {
			d.errorf(joinIndex(path, i), "%s", msg)
			continue
		}
		out, idx = append(out, p), append(idx, i)
	}
	return out, idx
}

// parseCIDR parses one CIDR in canonical form, or says what is wrong and the fix.
func parseCIDR(s string) (netip.Prefix, string) {
	if !strings.Contains(s, "/") {
		if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
			a = a.Unmap()
			return netip.Prefix{}, fmt.Sprintf("a CIDR needs a prefix length; use %q", netip.PrefixFrom(a, a.BitLen()).String())
		}
		return netip.Prefix{}, fmt.Sprintf("invalid CIDR %q; use an address range such as \"10.20.0.0/16\"", s)
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Sprintf("invalid CIDR %q; use an address range such as \"10.20.0.0/16\"", s)
	}
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		v4 := netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96).Masked()
		return netip.Prefix{}, fmt.Sprintf("write IPv4-mapped ranges in IPv4 form; use %q", v4.String())
	}
	if p != p.Masked() {
		return netip.Prefix{}, fmt.Sprintf("%q has bits set past the prefix length; use %q", s, p.Masked().String())
	}
	return p, ""
}

// compilePorts checks a rule's ports and applies the default; the result is sorted.
func compilePorts(d *decoder, r Rule, path string) []int {
	if len(r.Ports) == 0 {
		if r.Protocol == ProtocolTCP {
			d.errorf(path+".ports", "required for protocol: tcp; name the ports, e.g. ports: [5432]")
			return nil
		}
		return slices.Clone(defaultPorts)
	}
	var ports []int
	for i, p := range r.Ports {
		switch {
		case p < 1 || p > 65535:
			d.errorf(joinIndex(path+".ports", i), "port %d is out of range; use 1-65535", p)
		case slices.Contains(ports, p):
			d.errorf(joinIndex(path+".ports", i), "port %d is listed twice; remove one", p)
		default:
			ports = append(ports, p)
		}
	}
	slices.Sort(ports)
	return ports
}

// compileHTTP compiles a rule's L7 rules.
func compileHTTP(d *decoder, r Rule, path string) []httpMatch {
	if len(r.HTTP) > 0 && r.Protocol == ProtocolTCP {
		d.errorf(path+".http", "protocol: tcp rules are not proxied, so http rules cannot apply; remove http or use protocol: http")
		return nil
	}
	out := make([]httpMatch, 0, len(r.HTTP))
	for i, m := range r.HTTP {
		mpath := joinIndex(path+".http", i)
		var hm httpMatch
		for j, meth := range m.Methods {
			up, msg := checkMethod(meth)
			switch {
			case msg != "":
				d.errorf(joinIndex(mpath+".methods", j), "%s", msg)
			case slices.Contains(hm.methods, up):
				d.errorf(joinIndex(mpath+".methods", j), "method %s is listed twice; remove one", up)
			default:
				hm.methods = append(hm.methods, up)
			}
		}
		for j, p := range m.Paths {
			pp, msg := parsePathPattern(p)
			if msg != "" {
				d.errorf(joinIndex(mpath+".paths", j), "%s", msg)
				continue
			}
			hm.paths = append(hm.paths, pp)
		}
		out = append(out, hm)
	}
	return out
}

// checkMethod upper-cases a method name and checks it is one an L7 rule may name.
func checkMethod(m string) (string, string) {
	up := strings.ToUpper(m)
	switch {
	case slices.Contains(knownMethods, up):
		return up, ""
	case up == "CONNECT":
		return "", "CONNECT is decided at connection level; list the methods used inside the tunnel"
	case up == "*" || up == "ANY":
		return "", "leave methods out to allow every method"
	}
	if s := suggest(up, knownMethods); s != "" {
		return "", fmt.Sprintf("unknown method %q; did you mean %q?", m, s)
	}
	return "", fmt.Sprintf("unknown method %q; use one of %s", m, strings.Join(knownMethods, ", "))
}

// compileInject checks a rule's inject entries and returns the secret names they use.
func compileInject(d *decoder, r Rule, path string) []string {
	if len(r.Inject) > 0 && r.Protocol == ProtocolTCP {
		d.errorf(path+".inject", "protocol: tcp rules are not proxied, so nothing can be injected; remove inject or use protocol: http")
		return nil
	}
	var names, headers []string
	for i, in := range r.Inject {
		ipath := joinIndex(path+".inject", i)
		h := strings.ToLower(in.Header)
		switch {
		case in.Header == "":
			d.errorf(ipath+".header", "required; name the header, e.g. header: Authorization")
		case !headerNameRE.MatchString(in.Header):
			d.errorf(ipath+".header", "invalid header name %q", in.Header)
		case slices.Contains(reservedHeaders, h):
			d.errorf(ipath+".header", "header %s frames the request and cannot be injected", in.Header)
		case slices.Contains(headers, h):
			d.errorf(ipath+".header", "header %s is injected twice; keep one", in.Header)
		}
		headers = append(headers, h)
		names = append(names, compileValue(d, in.Value, ipath+".value")...)
	}
	compilePlaceholderIn(d, r, path)
	slices.Sort(names)
	return slices.Compact(names)
}

// compileMissingSNI checks a rule's allowMissingSNI: it only means something for a rule
// whose tunnels are passed through by name.
func compileMissingSNI(d *decoder, r Rule, path string) {
	if !r.AllowMissingSNI {
		return
	}
	field := path + ".allowMissingSNI"
	switch {
	case r.Protocol == ProtocolTCP:
		d.errorf(field, "protocol: tcp rules are not proxied, so no TLS server name is checked; remove allowMissingSNI")
	case len(r.HTTP) > 0 || len(r.Inject) > 0:
		d.errorf(field, "rule %q is TLS-intercepted (http or inject), so the proxy terminates TLS itself; remove allowMissingSNI", r.Name)
	case len(r.Hosts) == 0:
		d.errorf(field, "rule %q names only cidrs: a tunnel to an IP address needs no server name; remove allowMissingSNI", r.Name)
	}
}

// PlaceholderLocations are the values of Rule.PlaceholderIn.
var PlaceholderLocations = []string{"header", "query", "body"}

// compilePlaceholderIn checks a rule's placeholderIn and allowCleartext.
func compilePlaceholderIn(d *decoder, r Rule, path string) {
	if len(r.Inject) == 0 {
		if len(r.PlaceholderIn) > 0 {
			d.errorf(path+".placeholderIn", "placeholderIn needs inject: placeholders are swapped only for the secrets the rule injects")
		}
		if r.AllowCleartext {
			d.errorf(path+".allowCleartext", "allowCleartext needs inject; remove it")
		}
		return
	}
	var seen []string
	for i, loc := range r.PlaceholderIn {
		lpath := joinIndex(path+".placeholderIn", i)
		switch {
		case !slices.Contains(PlaceholderLocations, loc):
			d.errorf(lpath, "unknown location %q; use one of header, query, body", loc)
		case slices.Contains(seen, loc):
			d.errorf(lpath, "location %q is listed twice; keep one", loc)
		}
		seen = append(seen, loc)
	}
}

// compileValue checks one inject value and returns the secret names it uses.
func compileValue(d *decoder, v, path string) []string {
	if v == "" {
		d.errorf(path, `required; e.g. value: "Bearer {{ secret \"token\" }}"`)
		return nil
	}
	if strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }) {
		d.errorf(path, "a header value cannot hold control characters such as a newline")
		return nil
	}
	parts, msg := parseTemplate(v)
	if msg != "" {
		d.errorf(path, "%s", msg)
		return nil
	}
	var names []string
	for _, p := range parts {
		if p.secret != "" {
			names = append(names, p.secret)
		}
	}
	return names
}

// nameMatcher checks a name of 1..max letters and digits with the inner characters allowed
// only between them (not first or last). It replaces regular expressions whose bounded
// repetition ({0,251}) compiled into large programs at every process start.
type nameMatcher struct {
	max   int
	inner string // punctuation allowed inside the name
	upper bool   // upper-case letters allowed
}

// MatchString reports whether s is such a name.
func (m nameMatcher) MatchString(s string) bool {
	if len(s) == 0 || len(s) > m.max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case m.upper && c >= 'A' && c <= 'Z':
		case strings.IndexByte(m.inner, c) >= 0 && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}
