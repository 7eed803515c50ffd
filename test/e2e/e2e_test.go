//go:build linux

package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/test/testnet"
)

// Curl exit codes the tests rely on (curl(1) "EXIT CODES").
const (
	curlExitSSLCACert = 60 // peer certificate cannot be authenticated with known CA certificates
	curlExitRecvError = 56 // failure receiving network data; also "CONNECT tunnel failed, response 403"
)

func TestAllowedHTTP(t *testing.T) {
	w, a := setup(t, enforcePolicy)

	r := curlProxy(t, w, a, "http://allowed.test/curl-plain")
	want := testnet.ResponseBody(w.Allowed.Addr, 80, testnet.NameAllowed, "GET", "/curl-plain")
	if r.ExitCode != 0 || r.Code != 200 || r.Body != want {
		t.Errorf("curl: %v; want exit 0, 200, body %q", r, want)
	}
	e := exactlyOneEvent(t, w, a, "allow event for curl", httpEvent("allowed.test:80", "/curl-plain"))
	checkEvent(t, e, testnet.AuditEvent{
		Sandbox: sandboxName, Kind: "http", Decision: "allow", Rule: "allowed",
		Destination: "allowed.test:80", Addr: "198.18.0.10:80", Method: "GET", Path: "/curl-plain", Status: 200,
	})
	if e.BytesDown < int64(len(want)) {
		t.Errorf("audit bytes_down: got %d, want at least the body's %d bytes", e.BytesDown, len(want))
	}
	// The same line is in the --audit-log file.
	found := false
	for _, fe := range a.FileEvents(t) {
		found = found || fe.Line == e.Line
	}
	if !found {
		t.Errorf("audit log file %s lacks the event %s", a.AuditFile, e.Line)
	}

	// A Go client, to the 198.19.0.0/16 half of the range.
	resp, body := get(t, a.Client(t, nil), "http://api.allowed.test/go-plain?q=1")
	want = testnet.ResponseBody(w.API.Addr, 80, testnet.NameAPI, "GET", "/go-plain")
	if resp.StatusCode != 200 || body != want {
		t.Errorf("go client: got %d %q, want 200 %q", resp.StatusCode, body, want)
	}
	reqs := w.API.Requests()
	if len(reqs) != 1 || reqs[0].Host != testnet.NameAPI || reqs[0].Path != "/go-plain?q=1" {
		t.Errorf("api upstream saw %+v, want one request for api.allowed.test /go-plain?q=1", reqs)
	}
	e = a.WaitEvent(t, "allow event for go client", httpEvent("api.allowed.test:80", "/go-plain"))
	checkEvent(t, e, testnet.AuditEvent{Kind: "http", Decision: "allow", Rule: "allowed", Addr: "198.19.0.10:80", Status: 200})
}

func TestAllowedHTTPSTunnel(t *testing.T) {
	w, a := setup(t, enforcePolicy)

	// A plain CONNECT tunnel: the client talks TLS to the upstream itself and trusts the test
	// CA only.
	r := curlProxy(t, w, a, "--cacert", w.CA.File, "https://allowed.test/curl-tls")
	want := testnet.ResponseBody(w.Allowed.Addr, 443, testnet.NameAllowed, "GET", "/curl-tls")
	if r.ExitCode != 0 || r.Code != 200 || r.ConnectCode != 200 || r.Body != want {
		t.Errorf("curl: %v; want exit 0, CONNECT 200, 200, body %q", r, want)
	}

	resp, body := get(t, a.Client(t, w.CA.Pool()), "https://api.allowed.test/go-tls")
	want = testnet.ResponseBody(w.API.Addr, 443, testnet.NameAPI, "GET", "/go-tls")
	if resp.StatusCode != 200 || body != want {
		t.Errorf("go client: got %d %q, want 200 %q", resp.StatusCode, body, want)
	}
	// Not intercepted: the certificate the client saw is the upstream's own.
	if pc := resp.TLS.PeerCertificates; len(pc) == 0 || pc[0].CheckSignatureFrom(w.CA.Cert) != nil {
		t.Errorf("go client: the leaf was not signed by the upstream's test CA: the tunnel was intercepted")
	}
	for _, u := range []*testnet.Upstream{w.Allowed, w.API} {
		reqs := u.Requests()
		if len(reqs) != 1 || !reqs[0].TLS || !strings.HasSuffix(reqs[0].SNI, "allowed.test") {
			t.Errorf("upstream %s saw %+v, want one TLS request with the client's SNI", u.Addr, reqs)
		}
	}
	e := a.WaitEvent(t, "connect allow event", connectEvent("allowed.test:443"))
	checkEvent(t, e, testnet.AuditEvent{Sandbox: sandboxName, Decision: "allow", Rule: "allowed", Addr: "198.18.0.10:443"})
}

