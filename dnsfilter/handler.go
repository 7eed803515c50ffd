package dnsfilter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// query is one query being answered.
type query struct {
	w       dns.ResponseWriter
	req     *dns.Msg
	reply   *dns.Msg
	name    string // normalised question name (no trailing dot), for the book and audit
	tcp     bool   // received over TCP
	book    *book  // where its answer's addresses are recorded (set by policyFor)
	ev      audit.Event
	start   time.Time
	udpSize int // largest answer the client takes over UDP; 0 over TCP
}

// ServeDNS answers one query. It implements dns.Handler; the stages are described in the
// package documentation.
func (f *Filter) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	q := &query{w: w, req: req, start: f.cfg.Now(), reply: new(dns.Msg)}
	q.reply.SetReply(req)
	q.reply.RecursionAvailable = true
	q.ev = audit.Event{Kind: audit.KindDNS, Client: w.RemoteAddr().String(), Policy: f.cfg.Policy.Current().Name()}
	if f.checkShape(q) {
		f.answer(q)
	}
	f.finish(q)
}

// checkShape refuses queries the filter does not serve and sets up EDNS0; it reports whether
// the query goes on.
func (f *Filter) checkShape(q *query) bool {
	req := q.req
	if _, q.tcp = q.w.RemoteAddr().(*net.TCPAddr); !q.tcp {
		q.udpSize = dns.MinMsgSize
	}
	opt := req.IsEdns0()
	if opt != nil {
		// RFC 6891 §6.2.5: the requestor's payload size, never less than 512.
		if q.udpSize != 0 {
			q.udpSize = max(int(opt.UDPSize()), dns.MinMsgSize)
		}
		q.reply.SetEdns0(upstreamUDPSize, false)
	}
	switch {
	case req.Opcode != dns.OpcodeQuery:
		return f.reject(q, dns.RcodeNotImplemented, policy.ReasonBadQuery, fmt.Sprintf("opcode %s is not served", dns.OpcodeToString[req.Opcode]))
	case len(req.Question) != 1:
		return f.reject(q, dns.RcodeFormatError, policy.ReasonBadQuery, fmt.Sprintf("%d questions; want one", len(req.Question)))
	}
	qs := req.Question[0]
	q.ev.Destination = strings.TrimSuffix(strings.ToLower(qs.Name), ".")
	q.name = q.ev.Destination
	switch {
	case opt != nil && opt.Version() != 0:
		// RFC 6891 §6.1.3.
		return f.reject(q, dns.RcodeBadVers, policy.ReasonBadQuery, fmt.Sprintf("EDNS version %d", opt.Version()))
	case qs.Qclass != dns.ClassINET:
		return f.reject(q, dns.RcodeRefused, policy.ReasonBadQuery, fmt.Sprintf("class %s is not served", dns.ClassToString[qs.Qclass]))
	case refusedType(qs.Qtype):
		return f.reject(q, dns.RcodeRefused, policy.ReasonTypeRefused, fmt.Sprintf("query type %s is refused", dns.TypeToString[qs.Qtype]))
	}
	return true
}

// refusedType reports the query types the filter never forwards: ANY (RFC 8482 lets a
// server decline it; it would also return every record type of a name in one go), zone
// transfers, and meta types that are not questions.
func refusedType(t uint16) bool {
	switch t {
	case dns.TypeANY, dns.TypeAXFR, dns.TypeIXFR, dns.TypeMAILA, dns.TypeMAILB, dns.TypeOPT,
		dns.TypeTSIG, dns.TypeTKEY, dns.TypeNone, dns.TypeReserved:
		return true
	}
	return false
}

// reject answers rcode with an empty answer and a deny event; it returns false.
func (f *Filter) reject(q *query, rcode int, reason policy.Reason, detail string) bool {
	q.reply.Rcode = rcode
	q.ev.Decision, q.ev.Reason, q.ev.Detail = audit.DecisionDeny, string(reason), detail
	return false
}

