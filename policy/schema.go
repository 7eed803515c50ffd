package policy

import "time"

// This file is the v1 policy schema. docs/policy.md's reference is written from these doc
// comments: every field says its YAML key, its zero value and what it means. The loader
// (decode.go) maps YAML onto these structs strictly, by the `yaml` tags below.

// The only apiVersion and kind this package reads.
const (
	APIVersion = "airlock/v1"
	Kind       = "EgressPolicy"
)

// Document is one policy file as written.
type Document struct {
	// APIVersion must be "airlock/v1". Required.
	APIVersion string `yaml:"apiVersion"`
	// Kind must be "EgressPolicy". Required.
	Kind string `yaml:"kind"`
	// Metadata names the policy. Required.
	Metadata Metadata `yaml:"metadata"`
	// Spec is what the policy allows. Absent means nothing: no egress at all.
	Spec Spec `yaml:"spec"`
}

// Metadata identifies a policy.
type Metadata struct {
	// Name is the policy name shown in audit events and errors: lower-case letters, digits,
	// "-" and ".", starting and ending with a letter or digit. Required.
	Name string `yaml:"name"`
}

// Spec is the body of a policy.
type Spec struct {
	// Extends lists parent policies: a built-in profile name (offline, repo-read, repo-write,
	// deployment) or a file path relative to this file ("./base.yaml"). Empty means no parent.
	// A child only narrows its parents; see the extends rules on Load.
	Extends []string `yaml:"extends"`
	// Mode is "enforce" (deny what no rule allows) or "report" (allow everything, record what
	// enforce would deny). Empty means "enforce".
	Mode Mode `yaml:"mode"`
	// DNS configures the DNS filter. Zero means the defaults described on DNSConfig.
	DNS DNSConfig `yaml:"dns"`
	// Egress is the ordered list of rules; the first rule that allows a request wins. Empty
	// means no egress (or, in a policy with extends, the union of the parents' rules).
	Egress []Rule `yaml:"egress"`
	// Secrets maps a secret name, as used in inject templates and llm apiKey, to its source.
	// Nil means none. A child's secrets override its parents' secrets of the same name.
	Secrets map[string]Secret `yaml:"secrets"`
	// LLM configures the local model endpoint. Zero means no providers and no models.
	LLM LLMConfig `yaml:"llm"`
	// Report configures what a report-mode policy records. Zero means nothing extra. It is
	// the policy's own: a child does not inherit it.
	Report ReportConfig `yaml:"report"`
	// Approval lets a request to a host no rule names be held while the operator is asked
	// (see ApprovalConfig). Nil means no asking: a miss is denied at once.
	Approval *ApprovalConfig `yaml:"approval"`
	// Usage meters the sandbox's compute, memory and network, prices them and caps them
	// (see UsageConfig). Zero means metering every 10s, no prices, no caps.
	Usage UsageConfig `yaml:"usage"`
}

// ReportConfig configures report mode, for recording the traffic `airlock policy learn`
// turns into a candidate policy.
type ReportConfig struct {
	// InterceptAll makes every proxied connection TLS-intercepted, so that the audit trail
	// holds the method and path of every HTTPS request, not only the destination of its
	// tunnel. The sandbox must trust the sidecar CA (`airlock ca export`); a client that
	// pins certificates fails. Requires mode: report. False means a tunnel is intercepted
	// only where a rule needs to see its requests.
	InterceptAll bool `yaml:"interceptAll"`
}

