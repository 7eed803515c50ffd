package policy

// This file is the package's public contract. Other packages (proxy, cmd/airlock, and later
// dnsfilter, llmproxy, credentials) are written against it. Extend it; do not rename.

import (
	"net/netip"
)

// Mode says what a policy does with a request it would deny.
type Mode string

const (
	// ModeEnforce denies what no rule allows. It is the default.
	ModeEnforce Mode = "enforce"
	// ModeReport allows everything but records, on each decision, what enforce would deny.
	ModeReport Mode = "report"
)

// Verdict is the outcome of a decision.
type Verdict int

const (
	// Deny means the request must not reach upstream.
	Deny Verdict = iota
	// Allow means the request may go upstream.
	Allow
)

// String returns "allow" or "deny".
func (v Verdict) String() string {
	if v == Allow {
		return "allow"
	}
	return "deny"
}

// Request holds the facts a decision is made from. All fields are as the client sent them;
// Decide normalises them (host to punycode, path decoded and dot-segments removed).
type Request struct {
	// Scheme is "http" or "https". Empty means "https" when Port is 443, else "http". It
	// chooses the default port when Port is 0.
	Scheme string
	// Host is a DNS name or an IP literal (IPv6 may be bracketed). Alternate IPv4 spellings
	// (2130706433, 0x7f000001, 0177.0.0.1, 127.1) are parsed canonically, never passed through.
	Host string
	// Port is the destination port; 0 means the scheme's default (80 for http, 443 for https).
	Port int
	// Method is the HTTP method. Empty means a connection-level decision (CONNECT, or a
	// transparent connection before its first request): L7 rules are not consulted, and the
	// decision is Allow when some rule allows this host and port for some request.
	Method string
	// Path is the raw request path (may be percent-encoded, may hold a query string, which is
	// ignored except for method-override parameters, see MethodOverride). Empty with a
	// non-empty Method means "/".
	Path string
	// OverrideHeader names a method-override header the request carries (see
	// IsMethodOverrideHeader), "" when it carries none. Where the matching L7 rule limits
	// methods, such a request is denied with ReasonMethodOverride: servers that honour the
	// header run its method, not Method. Decide finds override query parameters in Path
	// itself.
	OverrideHeader string
}

// Decision is the result of Decide or CheckAddr. It never carries a secret value.
type Decision struct {
	// Verdict is Allow or Deny. In report mode a request enforce would deny gets Allow with
	// WouldDeny set.
	Verdict Verdict
	// WouldDeny is true in report mode when enforce mode would have denied the request.
	WouldDeny bool
	// Rule names the rule that allowed the request, or for a deny the rule that came closest
	// (matched host but not port, say); empty when no rule was involved.
	Rule string
	// Reason is the reason code.
	Reason Reason
	// Detail is a human-readable sentence, e.g. `host "evil.com" is not named by any egress rule`.
	Detail string
	// Secrets lists the names (never values) of secrets the allowing rule injects, sorted.
	Secrets []string
	// Intercept is true when the request (or for a connection-level decision, any request on
	// the connection) needs TLS interception: a rule matching host and port has L7 http rules
	// or inject entries, or the policy is in report mode with spec.report.interceptAll.
	Intercept bool
	// LimitsMethods is true when the L7 entry that allowed the request lists methods: a
	// method override anywhere the server reads one (a form body's _method, which Decide
	// cannot see) must then be refused too (FormMethodOverride).
	LimitsMethods bool
	// AllowMissingSNI is true, on a connection-level decision, when a rule matching host and
	// port sets allowMissingSNI: a passthrough tunnel may carry a ClientHello without a
	// server name.
	AllowMissingSNI bool
	// Host is the normalised host the decision was made on (punycode, lower case, no trailing
	// dot; an IP literal in canonical form).
	Host string
	// Port is the port the decision was made on (defaults applied).
	Port int
	// Grant is the ID of the operator's grant that allowed the request (its rule is
	// "grant:ID", see WithGrants); empty when a written rule did, or on a deny.
	Grant string
	// Ask is the ID of the open ask about this request, on a denial with
	// ReasonApprovalPending or ReasonApprovalDenied (set by package approval); else empty.
	Ask string
	// Identity is the spec.identities name of the policy that decided (Policy.IdentityName);
	// empty for the sandbox's own.
	Identity string
}

// Allowed reports whether the verdict is Allow.
func (d Decision) Allowed() bool { return d.Verdict == Allow }

// Host is a normalised destination host.
type Host struct {
	// Name is the lower-case punycode name without trailing dot; for an IP literal, the
	// canonical text form of Addr.
	Name string
	// Addr is valid when the host was an IP literal (in any accepted spelling).
	Addr netip.Addr
}

// IsIP reports whether the host was an IP literal.
func (h Host) IsIP() bool { return h.Addr.IsValid() }

// AddrClass classifies a destination address for the SSRF guard.
type AddrClass int

// The address classes. Every class but Public is denied unless a rule names it by CIDR.
const (
	AddrPublic      AddrClass = iota // everything else, including 198.18.0.0/15
	AddrLoopback                     // 127.0.0.0/8, ::1
	AddrPrivate                      // RFC 1918
	AddrCGNAT                        // 100.64.0.0/10
	AddrLinkLocal                    // 169.254.0.0/16 (metadata), fe80::/10
	AddrULA                          // fc00::/7
	AddrUnspecified                  // 0.0.0.0/8, ::
	AddrMulticast                    // 224.0.0.0/4, ff00::/8
	AddrBroadcast                    // 255.255.255.255
	AddrReserved                     // 240.0.0.0/4 and other never-routable ranges
	AddrEmbedded                     // IPv6 forms embedding an IPv4 address that is itself not public (::ffff:0:0/96, 64:ff9b::/96, 2002::/16, Teredo 2001::/32)
)