func TestDeniedHost(t *testing.T) {
	w, a := setup(t, enforcePolicy)

	t.Run("curl http", func(t *testing.T) {
		r := curlProxy(t, w, a, "http://denied.test/deny-curl")
		checkDenial(t, r.Code, r.Header, r.Body, testnet.NameDenied, 80, "", "no_rule")
		e := exactlyOneEvent(t, w, a, "deny event", httpEvent("denied.test:80", "/deny-curl"))
		checkEvent(t, e, testnet.AuditEvent{
			Sandbox: sandboxName, Kind: "http", Decision: "deny", Reason: "no_rule",
			Method: "GET", Status: 403,
		})
		if e.Rule != "" {
			t.Errorf("audit rule: got %q, want none", e.Rule)
		}
		// The admin listener serves the same event among the recent decisions.
		code, body := a.AdminGet(t, "/v1/decisions")
		var recent struct {
			Decisions []map[string]any `json:"decisions"`
		}
		if err := json.Unmarshal([]byte(body), &recent); code != 200 || err != nil {
			t.Fatalf("/v1/decisions: %d %v: %s", code, err, body)
		}
		found := false
		for _, d := range recent.Decisions {
			found = found || d["path"] == "/deny-curl" && d["decision"] == "deny" && d["reason"] == "no_rule"
		}
		if !found {
			t.Errorf("/v1/decisions does not list the denial of /deny-curl: %s", body)
		}
	})
	t.Run("go http", func(t *testing.T) {
		resp, body := get(t, a.Client(t, nil), "http://denied.test/deny-go")
		checkDenial(t, resp.StatusCode, resp.Header, body, testnet.NameDenied, 80, "", "no_rule")
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Errorf("Content-Type: got %q, want application/json", ct)
		}
		exactlyOneEvent(t, w, a, "deny event", and(httpEvent("denied.test:80", "/deny-go"), isDeny("no_rule")))
	})
	t.Run("curl https", func(t *testing.T) {
		r := curlProxy(t, w, a, "--cacert", w.CA.File, "https://denied.test/deny-tls")
		if r.ExitCode != curlExitRecvError || r.ConnectCode != 403 {
			t.Errorf("curl: %v; want exit %d with CONNECT answered 403", r, curlExitRecvError)
		}
		e := exactlyOneEvent(t, w, a, "connect deny event", connectEvent("denied.test:443"))
		checkEvent(t, e, testnet.AuditEvent{Kind: "connect", Decision: "deny", Reason: "no_rule", Status: 403})
	})
	t.Run("go https", func(t *testing.T) {
		_, resp, body := connect(t, a, w, "denied.test:443")
		checkDenial(t, resp.StatusCode, resp.Header, body, testnet.NameDenied, 443, "", "no_rule")
	})
	if reqs := w.Denied.Requests(); len(reqs) != 0 {
		t.Errorf("denied upstream saw %d requests: %+v", len(reqs), reqs)
	}
}