// DNSConfig configures the DNS filter.
type DNSConfig struct {
	// Upstreams are the resolvers the DNS filter forwards allowed queries to (and the proxy's
	// resolver), each an IP address and port ("10.96.0.10:53", "[2001:db8::53]:53"), used
	// when the sidecar's --upstream-dns flag is not set (the flag wins, as the proxy's
	// resolver does). Empty means /etc/resolv.conf.
	Upstreams []string `yaml:"upstreams"`
	// OnDeny is the answer to a denied query: "refused" or "nxdomain". Empty means "refused".
	OnDeny string `yaml:"onDeny"`
	// MinTTL is the lowest TTL handed to the sandbox and kept in the kernel allow map, as a
	// Go duration ("5s"). Zero means the upstream TTL is used as is.
	MinTTL time.Duration `yaml:"minTTL"`
	// MaxIPsPerName caps how many addresses of one name enter the kernel allow map. Zero
	// means the default, DefaultMaxIPsPerName.
	MaxIPsPerName int `yaml:"maxIPsPerName"`
	// Grace is added to an answer's TTL (after MinTTL) to give the kernel allow map entry's
	// lifetime, so a client that connects just as its cached answer expires still gets
	// through; a Go duration ("10s"). Zero means DefaultGrace.
	Grace time.Duration `yaml:"grace"`
	// MaxLabelLength caps, for a name allowed only by a wildcard host ("*.example.com"), the
	// length in bytes of each label left of the wildcard's domain; longer names are denied
	// (a DNS-exfiltration brake: data leaves in long labels). 1-63. Zero means
	// DefaultMaxLabelLength.
	MaxLabelLength int `yaml:"maxLabelLength"`
	// WildcardQueriesPerMinute caps, per wildcard host, how many different names under it the
	// sandbox may look up per minute (a DNS-exfiltration brake: data leaves as ever new
	// names); names looked up again while their answer is live are not counted. Zero means
	// DefaultWildcardQueriesPerMinute.
	WildcardQueriesPerMinute int `yaml:"wildcardQueriesPerMinute"`
}

// The values Policy.DNS reports for DNSConfig fields that are not set.
const (
	DefaultMaxIPsPerName            = 64
	DefaultGrace                    = 10 * time.Second
	DefaultMaxLabelLength           = 48
	DefaultWildcardQueriesPerMinute = 120
)

// The values of DNSConfig.OnDeny.
const (
	OnDenyRefused  = "refused"
	OnDenyNXDomain = "nxdomain"
)

// Protocol says how a rule's traffic flows.
type Protocol string

// The protocols of a rule.
const (
	// ProtocolHTTP is HTTP or HTTPS through the proxy, where L7 rules and injection apply.
	// It is the default.
	ProtocolHTTP Protocol = "http"
	// ProtocolTCP is raw TCP allowed in the kernel and not proxied; L7 rules and injection
	// cannot apply to it.
	ProtocolTCP Protocol = "tcp"
)

// Rule is one egress rule.
type Rule struct {
	// Name identifies the rule in decisions, audit events and errors; unique within a policy.
	// Letters, digits, ".", "_" and "-". Required.
	Name string `yaml:"name"`
	// Hosts are DNS names: "api.github.com" matches that name only; "*.example.com" matches
	// every subdomain of example.com at any depth, not example.com itself. Matching ignores
	// case and one trailing dot and compares IDNs in punycode. IP addresses go in CIDRs.
	Hosts []string `yaml:"hosts"`
	// CIDRs are address ranges ("10.20.0.0/16", "2001:db8::/32"); a rule names internal
	// addresses this way. They match IP-literal hosts and the addresses a name resolves to.
	// A rule needs Hosts, CIDRs or both.
	CIDRs []string `yaml:"cidrs"`
	// Ports are the destination ports the rule allows, 1-65535. Empty means [80, 443] for
	// protocol http (80 for http://, 443 for https://); protocol tcp requires ports.
	Ports []int `yaml:"ports"`
	// Protocol is "http" or "tcp". Empty means "http".
	Protocol Protocol `yaml:"protocol"`
	// HTTP lists L7 rules; a request is allowed when any entry matches it. Empty means every
	// method and path. Entries require TLS interception for https.
	HTTP []HTTPMatch `yaml:"http"`
	// Inject lists headers the proxy sets on requests this rule allows. Empty means none.
	// Entries require TLS interception for https.
	Inject []Injection `yaml:"inject"`
	// PlaceholderIn lists where the placeholders of the secrets this rule injects are swapped
	// for their values: "header", "query", "body". Empty means ["header"]. A placeholder
	// anywhere else (another location, another rule's destination) denies the request.
	// Requires inject.
	PlaceholderIn []string `yaml:"placeholderIn"`
	// AllowCleartext lets this rule inject secrets into cleartext http:// requests. False
	// means such requests are denied (credential_cleartext). Requires inject.
	AllowCleartext bool `yaml:"allowCleartext"`
	// AllowMissingSNI lets a passthrough (not intercepted) tunnel to one of this rule's hosts
	// carry a TLS ClientHello that names no server (no SNI extension). False means such a
	// tunnel is refused (sni_missing): without a name the upstream picks a site the proxy
	// never checked (its default, or one chosen from a Host header inside TLS). Tunnels to
	// an IP literal allowed by cidrs never need it (RFC 6066 forbids SNI for addresses).
	// Only for protocol http rules without http or inject entries.
	AllowMissingSNI bool `yaml:"allowMissingSNI"`
}