// answer decides and answers a well-formed query.
func (f *Filter) answer(q *query) {
	qs := q.req.Question[0]
	pol, ok := f.policyFor(q)
	if !ok {
		return
	}
	if dns.CanonicalName(qs.Name) == LLMName {
		llmAnswer(q.reply, qs.Qtype, f.cfg.LLMAddr, q.w.LocalAddr())
		q.ev.Decision, q.ev.Reason = audit.DecisionAllow, string(policy.ReasonReservedName)
		return
	}
	q.ev.Policy = pol.Name() // the policy this query is decided under
	cfg := pol.DNS()
	nd := f.decisionsOf(pol).decide(pol, qs.Name)
	if !nd.Allowed() && f.cfg.Approvals != nil {
		pol, nd = f.cfg.Approvals.SettleName(context.Background(), pol, nd)
		q.ev.Policy, cfg = pol.Name(), pol.DNS()
	}
	q.ev.Rule, q.ev.Reason, q.ev.Detail = nd.Rule, string(nd.Reason), nd.Detail
	if nd.Host != "" {
		q.name, q.ev.Destination = nd.Host, nd.Host
	}
	wouldDeny := nd.WouldDeny
	if !nd.Allowed() {
		f.deny(q, cfg)
		return
	}
	if !wouldDeny && nd.Wildcard != "" {
		if reason, detail := f.brakeCheck(nd, cfg); reason != "" {
			q.ev.Reason, q.ev.Detail = string(reason), detail
			if pol.Mode() != policy.ModeReport {
				f.deny(q, cfg)
				return
			}
			wouldDeny = true
		}
	}
	q.ev.Decision = audit.DecisionAllow
	if wouldDeny {
		q.ev.Decision = audit.DecisionReport
	}
	// A name no rule names has no ports to open, so report mode answers it without recording
	// it; a name a rule names but a brake would stop is recorded like any allowed name.
	f.forward(q, pol, nd, cfg, wouldDeny, !nd.WouldDeny)
}

// deny answers the policy's onDeny code, never asking upstream.
func (f *Filter) deny(q *query, cfg policy.DNSConfig) {
	q.reply.Rcode = dns.RcodeRefused
	if cfg.OnDeny == policy.OnDenyNXDomain {
		q.reply.Rcode = dns.RcodeNameError
	}
	q.ev.Decision = audit.DecisionDeny
}

// brakeCheck applies the exfiltration brakes to a name allowed only through a wildcard; it
// returns a reason and detail when they stop it.
func (f *Filter) brakeCheck(nd policy.NameDecision, cfg policy.DNSConfig) (policy.Reason, string) {
	if msg := checkLabels(nd.Host, nd.Zone(), cfg.MaxLabelLength); msg != "" {
		return policy.ReasonLabelTooLong, msg
	}
	if f.book.liveName(nd.Host) || f.idBook.liveName(nd.Host) {
		return "", ""
	}
	if !f.brake.admit(nd.Wildcard, nd.Host, cfg.WildcardQueriesPerMinute) {
		return policy.ReasonRateLimited, rateDetail(cfg, nd.Wildcard)
	}
	return "", ""
}

