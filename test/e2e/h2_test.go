package e2e

import (
	"fmt"
	"strings"
	"testing"
)

// TestInterceptionHTTP2 runs curl --http2 through the airlock binary to an intercepted test
// host in its own namespace: HTTP/2 is negotiated with the proxy, an allowed path reaches the
// upstream, and the L7 rule denies another path over HTTP/2 as it does over HTTP/1.1.
func TestInterceptionHTTP2(t *testing.T) {
	w, a := setup(t, enforcePolicy)
	caFile := writePEM(t, w, "airlock-ca.pem", a.CAPEM(t))
	for _, tc := range []struct {
		path string
		code int
		body string
	}{
		{"/ok/h2", 200, "method=GET path=/ok/h2"},
		{"/nope-h2", 403, `"reason":"path_not_allowed"`},
	} {
		r := w.Curl(t, "--proxy", a.ProxyURL.String(), "--http2", "--cacert", caFile,
			"--write-out", "\n%{http_code} %{http_version}", "https://intercept.test"+tc.path)
		if r.ExitCode != 0 || !strings.HasSuffix(r.Stdout, fmt.Sprintf("\n%d 2", tc.code)) || !strings.Contains(r.Stdout, tc.body) {
			t.Errorf("curl --http2 %s: %+v; want %d over HTTP/2 with %q", tc.path, r, tc.code, tc.body)
		}
	}
	var paths []string
	for _, r := range w.Intercept.Requests() {
		paths = append(paths, r.Path)
	}
	if strings.Join(paths, ",") != "/ok/h2" {
		t.Errorf("intercept upstream saw %q, want only /ok/h2", paths)
	}
}