// HTTPMatch is one L7 rule: it matches a request whose method and path both match.
type HTTPMatch struct {
	// Methods are HTTP methods (GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS, TRACE), any
	// case. Empty means every method.
	Methods []string `yaml:"methods"`
	// Paths are path patterns matched against the decoded, dot-segment-free path without
	// query: "*" matches within one segment, a "**" segment matches any number of segments
	// including none ("/repos/acme/**" matches /repos/acme and everything below). Each starts
	// with "/". Empty means every path.
	Paths []string `yaml:"paths"`
}

// Injection is one header the proxy sets on an allowed request, replacing any value the
// client sent.
type Injection struct {
	// Header is the header name, e.g. "Authorization". Required.
	Header string `yaml:"header"`
	// Value is the header value; `{{ secret "name" }}` is replaced by the secret's value, e.g.
	// `Bearer {{ secret "github-token" }}`. Required.
	Value string `yaml:"value"`
}

// Secret is where a secret comes from: exactly one of Vault, Env and File.
type Secret struct {
	// Vault reads the secret from Vault. Nil means another source.
	Vault *VaultRef `yaml:"vault"`
	// Env reads the secret from this environment variable of the sidecar (development).
	// Empty means another source.
	Env string `yaml:"env"`
	// File reads the secret from this file of the sidecar (development); trailing newlines
	// are the credential broker's concern. Empty means another source.
	File string `yaml:"file"`
}

// VaultRef locates a secret in Vault.
type VaultRef struct {
	// Path is the Vault path, e.g. "secret/data/ci/github" or "aws/creds/agent". Required.
	Path string `yaml:"path"`
	// Field picks one key of the secret's data. Empty means the whole secret (a dynamic
	// secret's credentials, or a KV secret with a single key).
	Field string `yaml:"field"`
	// Version pins a KV v2 version. Zero means the latest.
	Version int `yaml:"version"`
	// Dynamic marks a leased secret (database, cloud credentials): renewed while in use and
	// revoked at shutdown. False means a static KV secret.
	Dynamic bool `yaml:"dynamic"`
}

// LLMConfig configures the local model endpoint.
type LLMConfig struct {
	// Providers maps a provider name to its upstream API. Nil means none.
	Providers map[string]Provider `yaml:"providers"`
	// Models are the models the sandbox may call, by the name it uses. Empty means none.
	Models []Model `yaml:"models"`
	// Budget caps usage. Zero fields mean no cap.
	Budget Budget `yaml:"budget"`
	// LogPrompts puts the prompt text of each call, redacted (provider keys and strings that
	// look like credentials removed) and truncated, in its audit event. False means prompts
	// are never logged.
	LogPrompts bool `yaml:"logPrompts"`
}