// forward asks upstream, cleans the answer, records its addresses (with record) and builds
// the reply. wouldDeny (report mode) marks the audit detail; without record the answer is
// passed on but nothing is recorded.
func (f *Filter) forward(q *query, pol *policy.Policy, nd policy.NameDecision, cfg policy.DNSConfig, wouldDeny, record bool) {
	qs := q.req.Question[0]
	// Each exchange is bounded by Config.Timeout through socket deadlines; no context timer
	// is needed per query (timers are a measurable share of a forwarder's CPU).
	r, server, err := f.x.exchange(context.Background(), upstreamQuery(q.req), f.upstreams(pol))
	if err != nil {
		f.metrics.counter(f.metrics.upstream, "error").Inc()
		f.servfail(q, policy.ReasonUpstreamFailed, err)
		return
	}
	f.metrics.counter(f.metrics.upstream, "ok").Inc()
	q.ev.Addr = server.String()
	addrs := cleanAnswer(r, qs.Name, qs.Qtype, cfg.MinTTL)
	f.share(q.name, qs.Qtype, r.Rcode, addrs)
	var keep func(netip.Addr) bool
	if !record {
		// Report mode answers a name enforce would deny, but records nothing: no rule gives
		// its addresses ports. Internal addresses are still left out, as the proxy's SSRF
		// guard refuses them in report mode too.
		keep = func(a netip.Addr) bool { return policy.ClassifyAddr(a) == policy.AddrPublic }
	} else {
		kept, err := f.grant(q, pol, nd, cfg, addrs)
		if err != nil {
			f.servfail(q, policy.ReasonAllowMapFailed, err)
			return
		}
		keep = func(a netip.Addr) bool {
			return slices.ContainsFunc(kept, func(g grant) bool { return g.addr == a })
		}
	}
	r.Answer = slices.DeleteFunc(r.Answer, func(rr dns.RR) bool {
		a, ok := rrAddr(rr)
		return ok && !keep(a)
	})
	restoreCase(r.Answer, qs.Name)
	restoreCase(r.Ns, qs.Name)
	q.reply.Rcode = r.Rcode
	q.reply.Answer, q.reply.Ns = r.Answer, r.Ns
	if wouldDeny {
		q.ev.Detail += "; answered " + describeAnswer(qs.Qtype, r)
	} else {
		q.ev.Detail = describeAnswer(qs.Qtype, r)
	}
}

// share hands a successful address answer, every address of it, to Config.Answers.
func (f *Filter) share(name string, qtype uint16, rcode int, addrs []answerAddr) {
	if f.cfg.Answers == nil || rcode != dns.RcodeSuccess || len(addrs) == 0 ||
		(qtype != dns.TypeA && qtype != dns.TypeAAAA) {
		return
	}
	v6 := qtype == dns.TypeAAAA
	out := make([]netip.Addr, 0, len(addrs))
	ttl := addrs[0].ttl
	for _, a := range addrs {
		if a.addr.Is6() == v6 {
			out = append(out, a.addr)
			ttl = min(ttl, a.ttl)
		}
	}
	if len(out) > 0 {
		f.cfg.Answers.PutAnswer(name, v6, out, ttl)
	}
}

// grant records the addresses of an answer in the book and the allow map, each with the
// ports the policy allows for it under this name, and returns the grants of the addresses
// the client may see. An address no port of which the policy allows (an internal address a rule does not
// name by CIDR: the SSRF guard, as in the proxy) is left out of the answer.
func (f *Filter) grant(q *query, pol *policy.Policy, nd policy.NameDecision, cfg policy.DNSConfig, addrs []answerAddr) ([]grant, error) {
	now := f.cfg.Now()
	var grants []grant
	for _, a := range addrs {
		ports := allowedPorts(pol, nd, a.addr)
		if len(ports) == 0 {
			continue
		}
		grants = append(grants, grant{addr: a.addr, ports: ports, until: now.Add(max(a.ttl, cfg.MinTTL) + cfg.Grace)})
	}
	kept, evicted, err := q.book.record(q.name, grants, cfg.MaxIPsPerName)
	f.metrics.evictions.Add(float64(len(evicted)))
	if q.book.allow != nil {
		f.metrics.counter(f.metrics.allowMap, "revoke").Add(float64(len(evicted)))
		f.metrics.counter(f.metrics.allowMap, "allow").Add(float64(len(kept)))
	}
	if err != nil {
		f.metrics.counter(f.metrics.allowMap, "error").Inc()
		return nil, err
	}
	return kept, nil
}

