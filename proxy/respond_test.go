package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/policy"
)

func TestFailResponsesKeepTheirStatusAndCode(t *testing.T) {
	tests := []struct {
		reason policy.Reason
		status int
		code   string
	}{
		{policy.ReasonResolveFailed, 502, "upstream_unreachable"},
		{policy.ReasonConnectFailed, 502, "upstream_unreachable"},
		{policy.ReasonUpgradeUnsupported, 502, "upstream_unreachable"},
		{policy.ReasonTimeout, 504, "upstream_timeout"},
		{policy.ReasonInjectionFailed, 503, "credential_unavailable"},
		{policy.ReasonBodyLimit, 413, "request_too_large"},
		{policy.ReasonTunnelLimit, 429, "too_many_tunnels"},
		{policy.ReasonNotProxyRequest, 400, "bad_request"},
		{policy.ReasonUnsupportedScheme, 400, "bad_request"},
	}
	for _, tc := range tests {
		t.Run(string(tc.reason), func(t *testing.T) {
			resp := failResponse(nil, tc.reason, "h.test", 443)
			var b failedBody
			raw, _ := io.ReadAll(resp.Body)
			if err := json.Unmarshal(raw, &b); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.status || b.Error != tc.code || b.Reason != string(tc.reason) {
				t.Errorf("got %d %s %s, want %d %s %s", resp.StatusCode, b.Error, b.Reason, tc.status, tc.code, tc.reason)
			}
		})
	}
}

func TestDenyBodyCarriesTheRemedyAndPolicy(t *testing.T) {
	d := policy.Decision{Reason: policy.ReasonNoRule, Detail: "no rule", Host: "evil.test", Port: 443}
	pol, err := policy.Builtin("offline")
	if err != nil {
		t.Fatal(err)
	}
	resp := denyResponse(nil, d, pol, "", 0)
	raw, _ := io.ReadAll(resp.Body)
	var b deniedBody
	if err := json.Unmarshal(raw, &b); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get(headerDecision) != "deny" {
		t.Errorf("got %d %q, want 403 deny", resp.StatusCode, resp.Header.Get(headerDecision))
	}
	if want := policy.ReasonNoRule.Remedy(); b.Remedy != want || want == "" {
		t.Errorf("remedy: got %q, want %q", b.Remedy, want)
	}
	if b.Policy != "offline" {
		t.Errorf("policy: got %q, want %q", b.Policy, "offline")
	}
}

// TestApprovalDenials: a denial the approval stage made carries the ask in the "approval"
// field, and approval_pending a Retry-After of the policy's hold.
func TestApprovalDenials(t *testing.T) {
	pol := mustPolicy(t, "apiVersion: airlock/v1\nkind: EgressPolicy\nmetadata: {name: asks}\nspec:\n  approval: {hold: 2500ms}\n")
	for _, tc := range []struct {
		reason    policy.Reason
		status    string
		wantRetry string
	}{
		{policy.ReasonApprovalPending, "pending", "3"},
		{policy.ReasonApprovalDenied, "denied", ""},
	} {
		d := policy.Decision{Reason: tc.reason, Host: "new.example.org", Port: 443, Ask: "abc123", Detail: "ask abc123: ..."}
		resp := denyResponse(nil, d, pol, "", 0)
		body, _ := io.ReadAll(resp.Body)
		var got struct {
			Reason   string            `json:"reason"`
			Approval map[string]string `json:"approval"`
		}
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 403 || got.Reason != string(tc.reason) || got.Approval["id"] != "abc123" || got.Approval["status"] != tc.status {
			t.Errorf("%s: %d %s", tc.reason, resp.StatusCode, body)
		}
		if r := resp.Header.Get("Retry-After"); r != tc.wantRetry {
			t.Errorf("%s: Retry-After %q, want %q", tc.reason, r, tc.wantRetry)
		}
	}
	plain := denyResponse(nil, policy.Decision{Reason: policy.ReasonNoRule, Host: "x.example"}, pol, "", 0)
	if body, _ := io.ReadAll(plain.Body); strings.Contains(string(body), `"approval"`) || plain.Header.Get("Retry-After") != "" {
		t.Errorf("a plain denial: %s", body)
	}
}