// Provider is one model provider.
type Provider struct {
	// BaseURL is the provider API's http(s) URL, e.g. "https://api.openai.com". Required.
	BaseURL string `yaml:"baseURL"`
	// APIKey names the secret holding the provider key. Zero means no key is sent.
	APIKey SecretRef `yaml:"apiKey"`
	// Type is the API the provider speaks: "openai" (Bearer key, OpenAI endpoints),
	// "anthropic" (x-api-key, the Messages API) or "openai-compatible" (OpenAI endpoints on
	// another server such as vLLM or Ollama). Empty means "anthropic" for a provider named
	// anthropic, "openai" for one named openai, else "openai-compatible".
	Type ProviderType `yaml:"type"`
	// AllowInternal lets the base URL's name resolve to internal addresses (loopback,
	// private, link-local ...), for a self-hosted model server. False means only public
	// addresses are dialled, unless the base URL names an IP address itself.
	AllowInternal bool `yaml:"allowInternal"`
	// ConnectTimeout bounds resolving and connecting to the provider ("10s"). Zero means 10s.
	ConnectTimeout time.Duration `yaml:"connectTimeout"`
	// FirstByteTimeout bounds the wait for the response headers and, for a stream, its first
	// event ("60s"). Zero means 60s.
	FirstByteTimeout time.Duration `yaml:"firstByteTimeout"`
	// ChunkTimeout bounds the silence between two reads of a response body ("60s"). Zero
	// means 60s.
	ChunkTimeout time.Duration `yaml:"chunkTimeout"`
	// Retries is how many times a call is retried, with backoff, when the provider answers
	// 429 or 5xx or cannot be reached, always before the first byte reached the caller. Zero
	// means 2; -1 means none.
	Retries int `yaml:"retries"`
}

// ProviderType is the API a provider speaks.
type ProviderType string

// The provider types.
const (
	ProviderOpenAI           ProviderType = "openai"
	ProviderAnthropic        ProviderType = "anthropic"
	ProviderOpenAICompatible ProviderType = "openai-compatible"
)

// SecretRef refers to a secret of spec.secrets by name.
type SecretRef struct {
	// Secret is the name of a secret in spec.secrets. Empty means none.
	Secret string `yaml:"secret"`
}

// Model is one model the sandbox may call.
type Model struct {
	// Name is the model name the sandbox sends. Required, unique.
	Name string `yaml:"name"`
	// Provider is a key of llm.providers. Required.
	Provider string `yaml:"provider"`
	// UpstreamModel is the model name sent to the provider. Empty means Name.
	UpstreamModel string `yaml:"upstreamModel"`
	// Price is what the model costs, for the usd budget. Zero means free (not counted).
	Price Price `yaml:"price"`
	// MaxOutputTokens caps the output tokens of one call: a larger max_tokens is refused and
	// a call without one is sent with this cap. Zero means DefaultMaxOutputTokens.
	MaxOutputTokens int64 `yaml:"maxOutputTokens"`
	// Fallbacks are models of llm.models, by name, tried in order when this model's provider
	// keeps answering 429 or 5xx (or cannot be reached) before the first byte; each must
	// speak the same API. Empty means none.
	Fallbacks []string `yaml:"fallbacks"`
}

// DefaultMaxOutputTokens is the output cap of a model without maxOutputTokens.
const DefaultMaxOutputTokens = 4096

// Price is a model's price in US dollars per million tokens.
type Price struct {
	// InputPerMTok is the price of a million prompt tokens. Zero means free.
	InputPerMTok float64 `yaml:"inputPerMTok"`
	// OutputPerMTok is the price of a million completion tokens. Zero means free.
	OutputPerMTok float64 `yaml:"outputPerMTok"`
}

// Budget caps the sandbox's model usage. Every zero field means "no cap".
type Budget struct {
	// Tokens caps the total tokens (prompt and completion) over the sandbox's life.
	Tokens int64 `yaml:"tokens"`
	// USD caps the total cost in US dollars, from the models' prices.
	USD float64 `yaml:"usd"`
	// RequestsPerMinute caps model calls per minute.
	RequestsPerMinute int `yaml:"requestsPerMinute"`
	// TokensPerMinute caps tokens per minute.
	TokensPerMinute int64 `yaml:"tokensPerMinute"`
}
