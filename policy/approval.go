package policy

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"golang.org/x/net/publicsuffix"
)

// This file is spec.approval: asking the operator about a destination no rule names (issue
// 31). It checks the section's fields, merges it down the extends chain (a child only
// narrows), and builds the policy a grant turns into (WithGrants). The asking itself, the
// grant store and the approvers live in package approval.

// ApprovalMode says whether misses may be asked about.
type ApprovalMode string

// The approval modes.
const (
	// ApprovalAsk holds a plain miss (no_rule) and asks the operator. The default when
	// spec.approval is present.
	ApprovalAsk ApprovalMode = "ask"
	// ApprovalOff never asks: a miss is denied at once, as without spec.approval.
	ApprovalOff ApprovalMode = "off"
)

// Defaults and bounds of spec.approval's times.
const (
	DefaultApprovalHold     = 5 * time.Second
	DefaultApprovalAskTTL   = 15 * time.Minute
	DefaultApprovalMaxGrant = time.Hour
	MaxApprovalHold         = time.Minute
	MaxApprovalAskTTL       = 24 * time.Hour
	MaxApprovalMaxGrant     = 7 * 24 * time.Hour
	// DNSApprovalHoldCap caps the hold of a DNS query whatever hold says: stub resolvers
	// (glibc, Go, musl) give up after 5s, and the filter's own upstream exchange follows.
	DNSApprovalHoldCap = 2 * time.Second
	// DefaultWebhookTimeout bounds one exchange with the approval webhook.
	DefaultWebhookTimeout = 5 * time.Second
	// DefaultWebhookPoll is how often a pending ask is polled at the webhook.
	DefaultWebhookPoll = 10 * time.Second
)

// ApprovalConfig is spec.approval. Without it (nil Spec.Approval, and no parent with one) a
// miss is denied at once, exactly as before approvals existed.
type ApprovalConfig struct {
	// Mode is "ask" (hold a plain miss and ask) or "off" (never ask). Empty means "ask".
	Mode ApprovalMode `yaml:"mode"`
	// Hold is how long a request that is asked about waits for an answer before it gets 403
	// approval_pending ("5s"). DNS queries wait at most DNSApprovalHoldCap. Zero means
	// DefaultApprovalHold; at most MaxApprovalHold.
	Hold time.Duration `yaml:"hold"`
	// AskTTL is how long an ask stays open for a later answer, which serves the agent's
	// retry ("15m"); a denial also stands this long. Zero means DefaultApprovalAskTTL; at
	// least hold, at most MaxApprovalAskTTL.
	AskTTL time.Duration `yaml:"askTTL"`
	// MaxGrant is the longest duration a grant may have ("1h"). Zero means
	// DefaultApprovalMaxGrant; at most MaxApprovalMaxGrant.
	MaxGrant time.Duration `yaml:"maxGrant"`
	// SandboxGrants allows grants for the sandbox's whole life. False means grants are once
	// or for a duration up to maxGrant.
	SandboxGrants bool `yaml:"sandboxGrants"`
	// Never lists host patterns ("pastebin.com", "*.ngrok.io") that are never asked about;
	// a miss on them is denied at once. Unioned down the extends chain. Empty means none.
	Never []string `yaml:"never"`
	// Approvers lists who answers besides the operator's CLI, which always may. Zero means
	// the CLI only.
	Approvers Approvers `yaml:"approvers"`
}

// Approvers are the approvers besides the CLI.
type Approvers struct {
	// Webhook posts each ask to a receiver that answers grant, deny or pending. Nil means
	// none.
	Webhook *WebhookApprover `yaml:"webhook"`
}

// WebhookApprover is an approval webhook. Asks and answers are signed with HMAC-SHA256
// under a secret of spec.secrets (fetched through the credential broker).
type WebhookApprover struct {
	// URL is the receiver, http(s). Required.
	URL string `yaml:"url"`
	// Secret names the spec.secrets entry holding the HMAC key. Required.
	Secret string `yaml:"secret"`
	// Timeout bounds one exchange with the receiver ("5s"); an answer later than this
	// denies. Zero means DefaultWebhookTimeout.
	Timeout time.Duration `yaml:"timeout"`
	// PollInterval is how often an ask the receiver answered "pending" is asked again,
	// until askTTL ("10s"). Zero means DefaultWebhookPoll.
	PollInterval time.Duration `yaml:"pollInterval"`
}

