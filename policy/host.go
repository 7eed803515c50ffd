package policy

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
	"golang.org/x/net/publicsuffix"
)

// hostProfile is the IDNA profile names are normalised with: UTS #46 mapping for lookup
// (case folding, width mapping), STD3 ASCII rules (letters, digits, hyphen), the Bidi rule
// and punycode validation, non-transitional (as browsers do). CheckHyphens is off because
// real names such as "r3---sn-abc.googlevideo.com" have "--" in positions 3-4; leading and
// trailing hyphens are rejected by checkLabels instead. A *idna.Profile is immutable.
var hostProfile = idna.New(idna.MapForLookup(), idna.BidiRule(), idna.CheckHyphens(false),
	idna.Transitional(false))

// hostError is the error NormalizeHost returns; it unwraps to ErrInvalidHost.
type hostError struct{ host, reason string }

// Error says which input is invalid and why.
func (e *hostError) Error() string { return fmt.Sprintf("invalid host %q: %s", e.host, e.reason) }

// Unwrap returns the sentinel error.
func (e *hostError) Unwrap() error { return ErrInvalidHost }

// maxHostLen bounds the input NormalizeHost looks at; a DNS name has at most 253 bytes, and
// IDN input maps to at most a few times that.
const maxHostLen = 1024

// NormalizeHost lower-cases, strips one trailing dot, converts IDN to punycode, strips IPv6
// brackets and canonically parses IP literals (including alternate IPv4 spellings).
//
// IPv4 literals are parsed as inet_aton(3) and the WHATWG URL standard do: "2130706433",
// "0x7f000001", "0177.0.0.1", "127.1" and "127.0.1" all mean 127.0.0.1. A name whose last
// label is a number (decimal, or 0x-hex) must parse that way, or it is rejected: resolvers
// and URL parsers disagree about such names, so none is passed through. IPv6 zone IDs are
// rejected. Errors wrap ErrInvalidHost.
func NormalizeHost(h string) (Host, error) {
	host, reason := normalizeHost(h)
	if reason != "" {
		return Host{}, &hostError{host: h, reason: reason}
	}
	return host, nil
}

// normalizeHost is NormalizeHost returning a reason instead of an error.
func normalizeHost(h string) (Host, string) {
	if host, ok := plainHost(h); ok {
		return host, ""
	}
	return normalizeHostIDNA(h)
}

// plainHost is normalizeHost's fast path, taken by nearly every name a proxy or resolver
// sees (the profile of a CONNECT tunnel showed the IDNA mapping at about 4% of its CPU):
// ASCII letters, digits, hyphens and dots, one optional trailing dot, no punycode label,
// labels of 1-63 bytes that neither start nor end with a hyphen, at most 253 bytes, not
// ending in a number unless the whole is a dotted-decimal IPv4 address (the Host of every
// request to an address: through IDNA it cost ≈ 2.5% of a plain HTTP request). For those, UTS #46 mapping for lookup is lower-casing and every IDNA
// check passes, so the result is what normalizeHostIDNA returns. Anything else reports
// false and takes the full path. TestPlainHost and FuzzPlainHost hold the two paths to the
// same result.
func plainHost(h string) (Host, bool) {
	n := strings.TrimSuffix(h, ".")
	if n == "" || len(n) > 253 {
		return Host{}, false
	}
	upper := false
	for i := 0; i < len(n); i++ {
		switch c := n[i]; {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '.':
		case c >= 'A' && c <= 'Z':
			upper = true
		default:
			return Host{}, false
		}
	}
	if upper {
		n = strings.ToLower(n)
	}
	if strings.Contains(n, "xn--") || checkLabels(n) != "" {
		return Host{}, false
	}
	if endsInNumber(n) {
		// An IPv4 address in the canonical dotted-decimal form (the Host of most requests to
		// an address) is its own name; any other form (hex, octal, fewer parts, an invalid
		// one) takes the full path, which parses or refuses it.
		if a, err := netip.ParseAddr(n); err == nil && a.Is4() {
			return Host{Name: n, Addr: a}, true
		}
		return Host{}, false
	}
	return Host{Name: n}, true
}

// normalizeHostIDNA is normalizeHost for every input: IP literals, IDNA mapping and
// validation, label checks.
func normalizeHostIDNA(h string) (Host, string) {
	switch {
	case h == "":
		return Host{}, "empty host"
	case len(h) > maxHostLen:
		return Host{}, "too long"
	case strings.HasPrefix(h, "["):
		if !strings.HasSuffix(h, "]") {
			return Host{}, "unclosed \"[\""
		}
		return parseIPv6(h[1 : len(h)-1])
	case strings.Contains(h, ":"):
		if strings.Count(h, ":") == 1 {
			return Host{}, "contains a port; pass the port separately"
		}
		return parseIPv6(h)
	}
	if !utf8.ValidString(h) {
		return Host{}, "not valid UTF-8"
	}
	name, err := hostProfile.ToASCII(h)
	if err != nil {
		return Host{}, "not a valid host name (" + idnaReason(err) + ")"
	}
	if strings.Contains(name, "xn--") {
		// The name must be one this function accepts as it is, or a second pass would
		// disagree with the first (UTS #46 mapping is not closed over every input).
		if again, err := hostProfile.ToASCII(name); err != nil || again != name {
			return Host{}, "not a valid host name (its punycode form does not validate)"
		}
	}
	name = strings.TrimSuffix(name, ".")
	if reason := checkLabels(name); reason != "" {
		return Host{}, reason
	}
	if endsInNumber(name) {
		a, ok := parseIPv4(name)
		if !ok {
			return Host{}, "the last label is a number but the name is not an IPv4 address"
		}
		return Host{Name: a.String(), Addr: a}, ""
	}
	return Host{Name: name}, ""
}

