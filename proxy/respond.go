package proxy

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/airlock-dev/airlock/policy"
)

// headerDecision marks responses the proxy made a decision on: "deny" on a denial, "report"
// on an allowed response that enforce mode would have denied. Other responses carry nothing.
const headerDecision = "X-Airlock-Decision"

// Values of the "error" field of the proxy's JSON error bodies, by status. A denial's status
// and a failure's status come from the reason catalogue (policy.Reason.HTTPStatus).
const codeDenied = "egress_denied" // 403

// failCodes is the "error" field of a failure, by its status.
var failCodes = map[int]string{
	http.StatusBadRequest:            "bad_request",
	http.StatusRequestEntityTooLarge: "request_too_large",
	http.StatusTooManyRequests:       "too_many_tunnels",
	http.StatusBadGateway:            "upstream_unreachable",
	http.StatusServiceUnavailable:    "credential_unavailable",
	http.StatusGatewayTimeout:        "upstream_timeout",
}

// deniedBody is the JSON body of a denial; every field is always present.
type deniedBody struct {
	Error  string `json:"error"`
	Host   string `json:"host"`
	Port   int    `json:"port"`
	Rule   string `json:"rule"`
	Reason string `json:"reason"`
	Detail string `json:"detail"`
	// Remedy is the catalogue's one-line remedy for Reason (additive to the contract).
	Remedy string `json:"remedy,omitempty"`
	// Policy names the policy that denied, so an agent can report who to ask (additive).
	Policy string `json:"policy,omitempty"`
	// Identity names the identity (spec.identities) whose policy denied (additive).
	Identity string `json:"identity,omitempty"`
	// Approval names the operator's ask about the request, on approval_pending and
	// approval_denied (additive).
	Approval *approvalRef `json:"approval,omitempty"`
}

// approvalRef is the "approval" field of a denial the approval stage made.
type approvalRef struct {
	ID     string `json:"id"`
	Status string `json:"status"` // pending or denied
}

// failedBody is the JSON body of every other error. It names the destination and a coarse
// reason, never an internal error text.
type failedBody struct {
	Error  string `json:"error"`
	Host   string `json:"host,omitempty"`
	Port   int    `json:"port,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// denyResponse is the denial (403 unless the catalogue says otherwise) for decision d on
// host:port.
func denyResponse(req *http.Request, d policy.Decision, pol *policy.Policy, host string, port int) *http.Response {
	if d.Host != "" {
		host = d.Host
	}
	if d.Port != 0 {
		port = d.Port
	}
	status := d.Reason.HTTPStatus()
	if status < 400 || status > 499 {
		status = http.StatusForbidden
	}
	body := deniedBody{
		Error: codeDenied, Host: host, Port: port, Rule: d.Rule, Reason: string(d.Reason), Detail: d.Detail,
		Remedy: d.Reason.Remedy(), Policy: policyName(pol), Identity: d.Identity,
	}
	if body.Identity == "" && pol != nil {
		body.Identity = pol.IdentityName()
	}
	retry := ""
	switch {
	case d.Ask == "":
	case d.Reason == policy.ReasonApprovalPending:
		body.Approval = &approvalRef{ID: d.Ask, Status: "pending"}
		retry = retryAfter(pol)
	case d.Reason == policy.ReasonApprovalDenied:
		body.Approval = &approvalRef{ID: d.Ask, Status: "denied"}
	}
	resp := jsonResponse(req, status, body)
	resp.Header.Set(headerDecision, "deny")
	if retry != "" {
		resp.Header.Set("Retry-After", retry)
	}
	return resp
}

// retryAfter is the Retry-After of an approval_pending denial: the policy's hold in whole
// seconds, at least 1.
func retryAfter(pol *policy.Policy) string {
	secs := 1
	if pol != nil {
		if c, ok := pol.Approval(); ok {
			secs = max(1, int((c.Hold+time.Second-1)/time.Second))
		}
	}
	return strconv.Itoa(secs)
}

// policyName is pol's name, or "" without a policy.
func policyName(pol *policy.Policy) string {
	if pol == nil {
		return ""
	}
	return pol.Name()
}

// failResponse is an error response other than a denial: its status and "error" field
// follow from the reason's catalogue entry.
func failResponse(req *http.Request, reason policy.Reason, host string, port int) *http.Response {
	status := reason.HTTPStatus()
	code, ok := failCodes[status]
	if !ok { // a reason without a failure status: a bug, answered as a bad gateway
		status, code = http.StatusBadGateway, failCodes[http.StatusBadGateway]
	}
	resp := jsonResponse(req, status, failedBody{Error: code, Host: host, Port: port, Reason: string(reason)})
	if status == http.StatusTooManyRequests {
		resp.Header.Set("Retry-After", "1")
	}
	return resp
}

// jsonResponse is a complete response with v as its JSON body.
func jsonResponse(req *http.Request, status int, v any) *http.Response {
	body, err := json.Marshal(v)
	if err != nil { // only plain strings and ints above; cannot happen
		body = []byte(`{"error":"internal"}`)
	}
	body = append(body, '\n')
	h := make(http.Header)
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	return &http.Response{
		Status:        strconv.Itoa(status) + " " + http.StatusText(status),
		StatusCode:    status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

// writeRaw writes resp to a hijacked or raw connection, closing the connection afterwards
// (Connection: close), as the reply to a CONNECT or a transparent connection.
func writeRaw(w io.Writer, resp *http.Response) {
	resp.Close = true
	_ = resp.Write(w)
}