// Approval is the effective spec.approval with defaults applied (the zero times filled in,
// Mode never empty, Never normalised), and whether any policy of the chain has the section.
func (p *Policy) Approval() (ApprovalConfig, bool) {
	if p.approval == nil {
		return ApprovalConfig{Mode: ApprovalOff}, false
	}
	c := *p.approval
	c.Never = slices.Clone(c.Never)
	if c.Approvers.Webhook != nil {
		w := *c.Approvers.Webhook
		w.Timeout = orDur(w.Timeout, DefaultWebhookTimeout)
		w.PollInterval = orDur(w.PollInterval, DefaultWebhookPoll)
		c.Approvers.Webhook = &w
	}
	return withApprovalDefaults(c), true
}

// Asks reports whether a plain miss may be asked about: spec.approval is in force with mode
// ask, and the policy enforces (report mode allows the miss anyway, and never asks).
func (p *Policy) Asks() bool {
	c, ok := p.Approval()
	return ok && c.Mode == ApprovalAsk && p.mode == ModeEnforce
}

// NeverAsk reports whether the normalised host name is under spec.approval.never.
func (p *Policy) NeverAsk(name string) bool {
	return slices.ContainsFunc(p.never, func(hp hostPattern) bool { return hp.match(name) })
}

func orDur(v, def time.Duration) time.Duration {
	if v == 0 {
		return def
	}
	return v
}

func withApprovalDefaults(c ApprovalConfig) ApprovalConfig {
	if c.Mode == "" {
		c.Mode = ApprovalAsk
	}
	c.Hold = orDur(c.Hold, DefaultApprovalHold)
	c.AskTTL = orDur(c.AskTTL, DefaultApprovalAskTTL)
	c.MaxGrant = orDur(c.MaxGrant, DefaultApprovalMaxGrant)
	return c
}

// compileApproval checks spec.approval on its own and returns the compiled never patterns.
func compileApproval(d *decoder, c *ApprovalConfig) []hostPattern {
	if c == nil {
		return nil
	}
	const path = "spec.approval"
	switch c.Mode {
	case "", ApprovalAsk, ApprovalOff:
	default:
		d.errorf(path+".mode", "unknown mode %q; use %q or %q", c.Mode, ApprovalAsk, ApprovalOff)
	}
	checkDur(d, path+".hold", c.Hold, MaxApprovalHold)
	checkDur(d, path+".askTTL", c.AskTTL, MaxApprovalAskTTL)
	checkDur(d, path+".maxGrant", c.MaxGrant, MaxApprovalMaxGrant)
	if e := withApprovalDefaults(*c); c.AskTTL != 0 && e.AskTTL < e.Hold {
		d.errorf(path+".askTTL", "%s is shorter than hold (%s); an ask must stay open at least as long as a request waits", e.AskTTL, e.Hold)
	}
	var never []hostPattern
	for i, h := range c.Never {
		hp, msg := parseNeverPattern(h)
		if msg != "" {
			d.errorf(joinIndex(path+".never", i), "%s", msg)
			continue
		}
		never = append(never, hp)
	}
	if w := c.Approvers.Webhook; w != nil {
		compileWebhook(d, *w, path+".approvers.webhook")
	}
	return never
}

// checkDur rejects a negative duration or one above max.
func checkDur(d *decoder, path string, v, max time.Duration) {
	switch {
	case v < 0:
		d.errorf(path, "must not be negative; leave it out for the default")
	case v > max:
		d.errorf(path, "%s is over the limit of %s; use at most %q", v, max, max.String())
	}
}

// parseNeverPattern compiles one entry of never: a host pattern like a rule's, except that a
// wildcard over a public suffix ("*.io") is fine here, since never only narrows.
func parseNeverPattern(s string) (hostPattern, string) {
	hp, msg := parseHostPattern(s)
	if msg == "" {
		return hp, ""
	}
	rest, wildcard := strings.CutPrefix(s, "*.")
	h, reason := normalizeHost(rest)
	if reason == "" && h.IsIP() && !wildcard {
		return hostPattern{}, fmt.Sprintf("%s is an IP address; addresses are never asked about, so never lists names only: remove it", s)
	}
	if wildcard && reason == "" && !h.IsIP() {
		if suffix, _ := publicsuffix.PublicSuffix(h.Name); suffix == h.Name {
			return hostPattern{wildcard: true, name: h.Name}, ""
		}
	}
	return hostPattern{}, msg
}

