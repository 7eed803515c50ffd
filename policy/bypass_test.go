package policy

import (
	"testing"
)

const overridePolicy = `apiVersion: airlock/v1
kind: EgressPolicy
metadata: {name: override-test}
spec:
  egress:
    - name: read-only
      hosts: [api.example.com]
      ports: [443]
      http:
        - methods: [GET, HEAD]
    - name: any-method
      hosts: [open.example.com]
      ports: [443]
      http:
        - paths: ["/v1/**"]
    - name: paths
      hosts: [paths.example.com]
      ports: [443]
      http:
        - methods: [GET]
          paths: ["/public/**"]
`

// TestDecideMethodOverride: where a rule limits methods, a request carrying a method
// override, as a header or as a query parameter in any spelling a framework may read, is
// denied with ReasonMethodOverride; where the rule allows every method it is harmless.
func TestDecideMethodOverride(t *testing.T) {
	p := mustParse(t, overridePolicy)
	headers := []string{"X-HTTP-Method-Override", "x-http-method-override", "X-HTTP-Method", "X-Method-Override",
		"X_HTTP_METHOD_OVERRIDE", "x-Http-Method", "X-Original-Method-Override", "_method"}
	for _, h := range headers {
		t.Run("header "+h, func(t *testing.T) {
			if !IsMethodOverrideHeader(h) {
				t.Fatalf("IsMethodOverrideHeader(%q) = false, want true", h)
			}
			d := p.Decide(Request{Host: "api.example.com", Port: 443, Method: "GET", Path: "/x", OverrideHeader: h})
			wantDecision{Deny, false, "read-only", ReasonMethodOverride, "", "", false, "api.example.com", 443}.check(t, d)
		})
	}
	for _, h := range []string{"X-HTTP-Methods", "Method", "Accept", "X-Request-Method-Id"} {
		if IsMethodOverrideHeader(h) {
			t.Errorf("IsMethodOverrideHeader(%q) = true, want false", h)
		}
	}
	queries := []string{"?_method=DELETE", "?_METHOD=delete", "?a=1&_method=DELETE", "?a=1;_method=DELETE",
		"?%5Fmethod=DELETE", "?%5fMETHOD=DELETE", "?%255Fmethod=DELETE", "?_method[]=DELETE", "?%20_method=DELETE",
		"?_method=GET&_method=DELETE", "?.method=DELETE", "?[method=DELETE", "?_method", "?_method%20=x",
		"?x-http-method-override=DELETE", "?X_HTTP_METHOD=PUT", "?a=b&%2525255Fmethod=DELETE"}
	for _, q := range queries {
		t.Run("query "+q, func(t *testing.T) {
			d := p.Decide(Request{Host: "api.example.com", Port: 443, Method: "GET", Path: "/x" + q})
			wantDecision{Deny, false, "read-only", ReasonMethodOverride, "", "", false, "api.example.com", 443}.check(t, d)
		})
	}
	for _, q := range []string{"?method=card", "?my_method=x", "?x=_method", "#_method=DELETE", "?methods=1"} {
		t.Run("harmless "+q, func(t *testing.T) {
			d := p.Decide(Request{Host: "api.example.com", Port: 443, Method: "GET", Path: "/x" + q})
			wantDecision{Allow, false, "read-only", ReasonRuleMatched, "", "", true, "api.example.com", 443}.check(t, d)
		})
	}
	t.Run("rule without methods", func(t *testing.T) {
		d := p.Decide(Request{Host: "open.example.com", Port: 443, Method: "GET", Path: "/v1/x?_method=DELETE",
			OverrideHeader: "X-HTTP-Method-Override"})
		wantDecision{Allow, false, "any-method", ReasonRuleMatched, "", "", true, "open.example.com", 443}.check(t, d)
	})
	t.Run("methods and paths", func(t *testing.T) {
		d := p.Decide(Request{Host: "paths.example.com", Port: 443, Method: "GET", Path: "/public/x?_method=DELETE"})
		wantDecision{Deny, false, "paths", ReasonMethodOverride, "", "", false, "paths.example.com", 443}.check(t, d)
	})
}

// TestDecideAmbiguousPath: on a rule with paths, a path a server could read as another one
// is denied with ReasonAmbiguousPath; a rule without paths does not look at the path.
func TestDecideAmbiguousPath(t *testing.T) {
	p := mustParse(t, overridePolicy)
	for _, path := range []string{"/public/%C0%AE%C0%AE/secret", "/public/%E0%80%AE%E0%80%AE/secret",
		"/public%C0%AFsecret", "/public/%EF%BC%8E%EF%BC%8E/secret", "/public/\uff0e\uff0e/secret",
		"/public/%E2%80%A4%E2%80%A4/secret", "/public/%E2%80%A5/secret", "/public%EF%BC%8Fsecret",
		"/public/%252e%252e/secret"} {
		t.Run(path, func(t *testing.T) {
			d := p.Decide(Request{Host: "paths.example.com", Port: 443, Method: "GET", Path: path})
			wantDecision{Deny, false, "paths", ReasonAmbiguousPath, "", "", false, "paths.example.com", 443}.check(t, d)
		})
	}
	d := p.Decide(Request{Host: "api.example.com", Port: 443, Method: "GET", Path: "/%C0%AE"})
	wantDecision{Allow, false, "read-only", ReasonRuleMatched, "", "", true, "api.example.com", 443}.check(t, d)
}
