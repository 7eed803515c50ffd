package proxy

import (
	"encoding/json"
	"io"
	"net/http"
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

func TestDenyBodyCarriesTheRemedy(t *testing.T) {
	d := policy.Decision{Reason: policy.ReasonNoRule, Detail: "no rule", Host: "evil.test", Port: 443}
	resp := denyResponse(nil, d, "", 0)
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
}
