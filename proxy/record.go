package proxy

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// Request IDs: the client's X-Request-Id when it sends a usable one, else one made up here;
// either way the response carries it back in X-Airlock-Request-Id (a header of our own, so
// that an upstream's X-Request-Id, which many APIs send, reaches the client untouched).
const (
	headerRequestID        = "X-Request-Id"
	headerAirlockRequestID = "X-Airlock-Request-Id"
	maxRequestID           = 128
)

// requestID returns the client's X-Request-Id when it is short printable ASCII, else a new
// random one.
func requestID(h http.Header) string {
	if id := h.Get(headerRequestID); h != nil && id != "" && len(id) <= maxRequestID && printable(id) {
		return id
	}
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail (Go 1.24)
	return hex.EncodeToString(b[:])
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// record is the write-before-respond stage. A request answered at admission (a denial, a
// failure) has its one event written, through the flood summariser for denials, before the
// answer is released; a request to be forwarded has a decision event written before anything
// goes upstream (its canonical event follows when it ends). When the audit log cannot be
// written the request fails closed with 503 audit_unavailable instead.
func (x *exchange) record(r *http.Request, resp *http.Response) *http.Response {
	if resp == nil {
		ev := x.event(audit.DecisionAllow, x.d)
		if x.d.WouldDeny {
			ev.Decision = audit.DecisionReport
		}
		ev.Phase = audit.PhaseDecision
		if err := audit.Commit(x.p.cfg.Audit, ev); err != nil {
			return x.unavailable(r)
		}
		return nil
	}
	decision, d := x.outcome()
	ev := x.event(decision, d)
	ev.BytesDown = max(resp.ContentLength, 0)
	commit := audit.Commit
	if decision == audit.DecisionDeny {
		commit = audit.CommitDenial
	}
	if err := commit(x.p.cfg.Audit, ev); err != nil {
		x.mu.Lock()
		x.recorded = true // closing resp's body below ends the exchange: no event for it
		x.mu.Unlock()
		_ = resp.Body.Close()
		return x.unavailable(r)
	}
	x.mu.Lock()
	x.recorded = true
	x.mu.Unlock()
	return resp
}

// unavailable answers 503 audit_unavailable. No event is written for it (the log cannot
// take one); the audit Logger counts such refusals and records the count when it recovers.
func (x *exchange) unavailable(r *http.Request) *http.Response {
	x.mu.Lock()
	x.recorded = true
	x.mu.Unlock()
	return x.respond(failResponse(r, policy.ReasonAuditUnavailable, x.host, x.port))
}

// event is the exchange's audit event as it stands.
func (x *exchange) event(decision string, d policy.Decision) audit.Event {
	x.mu.Lock()
	defer x.mu.Unlock()
	return audit.Event{Time: x.at, Kind: audit.KindHTTP, Decision: decision, Rule: d.Rule,
		Reason: string(d.Reason), Detail: d.Detail, Destination: x.dest, Addr: x.addr,
		Method: x.method, Path: x.path, Status: x.status, BytesUp: x.up.Load(),
		BytesDown: x.down.Load(), Duration: time.Since(x.start), Secrets: x.secrets, Client: x.o.client,
		Policy: x.pol.Name(), Identity: x.pol.IdentityName(), Error: x.errText, RequestID: x.reqID}
}

// recordDecision writes an allowed tunnel's decision event before anything is dialled or
// answered, and returns nil; when the audit log cannot be written it returns the 503 that
// refuses the tunnel instead.
func (t *tunnel) recordDecision() *http.Response {
	decision, d := t.outcome()
	ev := t.event(decision, d)
	ev.Phase = audit.PhaseDecision
	if err := audit.Commit(t.p.cfg.Audit, ev); err != nil {
		t.mu.Lock()
		t.recorded = true
		t.mu.Unlock()
		return t.answer(failResponse(nil, policy.ReasonAuditUnavailable, t.host, t.port))
	}
	return nil
}

// respond records resp's status and writes the tunnel's event before resp is released
// (through the flood summariser for a refusal); when the log cannot be written it answers
// 503 audit_unavailable instead.
func (t *tunnel) respond(resp *http.Response) *http.Response {
	decision, d := t.outcome()
	t.setStatus(resp.StatusCode)
	ev := t.event(decision, d)
	ev.BytesDown = max(resp.ContentLength, 0)
	commit := audit.Commit
	if decision == audit.DecisionDeny {
		commit = audit.CommitDenial
	}
	err := commit(t.p.cfg.Audit, ev)
	t.mu.Lock()
	t.recorded = true
	t.mu.Unlock()
	if err != nil {
		_ = resp.Body.Close()
		resp = failResponse(nil, policy.ReasonAuditUnavailable, t.host, t.port)
	}
	return t.answer(resp)
}

// answer records resp's status and request id.
func (t *tunnel) answer(resp *http.Response) *http.Response {
	t.setStatus(resp.StatusCode)
	resp.Header.Set(headerAirlockRequestID, t.reqID)
	return resp
}

// event is the tunnel's audit event as it stands.
func (t *tunnel) event(decision string, d policy.Decision) audit.Event {
	t.mu.Lock()
	defer t.mu.Unlock()
	return audit.Event{Time: t.at, Kind: audit.KindConnect, Decision: decision, Rule: d.Rule,
		Reason: string(d.Reason), Detail: d.Detail, Destination: t.dest, Addr: t.addr,
		Status: t.status, BytesUp: t.up.Load(), BytesDown: t.down.Load(), Duration: time.Since(t.start),
		Client: t.client, Policy: t.pol.Name(), Identity: t.pol.IdentityName(), Error: t.errText, RequestID: t.reqID}
}
