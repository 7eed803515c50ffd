package policy

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// Explanation is the decision a policy makes for one request, as `airlock policy explain`
// shows it: names only, never secret values. Its JSON form is the command's --json output.
type Explanation struct {
	URL       string   `json:"url"`
	Method    string   `json:"method"`
	Decision  string   `json:"decision"`
	WouldDeny bool     `json:"would_deny"`
	Rule      string   `json:"rule"`
	Reason    string   `json:"reason"`
	Detail    string   `json:"detail"`
	Host      string   `json:"host"`
	Port      int      `json:"port"`
	Intercept bool     `json:"intercept"`
	Secrets   []string `json:"secrets"`
	// Grant is the ID of the operator's grant that allows the request (spec.approval), when
	// the policy was given its grants (WithGrants); empty when a written rule decides.
	Grant string `json:"grant,omitempty"`
	// Identity is the spec.identities name whose policy decided; empty for the sandbox's own.
	Identity string `json:"identity,omitempty"`
}

// Explain decides the request for rawURL and method the way the sidecar would (DecideAddr)
// and describes the decision. It returns an error only when rawURL is not a usable
// http(s) URL (see RequestFromURL).
func (p *Policy) Explain(rawURL, method string) (Explanation, error) {
	req, err := RequestFromURL(rawURL, method)
	if err != nil {
		return Explanation{}, err
	}
	d := p.DecideAddr(req)
	ex := Explanation{
		URL: rawURL, Method: req.Method, Decision: d.Verdict.String(), WouldDeny: d.WouldDeny,
		Rule: d.Rule, Reason: string(d.Reason), Detail: d.Detail, Host: d.Host, Port: d.Port,
		Intercept: d.Intercept, Secrets: d.Secrets, Grant: d.Grant, Identity: p.identity,
	}
	if ex.Secrets == nil {
		ex.Secrets = []string{}
	}
	return ex, nil
}

// String is the explanation as `airlock policy explain` prints it: one "label: value" line
// per fact, intercept and secrets only for an allowed request.
func (ex Explanation) String() string {
	var b strings.Builder
	decision := ex.Decision
	if ex.WouldDeny {
		decision = "allow (report mode: enforce would deny)"
	}
	fmt.Fprintf(&b, "decision:  %s\n", decision)
	fmt.Fprintf(&b, "request:   %s %s (host %s, port %d)\n", ex.Method, ex.URL, ex.Host, ex.Port)
	if ex.Identity != "" {
		fmt.Fprintf(&b, "identity:  %s\n", ex.Identity)
	}
	rule := ex.Rule
	if rule == "" {
		rule = "(none)"
	}
	fmt.Fprintf(&b, "rule:      %s\n", rule)
	fmt.Fprintf(&b, "reason:    %s: %s\n", ex.Reason, ex.Detail)
	if ex.Grant != "" {
		fmt.Fprintf(&b, "grant:     %s (the operator's grant, not a written rule: airlock approvals list)\n", ex.Grant)
	}
	if ex.Decision == "allow" {
		fmt.Fprintf(&b, "intercept: %t\n", ex.Intercept)
		secrets := "(none)"
		if len(ex.Secrets) > 0 {
			secrets = strings.Join(ex.Secrets, ", ")
		}
		fmt.Fprintf(&b, "secrets:   %s\n", secrets)
	}
	return b.String()
}

// RequestFromURL turns an http:// or https:// URL and a method into decision facts. The
// method is upper-cased; an empty path is "/".
func RequestFromURL(raw, method string) (Request, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Request{}, err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return Request{}, fmt.Errorf("scheme %q: use http:// or https://", u.Scheme)
	}
	if u.Host == "" {
		return Request{}, errors.New("no host: use a full URL such as https://example.com/")
	}
	port := 0
	if ps := u.Port(); ps != "" {
		port, err = strconv.Atoi(ps)
		if err != nil || port < 1 || port > 65535 {
			return Request{}, fmt.Errorf("bad port %q", ps)
		}
	}
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	return Request{Scheme: u.Scheme, Host: u.Hostname(), Port: port, Method: strings.ToUpper(method), Path: path}, nil
}

// DecideAddr decides req and, when its host is an IP literal, also checks that address the
// way the proxy's SSRF guard will at run time (CheckAddr).
func (p *Policy) DecideAddr(req Request) Decision {
	d := p.Decide(req)
	if d.Verdict != Allow || d.WouldDeny {
		return d
	}
	h, err := NormalizeHost(req.Host)
	if err != nil || !h.IsIP() {
		return d
	}
	if a := p.CheckAddr(h.Name, d.Port, h.Addr); !a.Allowed() || a.WouldDeny {
		a.Host, a.Port = d.Host, d.Port
		if a.Rule == "" {
			a.Rule = d.Rule
		}
		return a
	}
	return d
}