// compileWebhook checks a webhook approver's own fields; its secret is checked against the
// merged secrets in inheritApproval.
func compileWebhook(d *decoder, w WebhookApprover, path string) {
	if w.URL == "" {
		d.errorf(path+".url", "required; e.g. url: https://approvals.example.com/airlock")
	} else if u, err := url.Parse(w.URL); err != nil || (u.Scheme != "https" && u.Scheme != "http") ||
		u.Host == "" || u.User != nil || u.Fragment != "" {
		d.errorf(path+".url", "invalid URL %q; use an http(s) URL such as \"https://approvals.example.com/airlock\"", w.URL)
	}
	if w.Secret == "" {
		d.errorf(path+".secret", "required; name the spec.secrets entry holding the HMAC key")
	}
	checkDur(d, path+".timeout", w.Timeout, time.Minute)
	checkDur(d, path+".pollInterval", w.PollInterval, time.Hour)
}

// inheritApproval merges the parents' approval sections into the child's own and rejects a
// child that widens them: turning asking back on, a longer hold, askTTL or maxGrant, or
// sandbox-life grants a parent does not allow. never is the union of the chain. A child
// without approvers keeps its parents'. Parents without the section leave the child free.
func inheritApproval(d *decoder, p *Policy, own *ApprovalConfig, ownNever []hostPattern) {
	var base *ApprovalConfig
	var never []hostPattern
	for _, parent := range p.parents {
		never = append(never, parent.never...)
		if parent.approval != nil {
			base = narrowest(base, parent.approval)
		}
	}
	p.never = appendNew(never, ownNever)
	switch {
	case own == nil:
		p.approval = base
	case base == nil:
		c := *own
		p.approval = &c
	default:
		p.approval = narrowChild(d, base, own)
	}
	if p.approval != nil {
		p.approval.Never = make([]string, len(p.never))
		for i, hp := range p.never {
			p.approval.Never[i] = hp.String()
		}
		if w := p.approval.Approvers.Webhook; w != nil && w.Secret != "" {
			checkWebhookSecret(d, p, w.Secret)
		}
	}
}

// checkWebhookSecret checks that the webhook's HMAC key is defined and is never handed to
// the sandbox's traffic: a key injected into a request (or sent as a model provider's key)
// could reach the sandbox's side, which could then sign its own grants.
func checkWebhookSecret(d *decoder, p *Policy, name string) {
	const path = "spec.approval.approvers.webhook.secret"
	if _, ok := p.secrets[name]; !ok {
		d.errorf(path, "secret %q is not defined in spec.secrets", name)
		return
	}
	for _, r := range p.rules {
		if slices.Contains(r.secrets, name) {
			d.errorf(path, "secret %q is also injected by rule %q; the approval key must be used for nothing else: give the webhook a secret of its own", name, r.spec.Name)
			return
		}
	}
	for pname, pr := range p.llm.Providers {
		if pr.APIKey.Secret == name {
			d.errorf(path, "secret %q is also the API key of provider %q; the approval key must be used for nothing else: give the webhook a secret of its own", name, pname)
			return
		}
	}
}

// appendNew appends the patterns of add not in list already.
func appendNew(list, add []hostPattern) []hostPattern {
	for _, hp := range add {
		if !slices.Contains(list, hp) {
			list = append(list, hp)
		}
	}
	return list
}

// narrowest merges two parents' sections: off wins, the shorter time, sandbox grants only
// if both allow them, the first webhook.
func narrowest(a, b *ApprovalConfig) *ApprovalConfig {
	if a == nil {
		c := *b
		return &c
	}
	ea, eb := withApprovalDefaults(*a), withApprovalDefaults(*b)
	c := *a
	if ea.Mode == ApprovalOff || eb.Mode == ApprovalOff {
		c.Mode = ApprovalOff
	}
	c.Hold, c.AskTTL, c.MaxGrant = min(ea.Hold, eb.Hold), min(ea.AskTTL, eb.AskTTL), min(ea.MaxGrant, eb.MaxGrant)
	c.SandboxGrants = a.SandboxGrants && b.SandboxGrants
	if c.Approvers.Webhook == nil {
		c.Approvers = b.Approvers
	}
	return &c
}