func TestConnectPortNotAllowed(t *testing.T) {
	w, a := setup(t, enforcePolicy)
	// Something listens on the port, so a deny cannot be mistaken for a refused connection.
	tw := testnet.NewTripwire(t, w.Upstream, "198.18.0.10:8443")

	r := curlProxy(t, w, a, "--cacert", w.CA.File, "https://allowed.test:8443/port")
	if r.ExitCode != curlExitRecvError || r.ConnectCode != 403 {
		t.Errorf("curl: %v; want exit %d with CONNECT answered 403", r, curlExitRecvError)
	}
	e := exactlyOneEvent(t, w, a, "connect deny event", connectEvent("allowed.test:8443"))
	checkEvent(t, e, testnet.AuditEvent{
		Sandbox: sandboxName, Kind: "connect", Decision: "deny", Rule: "allowed", Reason: "port_not_allowed",
	})

	_, resp, body := connect(t, a, w, "allowed.test:8443")
	checkDenial(t, resp.StatusCode, resp.Header, body, testnet.NameAllowed, 8443, "allowed", "port_not_allowed")

	if n, err := tw.Connections(); err != nil || n != 0 {
		t.Errorf("198.18.0.10:8443 got %d connections (%v), want 0", n, err)
	}
}

func TestInternalAddressesDenied(t *testing.T) {
	w, a := setup(t, enforcePolicy)
	// Stand-ins for internal services, inside the sidecar namespace where airlock runs.
	w.AddSidecarLocalAddr(t, netip.MustParseAddr("169.254.169.254"))
	w.AddSidecarLocalAddr(t, netip.MustParseAddr("10.0.0.1"))
	wires := []*testnet.Tripwire{
		testnet.NewTripwire(t, w.Sidecar, "127.0.0.1:8080"),
		testnet.NewTripwire(t, w.Sidecar, "169.254.169.254:8080"),
		testnet.NewTripwire(t, w.Sidecar, "10.0.0.1:8080"),
		testnet.NewTripwire(t, w.Sidecar, "[::1]:8080"),
	}

	for _, name := range []string{testnet.NameLoopback, testnet.NameMetadata, testnet.NamePrivate, testnet.NameMapped} {
		t.Run(name, func(t *testing.T) {
			dest := name + ":8080"
			r := curlProxy(t, w, a, "http://"+dest+"/ssrf-curl")
			checkDenial(t, r.Code, r.Header, r.Body, name, 8080, "internal-names", "internal_address")
			e := exactlyOneEvent(t, w, a, "deny event", httpEvent(dest, "/ssrf-curl"))
			checkEvent(t, e, testnet.AuditEvent{Kind: "http", Decision: "deny", Rule: "internal-names", Reason: "internal_address", Status: 403})

			resp, body := get(t, a.Client(t, nil), "http://"+dest+"/ssrf-go")
			checkDenial(t, resp.StatusCode, resp.Header, body, name, 8080, "internal-names", "internal_address")

			_, cresp, cbody := connect(t, a, w, dest)
			checkDenial(t, cresp.StatusCode, cresp.Header, cbody, name, 8080, "internal-names", "internal_address")
			a.WaitEvent(t, "connect deny event", and(connectEvent(dest), isDeny("internal_address")))
		})
	}
	t.Run("ip literal", func(t *testing.T) {
		r := curlProxy(t, w, a, "http://127.0.0.1:8080/literal")
		if r.Code != 403 {
			t.Errorf("curl: %v; want 403", r)
		}
	})
	for _, tw := range wires {
		if n, err := tw.Connections(); err != nil || n != 0 {
			t.Errorf("internal listener %s got %d connections (%v), want 0", tw.Addr, n, err)
		}
	}
}

