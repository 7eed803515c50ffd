package credentials

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/policy"
)

// BenchmarkInjectAndFilter is the broker's work on one intercepted request with a cached
// secret: header injection, placeholder checks, and scrubbing a 1 KiB response.
func BenchmarkInjectAndFilter(b *testing.B) {
	t := &testing.T{}
	h := newHarness(t)
	if _, err := h.b.Value(context.Background(), "tok"); err != nil {
		b.Fatal(err)
	}
	d := h.pol.Decide(policy.Request{Scheme: "https", Host: "api.test", Method: "GET", Path: "/x"})
	body := strings.Repeat("a", 1024)
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest("GET", "https://api.test/x", nil)
		r.Header.Set("Accept", "application/json")
		if err := h.b.Inject(r, d); err != nil {
			b.Fatal(err)
		}
		resp, err := h.b.FilterResponse(&http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/plain"}},
			Body: io.NopCloser(strings.NewReader(body))}, true)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			b.Fatal(err)
		}
	}
}
