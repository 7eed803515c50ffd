package llmproxy

import (
	"net/http"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// recordDecision writes the call's decision event (audit.PhaseDecision) before anything is
// sent to the provider, so that every call a provider saw is on record even if the sidecar
// dies before it ends. When the audit log cannot be written it answers 503
// audit_unavailable instead and reports false: nothing is sent.
func (x *exchange) recordDecision(w http.ResponseWriter) bool {
	ev := x.ev
	ev.Phase = audit.PhaseDecision
	if err := audit.Commit(x.p.cfg.Audit, ev); err != nil {
		x.ev.Reason = string(policy.ReasonAuditUnavailable)
		x.fail(w, &apiError{status: http.StatusServiceUnavailable, code: string(policy.ReasonAuditUnavailable), openaiType: "server_error",
			message: "airlock: the audit log cannot be written, so the call is not sent; retry later"})
		return false
	}
	return true
}