func TestDNSRebinding(t *testing.T) {
	w, a := setup(t, enforcePolicy)
	tw := testnet.NewTripwire(t, w.Sidecar, "127.0.0.1:80")
	c := a.Client(t, nil)

	// The first answer is public: the request reaches 198.18.0.10.
	resp, body := get(t, c, "http://rebind.test/r0")
	want := testnet.ResponseBody(w.Allowed.Addr, 80, testnet.NameRebind, "GET", "/r0")
	if resp.StatusCode != 200 || body != want {
		t.Errorf("first request: got %d %q, want 200 %q", resp.StatusCode, body, want)
	}
	e := a.WaitEvent(t, "first rebind event", httpEvent("rebind.test:80", "/r0"))
	checkEvent(t, e, testnet.AuditEvent{Decision: "allow", Rule: "rebind", Addr: "198.18.0.10:80"})

	// Every later answer is 127.0.0.1 with TTL 0. Whatever airlock does with them (deny, or
	// keep using the address it checked), it must never connect to loopback.
	for i := 1; i <= 3; i++ {
		path := fmt.Sprintf("/r%d", i)
		resp, body := get(t, a.Client(t, nil), "http://rebind.test"+path)
		switch resp.StatusCode {
		case 403:
			checkDenial(t, resp.StatusCode, resp.Header, body, testnet.NameRebind, 80, "rebind", "internal_address")
		case 200:
			if want := testnet.ResponseBody(w.Allowed.Addr, 80, testnet.NameRebind, "GET", path); body != want {
				t.Errorf("request %d: got body %q, want %q", i, body, want)
			}
		default:
			t.Errorf("request %d: got status %d (%q), want 403 internal_address or 200 from 198.18.0.10", i, resp.StatusCode, body)
		}
	}
	if n, err := tw.Connections(); err != nil || n != 0 {
		t.Errorf("loopback listener %s got %d connections (%v), want 0", tw.Addr, n, err)
	}
	if q := w.DNS.Queries(testnet.NameRebind); q < 2 {
		t.Logf("airlock resolved rebind.test only %d times (TTL 0 answers were cached)", q)
	}
}

func TestInterception(t *testing.T) {
	w, a := setup(t, enforcePolicy)
	caPEM := a.CAPEM(t)
	caFile := writePEM(t, w, "airlock-ca.pem", caPEM)
	pool := poolOf(t, caPEM)

	t.Run("allowed path", func(t *testing.T) {
		r := curlProxy(t, w, a, "--cacert", caFile, "https://intercept.test/ok/curl")
		want := testnet.ResponseBody(w.Intercept.Addr, 443, testnet.NameIntercept, "GET", "/ok/curl")
		if r.ExitCode != 0 || r.Code != 200 || r.Body != want {
			t.Errorf("curl: %v; want 200 %q", r, want)
		}
		resp, body := get(t, a.Client(t, pool), "https://intercept.test/ok/go")
		want = testnet.ResponseBody(w.Intercept.Addr, 443, testnet.NameIntercept, "GET", "/ok/go")
		if resp.StatusCode != 200 || body != want {
			t.Errorf("go client: got %d %q, want 200 %q", resp.StatusCode, body, want)
		}
		// The client saw airlock's certificate, and airlock spoke TLS to the upstream with the
		// right name (verified against the test CA, as the upstream's only issuer).
		if pc := resp.TLS.PeerCertificates; len(pc) == 0 || pc[0].VerifyHostname(testnet.NameIntercept) != nil {
			t.Errorf("go client: the presented leaf does not name %s", testnet.NameIntercept)
		}
		reqs := w.Intercept.Requests()
		if len(reqs) != 2 || !reqs[0].TLS || reqs[0].SNI != testnet.NameIntercept || reqs[1].Path != "/ok/go" {
			t.Errorf("intercept upstream saw %+v, want two TLS requests with SNI %s", reqs, testnet.NameIntercept)
		}
		e := a.WaitEvent(t, "intercepted allow event", httpEvent("intercept.test:443", "/ok/go"))
		checkEvent(t, e, testnet.AuditEvent{
			Sandbox: sandboxName, Kind: "http", Decision: "allow", Rule: "intercepted",
			Addr: "198.18.0.30:443", Method: "GET", Status: 200,
		})
	})
	t.Run("client without airlock CA", func(t *testing.T) {
		r := curlProxy(t, w, a, "--cacert", w.CA.File, "https://intercept.test/ok/untrusted")
		if r.ExitCode != curlExitSSLCACert {
			t.Errorf("curl trusting only the upstream CA: %v; want exit %d (airlock's certificate)", r, curlExitSSLCACert)
		}
	})
	t.Run("disallowed path", func(t *testing.T) {
		r := curlProxy(t, w, a, "--cacert", caFile, "https://intercept.test/nope")
		checkDenial(t, r.Code, r.Header, r.Body, testnet.NameIntercept, 443, "intercepted", "path_not_allowed")
		e := exactlyOneEvent(t, w, a, "path deny event", httpEvent("intercept.test:443", "/nope"))
		checkEvent(t, e, testnet.AuditEvent{Kind: "http", Decision: "deny", Rule: "intercepted", Reason: "path_not_allowed", Method: "GET", Status: 403})
	})
	t.Run("disallowed method", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, "https://intercept.test/ok/post", strings.NewReader("x"))
		resp, err := a.Client(t, pool).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp, body := readBody(t, resp)
		checkDenial(t, resp.StatusCode, resp.Header, body, testnet.NameIntercept, 443, "intercepted", "method_not_allowed")
	})
	for _, r := range w.Intercept.Requests() {
		if r.Path == "/nope" || r.Method == http.MethodPost || r.Path == "/ok/untrusted" {
			t.Errorf("intercept upstream saw a request airlock should have stopped: %+v", r)
		}
	}
}