// allowedPorts returns the ports of nd the policy allows for address a of the name: all of
// them for a public address (CheckAddr allows any port there, so it is not asked for each),
// and for any other those a rule names by CIDR.
func allowedPorts(pol *policy.Policy, nd policy.NameDecision, a netip.Addr) []uint16 {
	ports := make([]uint16, 0, len(nd.Ports))
	public := policy.ClassifyAddr(a) == policy.AddrPublic
	for _, p := range nd.Ports {
		if public {
			ports = append(ports, uint16(p))
		} else if d := pol.CheckAddr(nd.Host, p, a); d.Allowed() && !d.WouldDeny {
			ports = append(ports, uint16(p))
		}
	}
	return ports
}

// servfail answers SERVFAIL with nothing in it.
func (f *Filter) servfail(q *query, reason policy.Reason, err error) {
	q.reply.Rcode = dns.RcodeServerFailure
	q.reply.Answer, q.reply.Ns = nil, nil
	q.ev.Decision, q.ev.Reason, q.ev.Error = audit.DecisionDeny, string(reason), err.Error()
	f.log.WithField("name", q.name).WithError(err).Warn("dns filter: answering SERVFAIL")
}

// rrAddr returns the (unmapped) address of an A or AAAA record; false for any other record
// and for one whose data is not an address of its type.
func rrAddr(rr dns.RR) (netip.Addr, bool) {
	switch v := rr.(type) {
	case *dns.A:
		if ip4 := v.A.To4(); len(v.A) == 4 || (len(v.A) == 16 && ip4 != nil) {
			return netip.AddrFrom4([4]byte(ip4)), true
		}
	case *dns.AAAA:
		if len(v.AAAA) == 16 {
			return netip.AddrFrom16([16]byte(v.AAAA)).Unmap(), true
		}
	}
	return netip.Addr{}, false
}

// describeAnswer summarises an answer for the audit detail: type, rcode and addresses.
func describeAnswer(qtype uint16, r *dns.Msg) string {
	b := make([]byte, 0, 64)
	b = append(append(append(b, dns.TypeToString[qtype]...), ' '), dns.RcodeToString[r.Rcode]...)
	sep := ": "
	for _, rr := range r.Answer {
		if a, ok := rrAddr(rr); ok {
			b = a.AppendTo(append(b, sep...))
			sep = ", "
		}
	}
	return string(b)
}

// finish audits and counts the query, then writes the reply (truncated with TC when it does
// not fit the client's UDP size, so the client asks again over TCP: RFC 7766). The event is
// written to the audit log first (record) so that it is on record before the client can
// act on the answer.
func (f *Filter) finish(q *query) {
	f.metrics.query(q.ev.Decision, q.ev.Reason, q.ev.Identity).Inc()
	if q.ev.Decision == audit.DecisionReport {
		q.ev.Detail = "would deny: " + q.ev.Detail
	}
	if f.cfg.Audit != nil && !f.record(q) {
		// Fail closed: an answer that cannot be recorded is not given.
		q.reply.Rcode, q.reply.Answer, q.reply.Ns, q.reply.Extra = dns.RcodeServerFailure, nil, nil, nil
	}
	explainDenial(q.reply, q.ev)
	if q.udpSize > 0 {
		q.reply.Truncate(q.udpSize)
	}
	if err := q.w.WriteMsg(q.reply); err != nil && !errors.Is(err, net.ErrClosed) {
		f.log.WithError(err).Debug("dns filter: write answer")
	}
	f.metrics.duration.Observe(f.cfg.Now().Sub(q.start).Seconds())
}

// record writes the query's event before the answer leaves (a refusal through the flood
// summariser: repeated refusals of one name share an event with a count). It reports false
// when the audit log cannot be written.
func (f *Filter) record(q *query) bool {
	commit := audit.Commit
	if q.ev.Decision == audit.DecisionDeny {
		commit = audit.CommitDenial
	}
	return commit(f.cfg.Audit, q.ev) == nil
}
