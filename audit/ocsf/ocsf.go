// Package ocsf renders airlock's native audit events in the Open Cybersecurity Schema
// Framework (OCSF), schema SchemaVersion, for log shippers and SIEMs: HTTP requests and model
// calls as HTTP Activity (4002), tunnels and connections as Network Activity (4001), DNS
// queries as DNS Activity (4003). Every rendered event carries the native line's sequence
// number, prev and hash, and airlock's rule, reason and remedy, under unmapped.airlock, so
// that a SIEM finding leads back to the verified chain.
//
// The native log stays the record: verify, learn, replay and export read it, never this
// rendering. ocsf imports audit (decoding) and policy (the reason catalogue's remedies).
package ocsf

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// SchemaVersion is the OCSF schema version the events follow (metadata.version); its
// definitions are in testdata/, and the tests check every class used against them.
const SchemaVersion = "1.8.0"

// OCSF identifiers used here (schema 1.8.0: categories.json and events/network/).
const (
	CategoryNetwork      = 4
	ClassNetworkActivity = 4001
	ClassHTTPActivity    = 4002
	ClassDNSActivity     = 4003
)

// NotExported are the native kinds with no OCSF rendering, and why. Every other kind maps to
// a class (Classes).
var NotExported = map[audit.Kind]string{
	audit.KindCredential: "a credential fetch, injection or misuse: the request it served has its own HTTP Activity event",
	audit.KindPolicy:     "a policy load or reload: configuration, not network activity",
	audit.KindAudit:      "the audit log's own outage note: about the log, not the sandbox",
	audit.KindUsage:      "a usage cap froze the sandbox, or it was thawed: about the sandbox's bill, not network activity",
	audit.KindApproval:   "an operator's ask, grant, denial, expiry or revocation: a decision about policy, not network activity; the request it held has its own event",
}

// Classes maps each exported native kind to its OCSF class.
var Classes = map[audit.Kind]int{
	audit.KindHTTP:    ClassHTTPActivity,
	audit.KindLLM:     ClassHTTPActivity,
	audit.KindConnect: ClassNetworkActivity,
	audit.KindDNS:     ClassDNSActivity,
}

var classNames = map[int]string{ClassNetworkActivity: "Network Activity", ClassHTTPActivity: "HTTP Activity", ClassDNSActivity: "DNS Activity"}

// httpActivities are HTTP Activity's activity_id values (its activity_id enum).
var httpActivities = map[string]int{"CONNECT": 1, "DELETE": 2, "GET": 3, "HEAD": 4, "OPTIONS": 5, "POST": 6, "PUT": 7, "TRACE": 8, "PATCH": 9}

// ErrSkipped is returned by Render for a line that has no OCSF rendering: not an audit
// event, a decision-phase line (its request's canonical line follows), or a NotExported kind.
var ErrSkipped = errors.New("not rendered in OCSF")

// Render turns one native audit line into one OCSF event (a JSON object, no newline).
// productVersion is airlock's version for metadata.product.version.
func Render(line []byte, productVersion string) ([]byte, error) {
	line = []byte(strings.TrimRight(string(line), "\r\n"))
	e, err := audit.Decode(line)
	if errors.Is(err, audit.ErrNotEvent) {
		return nil, ErrSkipped
	}
	if err != nil {
		return nil, err
	}
	cls, ok := Classes[e.Kind]
	if !ok || e.Phase == audit.PhaseDecision {
		return nil, ErrSkipped
	}
	var chain struct {
		Seq  uint64 `json:"seq"`
		Prev string `json:"prev"`
	}
	_ = json.Unmarshal(line, &chain)
	sum := sha256.Sum256(line)
	ev := base(e, cls, chain.Seq, productVersion)
	ev["unmapped"] = map[string]any{"airlock": native(e, chain.Seq, chain.Prev, hex.EncodeToString(sum[:]))}
	switch cls {
	case ClassHTTPActivity:
		httpActivity(ev, e)
	case ClassNetworkActivity:
		networkActivity(ev, e)
	case ClassDNSActivity:
		dnsActivity(ev, e)
	}
	return json.Marshal(ev)
}

// base fills the attributes every class shares (base_event and the security_control
// profile).
func base(e audit.Event, cls int, seq uint64, productVersion string) map[string]any {
	denied := e.Decision == audit.DecisionDeny
	ev := map[string]any{
		"category_uid": CategoryNetwork, "category_name": "Network Activity",
		"class_uid": cls, "class_name": classNames[cls],
		"time": e.Time.UnixMilli(),
		"metadata": map[string]any{
			"version":  SchemaVersion,
			"product":  map[string]any{"name": "airlock", "vendor_name": "airlock", "version": productVersion},
			"uid":      e.Sandbox + ":" + strconv.FormatUint(seq, 10),
			"sequence": seq, "log_name": "airlock-audit", "profiles": []string{"security_control"},
		},
		"severity_id": 1, "severity": "Informational",
		"action_id": 1, "action": "Allowed", "disposition_id": 1, "disposition": "Allowed",
		"status_id": 1, "status": "Success",
	}
	if e.RequestID != "" {
		ev["metadata"].(map[string]any)["correlation_uid"] = e.RequestID
	}
	if denied {
		ev["severity_id"], ev["severity"] = 3, "Medium"
		ev["action_id"], ev["action"], ev["disposition_id"], ev["disposition"] = 2, "Denied", 2, "Blocked"
	}
	if denied || e.Error != "" {
		ev["status_id"], ev["status"] = 2, "Failure"
	}
	if e.Reason != "" {
		ev["status_code"] = e.Reason
	}
	if e.Detail != "" {
		ev["status_detail"], ev["message"] = e.Detail, e.Detail
	}
	if e.Duration > 0 {
		ev["duration"] = e.Duration.Milliseconds()
	}
	if e.Count > 1 {
		ev["count"] = e.Count
	}
	// The source is the sandbox: named always, with its address when the event has one.
	src := endpoint(e.Client, "")
	if src == nil {
		src = map[string]any{}
	}
	src["name"] = e.Sandbox
	ev["src_endpoint"] = src
	return ev
}

