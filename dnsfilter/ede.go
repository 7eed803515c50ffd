package dnsfilter

import (
	"fmt"
	"strings"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// maxExtraText bounds the EXTRA-TEXT of an Extended DNS Error: it explains, it must not make
// a refusal large enough to be truncated over UDP.
const maxExtraText = 300

// edeCode is the Extended DNS Error (RFC 8914) a denial carries: Prohibited (18) for a query
// the filter never serves (ANY, zone transfers), Blocked (15, "blocked due to an internal
// security policy") for a name the policy or a brake denies. Failures (SERVFAIL) and
// malformed queries carry none.
func edeCode(reason string) (uint16, bool) {
	switch policy.Reason(reason) {
	case policy.ReasonTypeRefused:
		return dns.ExtendedErrorCodeProhibited, true
	case policy.ReasonBadQuery, policy.ReasonUpstreamFailed, policy.ReasonAllowMapFailed, "":
		return 0, false
	}
	return dns.ExtendedErrorCodeBlocked, true
}

// explainDenial adds an Extended DNS Error to a denied reply when the client speaks EDNS(0)
// (a reply may carry OPT only then, RFC 6891 §7): the code, and as EXTRA-TEXT the policy's
// name (and the identity that asked, with spec.identities), the reason code, what was denied
// and the catalogue's remedy, so an agent can report the denial instead of retrying it. `dig`
// prints it as "EDE: 15 (Blocked): (...)".
func explainDenial(reply *dns.Msg, ev audit.Event) {
	code, ok := edeCode(ev.Reason)
	opt := reply.IsEdns0()
	if !ok || opt == nil || ev.Decision != audit.DecisionDeny {
		return
	}
	who := ev.Policy
	if ev.Identity != "" {
		who += " (identity " + ev.Identity + ")"
	}
	text := fmt.Sprintf("airlock policy %s: %s: %s", who, ev.Reason, ev.Detail)
	if remedy := policy.Reason(ev.Reason).Remedy(); remedy != "" {
		text += "; " + remedy
	}
	if len(text) > maxExtraText {
		text = strings.ToValidUTF8(text[:maxExtraText-3], "") + "..."
	}
	opt.Option = append(opt.Option, &dns.EDNS0_EDE{InfoCode: code, ExtraText: text})
}
