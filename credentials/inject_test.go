package credentials

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/airlock-dev/airlock/policy"
)

type fixedPolicy struct{ p *policy.Policy }

func (f fixedPolicy) Current() *policy.Policy { return f.p }

const injectPolicy = `apiVersion: airlock/v1
kind: EgressPolicy
metadata: {name: inject-test}
spec:
  egress:
    - name: api
      hosts: [api.test]
      inject:
        - header: Authorization
          value: 'Bearer {{ secret "tok" }}'
    - name: query
      hosts: [q.test]
      placeholderIn: [header, query, body]
      inject:
        - header: X-Key
          value: '{{ secret "key" }}'
    - name: plain
      hosts: [plain.test]
      allowCleartext: true
      inject:
        - header: X-Key
          value: '{{ secret "key" }}'
    - name: basic
      hosts: [basic.test]
      inject:
        - header: Authorization
          value: 'Basic {{ basic "x-access-token" "tok" }}'
    - name: open
      hosts: [open.test]
  secrets:
    tok: {env: TEST_TOK}
    key: {env: TEST_KEY}
`

type harness struct {
	b   *Broker
	pol *policy.Policy
	ph  *Placeholders
	env map[string]string
	reg *prometheus.Registry
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	pol, err := policy.Parse("inject.yaml", []byte(injectPolicy))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{pol: pol, ph: NewPlaceholders([]byte("0123456789abcdef0123456789abcdef")),
		env: map[string]string{"TEST_TOK": "tok-value-123", "TEST_KEY": "key/value+456"}, reg: prometheus.NewRegistry()}
	h.b, err = New(Config{Policy: fixedPolicy{pol}, Placeholders: h.ph, Registerer: h.reg,
		Env: EnvSource{Lookup: func(k string) (string, bool) { v, ok := h.env[k]; return v, ok }}})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *harness) do(t *testing.T, method, rawURL string, hdr http.Header, body string) (*http.Request, error) {
	t.Helper()
	var rb io.Reader
	if body != "" {
		rb = strings.NewReader(body)
	}
	r := httptest.NewRequest(method, rawURL, rb)
	for k, v := range hdr {
		r.Header[k] = v
	}
	d := h.pol.Decide(policy.Request{Scheme: r.URL.Scheme, Host: r.URL.Hostname(), Method: method, Path: r.URL.EscapedPath()})
	if !d.Allowed() {
		t.Fatalf("policy denies %s: %s", rawURL, d.Detail)
	}
	return r, h.b.Inject(r, d)
}