// native is airlock's own view of the event: where it sits in the chain and why it was
// decided so.
func native(e audit.Event, seq uint64, prev, hash string) map[string]any {
	m := map[string]any{"seq": seq, "prev": prev, "hash": hash, "kind": string(e.Kind), "decision": e.Decision, "sandbox": e.Sandbox}
	for k, v := range map[string]string{"rule": e.Rule, "reason": e.Reason, "policy": e.Policy, "error": e.Error,
		"model": e.Model, "provider": e.Provider, "remedy": policy.Reason(e.Reason).Remedy()} {
		if v != "" {
			m[k] = v
		}
	}
	if e.Decision == audit.DecisionReport {
		m["would_deny"] = true
	}
	return m
}

// activity sets activity_id and the names derived from it.
func activity(ev map[string]any, cls, id int, name string) {
	ev["activity_id"], ev["activity_name"] = id, name
	ev["type_uid"] = cls*100 + id
	ev["type_name"] = fmt.Sprintf("%s: %s", classNames[cls], name)
}

func httpActivity(ev map[string]any, e audit.Event) {
	method := strings.ToUpper(e.Method)
	if e.Kind == audit.KindLLM && method == "" {
		method = "POST"
	}
	id, ok := httpActivities[method]
	name := method
	if !ok {
		id, name = 99, "Other"
	} else {
		name = strings.ToUpper(method[:1]) + strings.ToLower(method[1:])
	}
	activity(ev, ClassHTTPActivity, id, name)
	host, port := splitHostPort(e.Destination)
	path := e.Path
	if path == "" {
		path = "/"
	}
	u := map[string]any{"path": path}
	if host != "" {
		u["hostname"] = host
	}
	if port > 0 {
		u["port"] = port
	}
	req := map[string]any{"url": u}
	if method != "" {
		req["http_method"] = method
	}
	ev["http_request"] = req
	if e.Status > 0 {
		ev["http_response"] = map[string]any{"code": e.Status}
		ev["http_status"] = e.Status
	}
	dst(ev, e)
}

func networkActivity(ev map[string]any, e audit.Event) {
	if e.Decision == audit.DecisionDeny {
		activity(ev, ClassNetworkActivity, 5, "Refuse")
	} else {
		activity(ev, ClassNetworkActivity, 1, "Open")
	}
	dst(ev, e)
}

func dnsActivity(ev map[string]any, e audit.Event) {
	// One event per query with its answer (or refusal): bidirectional traffic.
	activity(ev, ClassDNSActivity, 6, "Traffic")
	if e.Destination != "" {
		ev["query"] = map[string]any{"hostname": e.Destination}
	}
	if ep := endpoint(e.Addr, ""); ep != nil {
		ev["dst_endpoint"] = ep
	}
}

// dst sets dst_endpoint (name and port asked for, address dialled) and traffic.
func dst(ev map[string]any, e audit.Event) {
	host, _ := splitHostPort(e.Destination)
	if ep := endpoint(e.Addr, host); ep != nil {
		ev["dst_endpoint"] = ep
	} else if ep := endpoint(e.Destination, ""); ep != nil {
		ev["dst_endpoint"] = ep
	}
	if e.BytesUp > 0 || e.BytesDown > 0 {
		ev["traffic"] = map[string]any{"bytes_out": e.BytesUp, "bytes_in": e.BytesDown, "bytes": e.BytesUp + e.BytesDown}
	}
}

// endpoint is a network_endpoint from host:port (an IP or a name); hostname names it when
// addr is an IP. Nil when addr is empty.
func endpoint(addr, hostname string) map[string]any {
	host, port := splitHostPort(addr)
	if host == "" {
		return nil
	}
	ep := map[string]any{}
	if ip := net.ParseIP(host); ip != nil {
		ep["ip"] = ip.String()
	} else {
		ep["hostname"] = host
	}
	if hostname != "" && hostname != host {
		ep["hostname"] = hostname
	}
	if port > 0 {
		ep["port"] = port
	}
	return ep
}

func splitHostPort(s string) (string, int) {
	host, p, err := net.SplitHostPort(s)
	if err != nil {
		return s, 0
	}
	n, _ := strconv.Atoi(p)
	return host, n
}