// idnaReason shortens an idna error for a message.
func idnaReason(err error) string {
	return strings.TrimPrefix(err.Error(), "idna: ")
}

// parseIPv6 parses the inside of an IPv6 literal.
func parseIPv6(s string) (Host, string) {
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		return Host{}, "not a valid IPv6 address"
	case a.Zone() != "":
		return Host{}, "IPv6 zone IDs are not allowed"
	case !a.Is6():
		return Host{}, "an IPv4 address in brackets"
	}
	return Host{Name: a.String(), Addr: a}, ""
}

// checkLabels validates the ASCII form of a name: 1-253 bytes, labels of 1-63 bytes that
// neither start nor end with a hyphen (RFC 1123 §2.1).
func checkLabels(name string) string {
	if name == "" {
		return "empty host"
	}
	if len(name) > 253 {
		return "longer than 253 bytes"
	}
	for label := range strings.SplitSeq(name, ".") {
		switch {
		case label == "":
			return "empty label"
		case len(label) > 63:
			return fmt.Sprintf("label %q is longer than 63 bytes", label)
		case label[0] == '-' || label[len(label)-1] == '-':
			return fmt.Sprintf("label %q starts or ends with a hyphen", label)
		}
	}
	return ""
}

// endsInNumber reports whether the last label of name is a decimal or 0x-hex number, which
// makes the whole name an IPv4 address or nothing (WHATWG URL, "ends in a number checker").
func endsInNumber(name string) bool {
	last := name[strings.LastIndexByte(name, '.')+1:]
	if hex, ok := strings.CutPrefix(last, "0x"); ok {
		return strings.Trim(hex, "0123456789abcdef") == ""
	}
	return last != "" && strings.Trim(last, "0123456789") == ""
}

// hostPattern is one compiled entry of a rule's hosts.
type hostPattern struct {
	// wildcard marks "*.name", which matches every subdomain of name, not name itself.
	wildcard bool
	// name is the normalised name (for a wildcard, the part after "*.").
	name string
}

// String returns the pattern as written in normalised form.
func (p hostPattern) String() string {
	if p.wildcard {
		return "*." + p.name
	}
	return p.name
}

// match reports whether the normalised host name matches the pattern. The dot check keeps
// "*.example.com" from matching "evilexample.com".
func (p hostPattern) match(name string) bool {
	if !p.wildcard {
		return name == p.name
	}
	return len(name) > len(p.name)+1 && strings.HasSuffix(name, p.name) &&
		name[len(name)-len(p.name)-1] == '.'
}

// covers reports whether every name c matches is matched by p.
func (p hostPattern) covers(c hostPattern) bool {
	if !c.wildcard {
		return p.match(c.name)
	}
	return p.wildcard && (p.name == c.name || p.match(c.name))
}

// parseHostPattern compiles one entry of a rule's hosts, or says what is wrong and the fix.
func parseHostPattern(s string) (hostPattern, string) {
	if msg := hostPatternShape(s); msg != "" {
		return hostPattern{}, msg
	}
	rest, wildcard := strings.CutPrefix(s, "*.")
	h, reason := normalizeHost(rest)
	switch {
	case reason != "":
		return hostPattern{}, fmt.Sprintf("invalid host %q: %s", s, reason)
	case h.IsIP() && wildcard:
		return hostPattern{}, fmt.Sprintf("%q: wildcards apply to names, not addresses; put the range in cidrs", s)
	case h.IsIP():
		return hostPattern{}, fmt.Sprintf("IP addresses go in cidrs, not hosts; use cidrs: [%q]",
			netip.PrefixFrom(h.Addr.Unmap(), h.Addr.Unmap().BitLen()).String())
	}
	if wildcard {
		if suffix, _ := publicsuffix.PublicSuffix(h.Name); suffix == h.Name {
			return hostPattern{}, fmt.Sprintf("%q would match every domain under the public suffix %q; "+
				"name a registrable domain, e.g. %q", s, h.Name, "*.example."+h.Name)
		}
	}
	return hostPattern{wildcard: wildcard, name: h.Name}, ""
}

// hostPatternShape catches the common mistakes in a hosts entry before it is parsed, so the
// message can name the fix: URLs, paths, ports, stray wildcards.
func hostPatternShape(s string) string {
	switch {
	case s == "":
		return `empty host; name one, e.g. "example.com"`
	case strings.Contains(s, "://"):
		if u, err := url.Parse(s); err == nil && u.Hostname() != "" {
			return fmt.Sprintf("hosts take a bare name, not a URL; use %q", u.Hostname())
		}
		return "hosts take a bare name, not a URL"
	case strings.Contains(s, "/"):
		return fmt.Sprintf("hosts take a bare name, not a path; use %q", s[:strings.IndexByte(s, '/')])
	case s == "*" || s == "*.":
		return `"*" would allow every host; name the hosts, or use "*.example.com" for subdomains`
	case strings.HasPrefix(s, "."):
		return fmt.Sprintf("a leading dot is not a wildcard; use %q for subdomains and %q for the domain itself",
			"*"+s, s[1:])
	case strings.Contains(strings.TrimPrefix(s, "*."), "*"):
		rest := strings.TrimLeft(s[strings.LastIndexByte(s, '*')+1:], ".")
		if rest == "" {
			return `"*" is allowed only as the whole first label, e.g. "*.example.com"`
		}
		return fmt.Sprintf(`"*" is allowed only as the whole first label; use %q`, "*."+rest)
	}
	if host, port, err := net.SplitHostPort(s); err == nil && port != "" && !strings.Contains(host, ":") {
		return fmt.Sprintf("put the port in ports, not in hosts; use %q and ports: [%s]", host, port)
	}
	return ""
}