func TestInterceptSNIMismatch(t *testing.T) {
	w, a := setup(t, enforcePolicy)
	caPEM := a.CAPEM(t)
	caFile := writePEM(t, w, "airlock-ca.pem", caPEM)

	// CONNECT names the intercepted host; the TLS ClientHello inside names another.
	t.Run("curl --connect-to", func(t *testing.T) {
		mark := a.Mark()
		r := curlProxy(t, w, a, "--cacert", caFile, "--connect-to", "denied.test:443:intercept.test:443", "https://denied.test/sni-curl")
		if r.Code == 200 || r.ExitCode == 0 {
			t.Errorf("curl: %v; want the request refused", r)
		}
		e := a.WaitEventFrom(t, mark, "host_mismatch deny event", isDeny("host_mismatch"))
		checkEvent(t, e, testnet.AuditEvent{Sandbox: sandboxName, Destination: "intercept.test:443", Decision: "deny", Reason: "host_mismatch"})
	})
	t.Run("go tls client", func(t *testing.T) {
		mark := a.Mark()
		c, resp, body := connect(t, a, w, "intercept.test:443")
		if resp.StatusCode != 200 {
			t.Fatalf("CONNECT intercept.test:443: got %d %q, want 200", resp.StatusCode, body)
		}
		tc := tls.Client(c, &tls.Config{ServerName: testnet.NameDenied, RootCAs: poolOf(t, caPEM)})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := tc.HandshakeContext(ctx); err == nil {
			// A proxy may finish the handshake and refuse the request instead.
			fmt.Fprintf(tc, "GET /sni-go HTTP/1.1\r\nHost: denied.test\r\nConnection: close\r\n\r\n")
			got, _ := io.ReadAll(tc)
			if strings.HasPrefix(string(got), "HTTP/1.1 200") {
				t.Errorf("request inside a tunnel with SNI denied.test succeeded: %q", got)
			}
		}
		e := a.WaitEventFrom(t, mark, "host_mismatch deny event", isDeny("host_mismatch"))
		checkEvent(t, e, testnet.AuditEvent{Sandbox: sandboxName, Destination: "intercept.test:443", Decision: "deny", Reason: "host_mismatch"})
	})
	for _, u := range []*testnet.Upstream{w.Denied, w.Intercept} {
		if reqs := u.Requests(); len(reqs) != 0 {
			t.Errorf("upstream %s saw %+v, want nothing", u.Addr, reqs)
		}
	}
}