func TestInjectHeaderOverwrites(t *testing.T) {
	h := newHarness(t)
	r, err := h.do(t, "GET", "https://api.test/x", http.Header{"Authorization": {"Bearer sandbox-made-this-up", "second"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Header.Values("Authorization"); len(got) != 1 || got[0] != "Bearer tok-value-123" {
		t.Fatalf("Authorization: got %q, want the injected value only", got)
	}
	if got := testutil.ToFloat64(h.b.metrics.injections.WithLabelValues("tok")); got != 1 {
		t.Fatalf("injections{tok}: got %v, want 1", got)
	}
}

func TestPlaceholders(t *testing.T) {
	h := newHarness(t)
	tok, key := h.ph.For("tok"), h.ph.For("key")
	for _, tc := range []struct {
		name   string
		method string
		url    string
		hdr    http.Header
		body   string
		misuse bool
		check  func(*http.Request) string
	}{
		{name: "header on its rule", method: "GET", url: "https://api.test/", hdr: http.Header{"X-Tool": {"token " + tok}},
			check: func(r *http.Request) string { return r.Header.Get("X-Tool") }},
		{name: "basic auth on its rule", method: "GET", url: "https://api.test/",
			hdr: http.Header{"Proxy-Foo": {"Basic " + base64.StdEncoding.EncodeToString([]byte("git:"+tok))}},
			check: func(r *http.Request) string {
				d, _ := base64.StdEncoding.DecodeString(r.Header.Get("Proxy-Foo")[6:])
				return string(d)
			}},
		{name: "header to an unbound host", method: "GET", url: "https://open.test/", hdr: http.Header{"X-Tool": {tok}}, misuse: true},
		{name: "other secret's placeholder", method: "GET", url: "https://api.test/", hdr: http.Header{"X-Tool": {key}}, misuse: true},
		{name: "basic auth to an unbound host", method: "GET", url: "https://open.test/",
			hdr: http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte("u:"+tok))}}, misuse: true},
		{name: "query not allowed", method: "GET", url: "https://api.test/?t=" + tok, misuse: true},
		{name: "query escaped not allowed", method: "GET", url: "https://api.test/?t=" + strings.ReplaceAll(tok, ":", "%3A"), misuse: true},
		{name: "path never", method: "GET", url: "https://q.test/" + key, misuse: true},
		{name: "forged placeholder", method: "GET", url: "https://api.test/", hdr: http.Header{"X-Tool": {"airlock-placeholder:tok:0000"}}, misuse: true},
		{name: "query allowed", method: "GET", url: "https://q.test/?k=" + key,
			check: func(r *http.Request) string { return r.URL.Query().Get("k") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := h.do(t, tc.method, tc.url, tc.hdr, tc.body)
			var re *RefusalError
			if tc.misuse {
				if !errors.As(err, &re) || !errors.Is(err, ErrMisuse) || re.DenyReason() != policy.ReasonCredentialMisuse {
					t.Fatalf("got %v, want a misuse refusal", err)
				}
				if strings.Contains(err.Error(), "value") && strings.Contains(err.Error(), "123") {
					t.Fatalf("refusal text holds a value: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("got %v, want the placeholder swapped", err)
			}
			got := tc.check(r)
			if !strings.Contains(got, "tok-value-123") && !strings.Contains(got, "key/value+456") {
				t.Fatalf("got %q, want the secret value swapped in", got)
			}
			if strings.Contains(got, PlaceholderPrefix) {
				t.Fatalf("placeholder left in %q", got)
			}
		})
	}
	if got := testutil.ToFloat64(h.b.metrics.misuse.WithLabelValues("tok")); got < 4 {
		t.Fatalf("misuse{tok}: got %v, want at least 4", got)
	}
}

func TestPlaceholderBody(t *testing.T) {
	h := newHarness(t)
	key := h.ph.For("key")
	r, err := h.do(t, "POST", "https://q.test/", nil, `{"key":"`+key+`"}`)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(r.Body)
	if err != nil || string(b) != `{"key":"key/value+456"}` || r.ContentLength != -1 {
		t.Fatalf("body: got %q, %v, length %d", b, err, r.ContentLength)
	}
	r, err = h.do(t, "POST", "https://api.test/", nil, `{"key":"`+h.ph.For("tok")+`"}`)
	if err != nil {
		t.Fatal(err)
	}
	b, err = io.ReadAll(r.Body)
	var ref interface{ DenyReason() policy.Reason }
	if !errors.As(err, &ref) || strings.Contains(string(b), "airlock-placeholder") {
		t.Fatalf("body to a rule without body placeholders: got %q, %v; want a refusal before the placeholder", b, err)
	}
}

func TestCleartext(t *testing.T) {
	h := newHarness(t)
	_, err := h.do(t, "GET", "http://api.test/", nil, "")
	var re *RefusalError
	if !errors.As(err, &re) || re.DenyReason() != policy.ReasonCredentialCleartext {
		t.Fatalf("got %v, want a cleartext refusal", err)
	}
	r, err := h.do(t, "GET", "http://plain.test/", nil, "")
	if err != nil || r.Header.Get("X-Key") != "key/value+456" {
		t.Fatalf("allowCleartext rule: got %v, header %q", err, r.Header.Get("X-Key"))
	}
}

func TestInjectFailsClosed(t *testing.T) {
	h := newHarness(t)
	delete(h.env, "TEST_TOK")
	r, err := h.do(t, "GET", "https://api.test/", http.Header{"Authorization": {"Bearer sandbox"}}, "")
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("got %v, want ErrUnavailable", err)
	}
	_ = r
	if got := testutil.ToFloat64(h.b.metrics.failures.WithLabelValues("tok")); got != 1 {
		t.Fatalf("failures{tok}: got %v, want 1", got)
	}
	if _, err := h.b.Value(context.Background(), "nope"); !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrUnknownSecret) {
		t.Fatalf("Value of an unknown secret: got %v", err)
	}
}

