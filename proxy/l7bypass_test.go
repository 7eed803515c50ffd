package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// countingEcho counts the requests that reach it, then echoes.
func countingEcho(n *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		echo().ServeHTTP(w, r)
	})
}

// TestMethodOverrideRefused: a GET-only rule never forwards a request that asks the server
// to run another method, whichever header or parameter spelling carries it.
func TestMethodOverrideRefused(t *testing.T) {
	h := newHarness(t, mustPolicy(t, policyDoc("l7", "enforce", l7Egress)))
	var reached atomic.Int64
	h.route(addrAPI, 443, h.upstream.tlsServer(t, countingEcho(&reached), "api.test"))
	c := h.client(h.airlockRoots())
	tests := []struct {
		name, path, header string
	}{
		{name: "X-HTTP-Method-Override", path: "/repos/acme/app", header: "X-HTTP-Method-Override"},
		{name: "X-HTTP-Method", path: "/repos/acme/app", header: "X-HTTP-Method"},
		{name: "X-Method-Override", path: "/repos/acme/app", header: "X-Method-Override"},
		{name: "underscored header", path: "/repos/acme/app", header: "X_HTTP_METHOD_OVERRIDE"},
		{name: "lower-case header", path: "/repos/acme/app", header: "x-http-method-override"},
		{name: "_method", path: "/repos/acme/app?_method=DELETE"},
		{name: "_METHOD", path: "/repos/acme/app?_METHOD=delete"},
		{name: "encoded name", path: "/repos/acme/app?%5Fmethod=DELETE"},
		{name: "double-encoded name", path: "/repos/acme/app?%255Fmethod=DELETE"},
		{name: "after another parameter", path: "/repos/acme/app?page=2&_method=DELETE"},
		{name: "semicolon separator", path: "/repos/acme/app?page=2;_method=DELETE"},
		{name: "array name", path: "/repos/acme/app?_method[]=DELETE"},
		{name: "repeated", path: "/repos/acme/app?_method=GET&_method=DELETE"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest("GET", "https://api.test"+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.header != "" {
				req.Header[tc.header] = []string{"DELETE"} // as sent, not canonicalised
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body := readAll(t, resp)
			if resp.StatusCode != http.StatusForbidden {
				t.Fatalf("got %d %s, want 403", resp.StatusCode, body)
			}
			if d := deniedJSON(t, body); d.Reason != "method_override" || d.Rule != "github" {
				t.Errorf("got %+v, want reason method_override rule github", d)
			}
		})
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("%d override requests reached the upstream, want 0", n)
	}
	// A plain GET still passes.
	if resp, body := get(t, c, "GET", "https://api.test/repos/acme/app?page=2", nil); resp.StatusCode != 200 {
		t.Fatalf("plain GET: got %d %s", resp.StatusCode, body)
	}
}

// TestAmbiguousPathRefused: on a rule with paths, paths a server could read as climbing out
// of the allowed prefix (overlong UTF-8, fullwidth and leader dots, double encoding) never
// reach the upstream.
func TestAmbiguousPathRefused(t *testing.T) {
	h := newHarness(t, mustPolicy(t, policyDoc("l7", "enforce", l7Egress)))
	var reached atomic.Int64
	h.route(addrAPI, 443, h.upstream.tlsServer(t, countingEcho(&reached), "api.test"))
	c := h.client(h.airlockRoots())
	for _, path := range []string{
		"/repos/acme/%C0%AE%C0%AE/other",               // overlong "." (2 bytes)
		"/repos/acme/%E0%80%AE%E0%80%AE/other",         // overlong "." (3 bytes)
		"/repos/acme/..%C0%AFother",                    // overlong "/"
		"/repos/acme/%EF%BC%8E%EF%BC%8E/other",         // fullwidth full stop
		"/repos/acme/%EF%BC%8E%EF%BC%8E%EF%BC%8Fother", // fullwidth dots and solidus
		"/repos/acme/%E2%80%A4%E2%80%A4/other",         // one dot leader
		"/repos/acme/%E2%80%A5/other",                  // two dot leader
		"/repos/acme/%252e%252e/other",                 // double-encoded
		"/repos/acme/%25c0%25ae%25c0%25ae/other",       // double-encoded overlong
	} {
		t.Run(path, func(t *testing.T) {
			resp, body := get(t, c, "GET", "https://api.test"+path, nil)
			if resp.StatusCode != http.StatusForbidden {
				t.Fatalf("got %d %s, want 403", resp.StatusCode, body)
			}
			if d := deniedJSON(t, body); d.Reason != "ambiguous_path" {
				t.Errorf("got %+v, want reason ambiguous_path", d)
			}
		})
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("%d ambiguous paths reached the upstream, want 0", n)
	}
}

// readAll reads and closes a response body.
func readAll(t testing.TB, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return string(b)
}

// TestFormMethodOverrideRefused: where a rule limits methods, a form body's _method (which
// Rails, Laravel and Symfony honour on POST) is refused too; other bodies pass untouched.
func TestFormMethodOverrideRefused(t *testing.T) {
	egress := `    - name: post
      hosts: ["api.test"]
      ports: [443]
      http:
        - methods: [GET, POST]
`
	h := newHarness(t, mustPolicy(t, policyDoc("form", "enforce", egress)))
	h.route(addrAPI, 443, h.upstream.tlsServer(t, echo(), "api.test"))
	c := h.client(h.airlockRoots())
	tests := []struct {
		name, ctype, body string
		status            int
	}{
		{"form _method", "application/x-www-form-urlencoded", "title=x&_method=DELETE", 403},
		{"form encoded name", "application/x-www-form-urlencoded; charset=utf-8", "%5Fmethod=delete", 403},
		{"form upper-case type", "Application/X-WWW-Form-Urlencoded", "_METHOD=PUT", 403},
		{"form without override", "application/x-www-form-urlencoded", "title=x&body=y", 200},
		{"json mentioning _method", "application/json", `{"_method":"DELETE"}`, 200},
		{"multipart _method", "multipart/form-data; boundary=XyZ", multipartBody("XyZ", "title", "x", "_method", "DELETE"), 403},
		{"multipart _method last", "multipart/form-data; boundary=XyZ",
			multipartBody("XyZ", "file", strings.Repeat("a", 100<<10), "_method", "DELETE"), 403},
		{"multipart without override", "multipart/form-data; boundary=XyZ",
			multipartBody("XyZ", "file", strings.Repeat("a", 100<<10), "title", "x"), 200},
		{"multipart malformed", "multipart/form-data; boundary=XyZ", "--XyZ\r\nno header end", 403},
		{"multipart without boundary", "multipart/form-data", "x", 403},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", "https://api.test/issues", strings.NewReader(tc.body))
			req.Header.Set("Content-Type", tc.ctype)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body := readAll(t, resp)
			if resp.StatusCode != tc.status {
				t.Fatalf("got %d %s, want %d", resp.StatusCode, body, tc.status)
			}
			if tc.status == 403 && deniedJSON(t, body).Reason != "method_override" {
				t.Errorf("got %s, want reason method_override", body)
			}
			if tc.status == 200 && !strings.Contains(body, fmt.Sprintf("body=%d", len(tc.body))) {
				t.Errorf("the upstream got %s, want the whole body", body)
			}
		})
	}
}

// multipartBody is a multipart/form-data body of name, value pairs.
func multipartBody(boundary string, kv ...string) string {
	var b strings.Builder
	for i := 0; i+1 < len(kv); i += 2 {
		fmt.Fprintf(&b, "--%s\r\nContent-Disposition: form-data; name=%q\r\n\r\n%s\r\n", boundary, kv[i], kv[i+1])
	}
	fmt.Fprintf(&b, "--%s--\r\n", boundary)
	return b.String()
}