func TestInterceptHostHeaderMismatch(t *testing.T) {
	w, a := setup(t, enforcePolicy)
	caPEM := a.CAPEM(t)
	caFile := writePEM(t, w, "airlock-ca.pem", caPEM)

	// CONNECT and SNI name intercept.test; the request inside says Host: denied.test. The
	// denial may name either host.
	mismatchHosts := []string{testnet.NameIntercept, testnet.NameDenied}
	t.Run("curl", func(t *testing.T) {
		mark := a.Mark()
		r := curlProxy(t, w, a, "--cacert", caFile, "-H", "Host: denied.test", "https://intercept.test/ok/host-curl")
		checkDenialHosts(t, r.Code, r.Header, r.Body, mismatchHosts, 443, "", "host_mismatch")
		e := a.WaitEventFrom(t, mark, "host_mismatch deny event", isDeny("host_mismatch"))
		checkEvent(t, e, testnet.AuditEvent{Sandbox: sandboxName, Destination: "intercept.test:443", Decision: "deny", Reason: "host_mismatch"})
	})
	t.Run("go", func(t *testing.T) {
		mark := a.Mark()
		req, _ := http.NewRequest(http.MethodGet, "https://intercept.test/ok/host-go", nil)
		req.Host = testnet.NameDenied
		resp, err := a.Client(t, poolOf(t, caPEM)).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp, body := readBody(t, resp)
		checkDenialHosts(t, resp.StatusCode, resp.Header, body, mismatchHosts, 443, "", "host_mismatch")
		e := a.WaitEventFrom(t, mark, "host_mismatch deny event", isDeny("host_mismatch"))
		checkEvent(t, e, testnet.AuditEvent{Sandbox: sandboxName, Destination: "intercept.test:443", Decision: "deny", Reason: "host_mismatch"})
	})
	for _, u := range []*testnet.Upstream{w.Denied, w.Intercept} {
		if reqs := u.Requests(); len(reqs) != 0 {
			t.Errorf("upstream %s saw %+v, want nothing", u.Addr, reqs)
		}
	}
}

func TestAbsoluteFormHostMismatch(t *testing.T) {
	w, a := setup(t, enforcePolicy)
	// Reasons a test accepts: when the URL's host is itself denied, no_rule is as right as
	// host_mismatch.
	cases := []struct {
		name, urlHost, hostHeader string
		reasons                   []string
	}{
		{"allowed URL, denied Host", testnet.NameAllowed, testnet.NameDenied, []string{"host_mismatch"}},
		{"allowed URL, other allowed Host", testnet.NameAllowed, testnet.NameAPI, []string{"host_mismatch"}},
		{"denied URL, allowed Host", testnet.NameDenied, testnet.NameAllowed, []string{"host_mismatch", "no_rule"}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := fmt.Sprintf("/abs-%d", i)
			r := curlProxy(t, w, a, "-H", "Host: "+tc.hostHeader, "http://"+tc.urlHost+path)
			checkDenialReason(t, r.Code, r.Header, r.Body, tc.reasons)
			raw := fmt.Sprintf("GET http://%s%s-raw HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", tc.urlHost, path, tc.hostHeader)
			resp, body := rawRequest(t, a, w, raw)
			checkDenialReason(t, resp.StatusCode, resp.Header, body, tc.reasons)
			for _, p := range []string{path, path + "-raw"} {
				e := a.WaitEvent(t, "deny event for "+p, httpEvent(tc.urlHost+":80", p))
				if e.Decision != "deny" || !slices.Contains(tc.reasons, e.Reason) {
					t.Errorf("audit: got decision %q reason %q, want deny with one of %q", e.Decision, e.Reason, tc.reasons)
				}
			}
		})
	}
	for _, u := range []*testnet.Upstream{w.Allowed, w.API, w.Denied} {
		if reqs := u.Requests(); len(reqs) != 0 {
			t.Errorf("upstream %s saw %+v, want nothing", u.Addr, reqs)
		}
	}
}

// checkDenialReason asserts a 403 denial whose reason is one of reasons.
func checkDenialReason(t *testing.T, status int, h http.Header, body string, reasons []string) {
	t.Helper()
	var d struct{ Error, Reason string }
	_ = json.Unmarshal([]byte(body), &d)
	if status != http.StatusForbidden || h.Get("X-Airlock-Decision") != "deny" || d.Error != "egress_denied" || !slices.Contains(reasons, d.Reason) {
		t.Errorf("got %d (X-Airlock-Decision %q) %q, want 403 deny egress_denied with reason in %q", status, h.Get("X-Airlock-Decision"), body, reasons)
	}
}