// TestFilterResponse: a body of known length in identity encoding keeps its length (the
// value masked with '*'); a body of unknown length gets [REDACTED] and no Content-Length.
func TestFilterResponse(t *testing.T) {
	h := newHarness(t)
	if _, err := h.b.Value(context.Background(), "tok"); err != nil {
		t.Fatal(err)
	}
	const body = "you sent tok-value-123 to me.."
	for _, tc := range []struct {
		name     string
		length   int64
		wantBody string
		wantLen  int64
	}{
		{"known length", int64(len(body)), "you sent ************* to me..", int64(len(body))},
		{"unknown length", -1, "you sent [REDACTED] to me..", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := http.Header{"X-Echo": {"tok-value-123"}}
			if tc.length >= 0 {
				hdr.Set("Content-Length", strconv.FormatInt(tc.length, 10))
			}
			resp := &http.Response{StatusCode: 200, Header: hdr, Body: io.NopCloser(strings.NewReader(body)), ContentLength: tc.length}
			resp, err := h.b.FilterResponse(resp, true)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			if string(b) != tc.wantBody || resp.ContentLength != tc.wantLen || resp.Header.Get("X-Echo") != Redacted {
				t.Fatalf("got body %q header %q length %d, want body %q length %d", b, resp.Header.Get("X-Echo"), resp.ContentLength, tc.wantBody, tc.wantLen)
			}
			if tc.wantLen >= 0 && resp.Header.Get("Content-Length") != strconv.FormatInt(tc.wantLen, 10) {
				t.Fatalf("Content-Length %q, want %d", resp.Header.Get("Content-Length"), tc.wantLen)
			}
		})
	}
}

// TestInjectBasic: a Basic credential built from a secret is sent, and its base64 form
// (which the redactor cannot derive from the value alone) is scrubbed from responses.
func TestInjectBasic(t *testing.T) {
	h := newHarness(t)
	r, err := h.do(t, "GET", "https://basic.test/", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	user, pass, ok := r.BasicAuth()
	if !ok || user != "x-access-token" || pass != "tok-value-123" {
		t.Fatalf("Basic credentials: got %q %q %v", user, pass, ok)
	}
	tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Basic ")
	if got := h.b.Redactor().String("echo " + tok); got != "echo "+Redacted {
		t.Fatalf("redacted echo: got %q", got)
	}
}

// TestSwapperFollowsValues: the memoised swapper of a value set is never used for another
// (a rotated secret swaps in its new value), and the memo stays bounded.
func TestSwapperFollowsValues(t *testing.T) {
	h := newHarness(t)
	ph := h.ph.For("tok")
	for _, v := range []string{"first-value", "second-value", "first-value"} {
		got := mustString(h.b.swapper(map[string]string{"tok": v}).raw, "Bearer "+ph)
		if got != "Bearer "+v {
			t.Fatalf("swapped %q, want the value %q", got, v)
		}
	}
	for i := range 3 * maxSwappers {
		h.b.swapper(map[string]string{"tok": fmt.Sprintf("value-%d", i)})
	}
	h.b.swapMu.Lock()
	n := len(h.b.swaps)
	h.b.swapMu.Unlock()
	if n > maxSwappers {
		t.Fatalf("%d swappers remembered, want at most %d", n, maxSwappers)
	}
}

// TestSwapperKeyShortcut: the key of one value (made without sorting) and of none are those
// the general form makes.
func TestSwapperKeyShortcut(t *testing.T) {
	general := func(values map[string]string) string {
		var k strings.Builder
		for _, n := range slices.Sorted(maps.Keys(values)) {
			k.WriteString(n + "\x00" + values[n] + "\x00")
		}
		return k.String()
	}
	for _, values := range []map[string]string{{}, {"tok": "v1"}, {"a": "", "": "b"}, {"a": "1", "b": "2", "c": "3"}} {
		if got, want := swapperKey(values), general(values); got != want {
			t.Errorf("swapperKey(%v) = %q, want %q", values, got, want)
		}
	}
}
