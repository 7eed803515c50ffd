// Package approval is the approval stage of airlock's decision (issue 31): when a policy with
// spec.approval misses (no rule names the host), the request is held while the operator is
// asked, and an answer turns into a grant that makes the host reachable as if a rule named
// it.
//
// It owns three things and nothing else:
//
//   - asks: which misses may be asked about at all (Eligible: only a plain no_rule miss on a
//     public DNS name, never anything the SSRF guard, the anti-fronting checks or a written
//     rule refuses), deduplicated per (host, port), and bounded (Config.MaxOpenAsks open at
//     once, Config.AsksPerMinute new ones a minute; misses beyond the bound are counted into
//     summary events, never queued);
//   - grants: the store of answers (scopes once, a duration up to spec.approval.maxGrant, or
//     the sandbox's life), kept in the state directory so they survive a restart, ended by
//     expiry, revocation, use (once) and by a reload that names the host, lists it under
//     never, turns asking off or shortens maxGrant;
//   - approvers: the operator's CLI over a unix socket in the state directory (server.go,
//     client.go; the peer is named by SO_PEERCRED) and the HMAC-signed webhook (webhook.go),
//     which is dialled through the operator's dial path (egress.Operator) only.
//
// Enforcement points see the stage through Stage.Settle (proxy: explicit, CONNECT,
// transparent) and Stage.SettleName (DNS filter), and the effective policy (the loaded
// policy plus one rule per live grant, policy.WithGrants) through Stage.Current. When the
// set of live grants changes, Config.OnChange is called so that the sidecar re-applies the
// effective policy: the DNS filter then removes the kernel allow-map addresses of a grant
// that ended, at once.
//
// Every ask, grant, denial, expiry and revocation is an audit event of kind "approval" in
// the hash chain, naming the approver. The package imports policy, audit and egress (for the
// operator's dial path); only internal/sidecar, cmd/airlock and tests import it.
package approval