// narrowChild applies the child's own section on the parents' merged one, reporting what
// would widen it.
func narrowChild(d *decoder, base, own *ApprovalConfig) *ApprovalConfig {
	const path = "spec.approval"
	eb := withApprovalDefaults(*base)
	c := *base
	switch {
	case own.Mode == ApprovalAsk && eb.Mode == ApprovalOff:
		d.errorf(path+".mode", "a parent turns asking off; a child only narrows: use %q or leave mode out", ApprovalOff)
	case own.Mode != "":
		c.Mode = own.Mode
	}
	narrowDur(d, path+".hold", own.Hold, eb.Hold, &c.Hold)
	narrowDur(d, path+".askTTL", own.AskTTL, eb.AskTTL, &c.AskTTL)
	narrowDur(d, path+".maxGrant", own.MaxGrant, eb.MaxGrant, &c.MaxGrant)
	if own.SandboxGrants && !base.SandboxGrants {
		d.errorf(path+".sandboxGrants", "a parent does not allow sandbox-life grants; a child only narrows: remove sandboxGrants")
	}
	c.SandboxGrants = own.SandboxGrants && base.SandboxGrants
	if own.Approvers.Webhook != nil {
		c.Approvers = own.Approvers
	}
	return &c
}

// narrowDur takes the child's time when set and not above the parents'.
func narrowDur(d *decoder, path string, own, parent time.Duration, out *time.Duration) {
	switch {
	case own == 0:
		*out = parent
	case own > parent:
		d.errorf(path, "%s is longer than the parents' %s; a child only narrows", own, parent)
		*out = parent
	default:
		*out = own
	}
}

// GrantRule is a grant as the policy sees it: one host, the ports granted, and the grant's
// ID, which decisions it allows carry (Decision.Grant) and name as rule "grant:ID".
type GrantRule struct {
	ID    string
	Host  string // a normalised host name
	Ports []int
	// Identity is the spec.identities name the grant serves; "" serves the sandbox's own
	// policy only. A grant never serves another identity.
	Identity string
}

// GrantRulePrefix starts the rule name of a decision a grant allowed.
const GrantRulePrefix = "grant:"

// WithGrants returns a copy of p whose rules end with one rule per grant: the host on the
// grant's ports, protocol http, every method and path. A grant with an invalid host or no
// port is skipped. Each grant goes to the policy of its identity (GrantRule.Identity):
// the sandbox's own, or one of p's identity policies. p is unchanged.
func (p *Policy) WithGrants(gs []GrantRule) *Policy {
	if len(gs) == 0 {
		return p
	}
	q := *p
	q.rules = slices.Clone(p.rules)
	if len(p.identities) > 0 {
		q.identities = make(map[string]*Policy, len(p.identities))
		for name, ip := range p.identities {
			q.identities[name] = ip.WithGrants(slices.DeleteFunc(slices.Clone(gs), func(g GrantRule) bool { return g.Identity != name }))
		}
	}
	for _, g := range gs {
		if g.Identity != p.identity {
			continue
		}
		h, err := NormalizeHost(g.Host)
		if err != nil || h.IsIP() || len(g.Ports) == 0 {
			continue
		}
		ports := slices.Clone(g.Ports)
		slices.Sort(ports)
		ports = slices.Compact(ports)
		name := GrantRulePrefix + g.ID
		q.rules = append(q.rules, &rule{
			spec:   Rule{Name: name, Hosts: []string{h.Name}, Ports: ports, Protocol: ProtocolHTTP},
			origin: "grant", hosts: []hostPattern{{name: h.Name}}, hostIdx: []int{0},
			ports: ports, grant: g.ID,
		})
	}
	return &q
}

// String describes a grant rule for logs.
func (g GrantRule) String() string {
	return fmt.Sprintf("grant %s: %s ports %v", g.ID, g.Host, g.Ports)
}