func TestReportMode(t *testing.T) {
	policy := strings.Replace(enforcePolicy, "mode: enforce", "mode: report", 1)
	w, a := setup(t, policy)

	r := curlProxy(t, w, a, "http://denied.test/report-curl")
	want := testnet.ResponseBody(w.Denied.Addr, 80, testnet.NameDenied, "GET", "/report-curl")
	if r.Code != 200 || r.Body != want {
		t.Errorf("curl: %v; want 200 %q (report mode lets it through)", r, want)
	}
	e := exactlyOneEvent(t, w, a, "report event", httpEvent("denied.test:80", "/report-curl"))
	checkEvent(t, e, testnet.AuditEvent{
		Sandbox: sandboxName, Kind: "http", Decision: "report", Reason: "no_rule",
		Addr: "198.18.0.20:80", Status: 200, WouldDeny: true,
	})

	resp, body := get(t, a.Client(t, nil), "http://allowed.test/report-allowed")
	if resp.StatusCode != 200 || resp.Header.Get("X-Airlock-Decision") == "deny" {
		t.Errorf("allowed request: got %d %q", resp.StatusCode, body)
	}
	e = a.WaitEvent(t, "allow event", httpEvent("allowed.test:80", "/report-allowed"))
	checkEvent(t, e, testnet.AuditEvent{Decision: "allow", Rule: "allowed", WouldDeny: false})
}

const (
	reloadPolicyA = `apiVersion: airlock/v1
kind: EgressPolicy
metadata:
  name: reload-a
spec:
  egress:
    - name: x
      hosts: ["allowed.test"]
      ports: [80]
`
	// reloadPolicyBroken has an unknown field on line 9, column 7.
	reloadPolicyBroken = `apiVersion: airlock/v1
kind: EgressPolicy
metadata:
  name: reload-broken
spec:
  egress:
    - name: x
      hosts: ["allowed.test"]
      colour: blue
`
	reloadPolicyB = `apiVersion: airlock/v1
kind: EgressPolicy
metadata:
  name: reload-b
spec:
  egress:
    - name: y
      hosts: ["api.allowed.test"]
      ports: [80]
`
)

func TestHotReload(t *testing.T) {
	w, a := setup(t, reloadPolicyA)
	status := func(path string) (int, string) {
		resp, body := get(t, a.Client(t, nil), "http://allowed.test"+path)
		return resp.StatusCode, body
	}
	if code, body := status("/before"); code != 200 {
		t.Fatalf("policy A: got %d %q, want 200", code, body)
	}

	// A broken policy is refused with file:line, and A stays in force.
	a.WritePolicy(t, reloadPolicyBroken)
	loc := regexp.MustCompile(regexp.QuoteMeta(filepath.Base(a.PolicyFile)) + `:9:`)
	e := a.WaitEvent(t, "failed reload event", func(e testnet.AuditEvent) bool {
		return e.Kind == "policy" && e.Decision == "deny"
	})
	if !loc.MatchString(e.Error) {
		t.Errorf("failed reload event: error %q does not name policy.yaml:9:", e.Error)
	}
	if e.Policy != "reload-a" {
		t.Errorf("failed reload event: policy in force %q, want reload-a", e.Policy)
	}
	a.WaitLog(t, 0, "log line naming the broken file and line", func(l string) bool {
		return loc.MatchString(l) && !strings.Contains(l, `"kind"`)
	})
	if code, body := status("/after-broken"); code != 200 {
		t.Errorf("after a broken reload: got %d %q, want 200 (policy A kept)", code, body)
	}

	// Policy B does not allow allowed.test.
	a.WritePolicy(t, reloadPolicyB)
	a.WaitEvent(t, "reload event for reload-b", func(e testnet.AuditEvent) bool {
		return e.Kind == "policy" && e.Decision == "allow" && e.Policy == "reload-b"
	})
	resp, body := get(t, a.Client(t, nil), "http://allowed.test/after-b")
	checkDenial(t, resp.StatusCode, resp.Header, body, testnet.NameAllowed, 80, "", "no_rule")
	if resp, body := get(t, a.Client(t, nil), "http://api.allowed.test/after-b"); resp.StatusCode != 200 {
		t.Errorf("api.allowed.test under policy B: got %d %q, want 200", resp.StatusCode, body)
	}

	if reqs := w.Allowed.Requests(); len(reqs) != 2 {
		t.Errorf("allowed.test upstream saw %d requests, want 2 (before and after the broken reload)", len(reqs))
	}
}

