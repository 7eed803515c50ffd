// Package policy owns airlock's egress policy: the v1 YAML schema, strict loading with
// file:line:col errors, host, port, method and path matching, the built-in profiles, profile
// inheritance (extends), the address classifier of the SSRF guard, and hot reload.
//
// The decision is a pure function: Policy.Decide takes request facts and returns a Decision
// with a verdict, the rule involved and a reason from a fixed set; it never returns an error
// and never does I/O. Policy.CheckAddr applies the same policy to an address a name resolved
// to. A Policy is immutable once loaded; Store swaps whole policies atomically.
//
// The package does not resolve names, dial, read secrets or log: proxy, dnsfilter, llmproxy,
// credentials and cmd/airlock do that, and may all import this package. It imports nothing of
// ours.
//
// # Loading
//
// Load runs version check (apiVersion, kind) → strict decode (unknown fields, wrong types,
// duplicate keys, aliases, a second document) → compile (each field on its own) → extends →
// validate (references between fields), and returns every error found, each a *LoadError
// that names the file, line, column and field path and, where there is one, the fix.
//
// # Matching
//
// Hosts are compared lower case, without one trailing dot, IDNs in punycode (UTS #46 lookup
// mapping, STD3 rules, Bidi rule). "*.example.com" matches every subdomain at any depth, not
// example.com itself; a wildcard over a public suffix ("*.com", "*.co.uk", "*.github.io") is
// rejected. IP literals, in any inet_aton spelling, are matched against cidrs only. Paths are
// matched after NormalizePath; in a pattern "*" matches within one segment and a "**" segment
// matches any number of segments, none included. Methods compare upper case. An empty
// methods or paths list matches everything.
//
// # Inheritance
//
// spec.extends names parents: built-in profiles (offline, repo-read, repo-write, deployment)
// or files relative to the child. A child only narrows:
//
//   - Rules. The effective rules are the child's own egress rules if it has any, else the
//     union of its parents' effective rules, in extends order. Every child rule must be
//     covered by the parents: for each of its hosts and each of its ports, one parent rule
//     must (a) cover the host: an exact host by an equal host or a wildcard matching it, a
//     wildcard "*.a.example.com" by an equal wildcard or a wider one ("*.example.com"); (b)
//     allow the port; (c) have the same protocol (raw TCP bypasses the proxy, and http is not
//     raw TCP); and (d) if that parent rule has L7 http rules, the child rule must have http
//     rules too and each of its (method, path pattern) pairs must be allowed by one of the
//     parent's: the method listed there (or the parent lists none), and the path pattern
//     subsumed by one of the parent's (or the parent lists none). Subsumption is decided
//     conservatively (equal patterns, "**" absorbing segments, "*" covering a non-empty
//     segment, a glob segment matching a literal one); what cannot be shown covered is
//     rejected. Each child CIDR must lie inside a parent CIDR of a rule meeting (b)-(d).
//     Inject entries are the child's own business.
//   - Mode. A child in report mode under an enforce parent is rejected: report allows what
//     the parent denies. spec.report.interceptAll (report mode only: every connection-level
//     decision says Intercept, so the audit trail holds HTTPS methods and paths for
//     learn) is the policy's own and never inherited.
//   - Secrets. The parents' secrets are merged in extends order, then the child's override
//     those of the same name; inject templates and llm keys resolve against the merged set.
//   - DNS. Each field the child sets overrides the parents' (later parents override earlier).
//   - LLM. Providers merge like secrets. The child's models replace the parents'; when the
//     parents list models, the child may only list models among them. A budget cap a parent
//     sets is kept when the child sets none and may not be raised by the child.
//
// Extends cycles and chains deeper than 16 policies are rejected.
//
// # Reasons and shared parsing
//
// The reason catalogue (reasons.go) is the one list of reason codes airlock emits, from the
// policy and from every enforcement point (proxy, DNS filter, model API, credential broker,
// kernel events): Reason.Info gives each code's HTTP status, sentence and remedy, and
// docs/audit.md's table is generated from it. ParseUpstream and ParseUpstreams parse DNS resolver
// addresses for spec.dns.upstreams, the DNS filter and the --upstream-dns flag alike.
package policy