// TestReloadOnSIGHUP sends SIGHUP without touching the file, so the reload it waits for can
// only come from the signal.
func TestReloadOnSIGHUP(t *testing.T) {
	_, a := setup(t, reloadPolicyA)
	for range 2 {
		mark := a.Mark()
		a.Signal(t, syscall.SIGHUP)
		a.WaitEventFrom(t, mark, "reload event after SIGHUP", func(e testnet.AuditEvent) bool {
			return e.Kind == "policy" && e.Decision == "allow" && e.Policy == "reload-a"
		})
	}
	if exited, err := a.Exited(); exited {
		t.Fatalf("airlock exited after SIGHUP: %v", err)
	}
}

func TestMetrics(t *testing.T) {
	w, a := setup(t, enforcePolicy)
	const name = "airlock_proxy_requests_total"
	if code, body := a.AdminGet(t, "/healthz"); code != 200 {
		t.Errorf("/healthz: got %d %q, want 200", code, body)
	}
	before, _ := a.MetricSum(t, name)
	for _, u := range []string{"http://allowed.test/m1", "http://denied.test/m2", "http://api.allowed.test/m3"} {
		get(t, a.Client(t, nil), u)
	}
	a.WaitEvent(t, "last request's event", httpEvent("api.allowed.test:80", "/m3"))
	// The proxy counts a request just after writing its audit event, on the request's own
	// goroutine, so the scrape can run ahead of the last increment. Instead of sleeping, give
	// it the time another whole request takes (a barrier) before each new scrape.
	var after float64
	var found bool
	for i := 0; i < 5; i++ {
		if after, found = a.MetricSum(t, name); found && after >= before+3 {
			return
		}
		barrier(t, w, a)
	}
	_, body := a.AdminGet(t, "/metrics")
	t.Fatalf("%s: got %v (present %t), want at least %v after 3 requests\n%s", name, after, found, before+3, grepLines(body, name))
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestPolicyCheckUnknownField needs no privileges: it runs `airlock policy check` directly.
func TestPolicyCheckUnknownField(t *testing.T) {
	t.Parallel()
	bin := airlockBinary(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(file, []byte(reloadPolicyBroken), 0o644); err != nil {
		t.Fatal(err)
	}

	out, err := exec.Command(bin, "policy", "check", file).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("policy check: got %v, want exit status 1\n%s", err, out)
	}
	want := file + ":9:7:"
	if !strings.Contains(string(out), want) {
		t.Errorf("policy check output: got %q, want it to contain %q", out, want)
	}
	if !strings.Contains(string(out), "colour") {
		t.Errorf("policy check output: got %q, want it to name the field colour", out)
	}

	// The good policy passes.
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte(reloadPolicyA), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "policy", "check", good).CombinedOutput(); err != nil {
		t.Errorf("policy check on a valid policy: %v\n%s", err, out)
	}
}

// TestIPv6 reaches an upstream that has only an IPv6 address (2001:db8::/32 counts as
// public) and refuses a name whose AAAA record is a NAT64 form of loopback.
func TestIPv6(t *testing.T) {
	const policy = `apiVersion: airlock/v1
kind: EgressPolicy
metadata:
  name: e2e-v6
spec:
  egress:
    - name: v6
      hosts: ["v6.test", "nat64.test"]
      ports: [80]
`
	w, a := setup(t, policy)
	v6 := netip.MustParseAddr("2001:db8::10")
	up := w.AddUpstream(t, v6, "v6.test")
	w.DNS.Set("nat64.test", testnet.DefaultTTL, netip.MustParseAddr("64:ff9b::7f00:1"))

	resp, body := get(t, a.Client(t, nil), "http://v6.test/six")
	if want := testnet.ResponseBody(up.Addr, 80, "v6.test", "GET", "/six"); resp.StatusCode != 200 || body != want {
		t.Fatalf("v6.test: got %d %q, want 200 %q", resp.StatusCode, body, want)
	}
	e := a.WaitEvent(t, "v6 allow event", httpEvent("v6.test:80", "/six"))
	checkEvent(t, e, testnet.AuditEvent{Decision: "allow", Rule: "v6", Addr: "[2001:db8::10]:80"})

	r := curlProxy(t, w, a, "http://nat64.test/loop")
	checkDenial(t, r.Code, r.Header, r.Body, "nat64.test", 80, "v6", "internal_address")
}
