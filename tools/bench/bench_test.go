package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseWrk(t *testing.T) {
	out := "Running 1s test @ http://127.0.0.1:1/\n" +
		"AIRLOCK_BENCH_RESULT requests=1000 duration_us=2000000 connect=1 read=2 write=3 status=4 timeout=5 p50_us=250 p99_us=1500\n"
	got, err := parseWrk(out)
	if err != nil {
		t.Fatal(err)
	}
	want := result{requests: 1000, elapsed: 2 * time.Second,
		errs: errCounts{connect: 1, read: 2, write: 3, status: 4, timeout: 5},
		p50:  250 * time.Microsecond, p99: 1500 * time.Microsecond}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if got.rps() != 500 {
		t.Errorf("rps: got %v, want 500", got.rps())
	}
	if _, err := parseWrk("wrk: connection refused\n"); err == nil {
		t.Error("got no error for output without a result line")
	}
}

func TestRequest(t *testing.T) {
	tests := []struct {
		name string
		l    load
		want string
	}{
		{"direct", load{upstream: "127.0.0.1:8080"}, "GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n"},
		{"proxied", load{upstream: "127.0.0.1:8080", proxied: true},
			"GET http://127.0.0.1:8080/ HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(tc.l.request()); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestMedianAndRatios(t *testing.T) {
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("odd: got %v, want 2", got)
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("even: got %v, want 2.5", got)
	}
	mk := func(rates ...int64) *leg {
		lg := &leg{}
		for i, r := range rates {
			if r == 0 {
				continue // this round is missing
			}
			lg.rounds = append(lg.rounds, round{n: i, res: result{requests: r, elapsed: time.Second}})
		}
		return lg
	}
	a, b := mk(200, 300, 400), mk(100, 0, 100)
	if got, want := ratios(a, b), []float64{2, 4}; !slices.Equal(got, want) {
		t.Errorf("ratios: got %v, want %v (only rounds both measured)", got, want)
	}
	if got := a.medianRound().res.requests; got != 300 {
		t.Errorf("median round: got %d requests, want 300", got)
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantOnly []string
		wantErr  bool
	}{
		{"defaults", nil, []string{"direct", "airlock", "airlock-inject", "squid", "airlock-squid", "tinyproxy", "go-nethttp"}, false},
		{"only keeps canonical order", []string{"-only", "squid,airlock"}, []string{"airlock", "squid"}, false},
		{"only with the reference", []string{"-only=go-nethttp, airlock,squid"}, []string{"airlock", "squid", "go-nethttp"}, false},
		{"reference spelled with a slash", []string{"-only", "go-net/http"}, nil, true},
		{"unknown target", []string{"-only", "nginx"}, nil, true},
		{"threads above connections", []string{"-connections", "2", "-threads", "4"}, nil, true},
		{"sub-second duration", []string{"-duration", "500ms"}, nil, true},
		{"unknown loadgen", []string{"-loadgen", "ab"}, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseFlags(tc.args, io.Discard)
			if (err != nil) != tc.wantErr {
				t.Fatalf("got error %v, want error %v", err, tc.wantErr)
			}
			if !tc.wantErr && !slices.Equal(c.only, tc.wantOnly) {
				t.Errorf("got only %v, want %v", c.only, tc.wantOnly)
			}
		})
	}
}

func TestNetHTTPProxy(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Proxy-Connection") != "" || r.Header.Get("X-Hop") != "" {
			t.Errorf("upstream got hop-by-hop headers: %v", r.Header)
		}
		w.Header().Set("Connection", "X-Resp-Hop")
		w.Header().Set("X-Resp-Hop", "1")
		w.Header().Set("X-End", "1")
		w.WriteHeader(http.StatusTeapot)
		io.WriteString(w, upstreamBody)
	}))
	defer up.Close()
	tr := &http.Transport{Proxy: nil}
	defer tr.CloseIdleConnections()
	px := &netHTTPProxy{transport: tr}
	host := strings.TrimPrefix(up.URL, "http://")

	req := httptest.NewRequest(http.MethodGet, up.URL+"/", nil)
	req.Header.Set("Proxy-Connection", "keep-alive")
	req.Header.Set("Connection", "X-Hop")
	req.Header.Set("X-Hop", "1")
	rec := httptest.NewRecorder()
	px.ServeHTTP(rec, req)
	if rec.Code != http.StatusTeapot || rec.Body.String() != upstreamBody {
		t.Errorf("absolute-form: got %d %q, want the upstream's %d %q", rec.Code, rec.Body, http.StatusTeapot, upstreamBody)
	}
	if rec.Header().Get("X-End") != "1" || rec.Header().Get("X-Resp-Hop") != "" || rec.Header().Get("Connection") != "" {
		t.Errorf("response headers: got %v, want X-End only", rec.Header())
	}
	if req.Header.Get("X-Hop") == "" {
		t.Error("the handler modified the server's request headers")
	}

	for _, tc := range []struct{ name, method, target string }{
		{"origin-form", http.MethodGet, "/"},
		{"https", http.MethodGet, "https://" + host + "/"},
		{"connect", http.MethodConnect, host},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, tc.target, nil)
			if tc.method == http.MethodConnect {
				req.URL.Scheme, req.URL.Host = "", host // as the server parses authority-form
			}
			rec := httptest.NewRecorder()
			px.ServeHTTP(rec, req)
			if rec.Code != http.StatusBadRequest {
				t.Errorf("got %d, want 400", rec.Code)
			}
		})
	}
}

func TestReferenceHasNoAuditCheck(t *testing.T) {
	if !isReference(targetNetHTTP) || isReference(targetAirlock) || isReference("squid") {
		t.Fatal("only go-nethttp is a reference leg")
	}
	if got := auditCell(&leg{name: targetNetHTTP}); got != "n/a (reference)" {
		t.Errorf("audit cell: got %q", got)
	}
	stopped := &proc{done: make(chan struct{})}
	close(stopped.done)
	stopped.stopOnce.Do(func() {}) // nothing to signal
	lg := &leg{name: targetNetHTTP, pr: &proxyRun{p: stopped}, rounds: []round{{}}}
	finish(lg, &env{progress: func(string, ...any) {}})
	if lg.problem != "" || lg.audit != nil {
		t.Errorf("finish: got problem %q, audit %v; want neither", lg.problem, lg.audit)
	}
}

// TestParseAuditCost reads go test -bench output: both variants every round, or invalid.
func TestParseAuditCost(t *testing.T) {
	out := `goos: linux
BenchmarkProxyAudit/off-2         	   40000	     80000 ns/op
BenchmarkProxyAudit/chained-file-2	   38000	    100000 ns/op
BenchmarkProxyAudit/off-2         	   40000	     90000 ns/op
BenchmarkProxyAudit/chained-file-2	   38000	    110000 ns/op
PASS
`
	rep := parseAuditCost(strings.NewReader(out))
	if rep.err != nil {
		t.Fatal(rep.err)
	}
	if got := rep.nsPerOp["chained-file"]; len(got) != 2 || got[1] != 110000 {
		t.Errorf("chained-file rounds %v, want [100000 110000]", got)
	}
	var b strings.Builder
	printAuditCostReport(&b, rep)
	if !strings.Contains(b.String(), "added 20.0 µs/request") {
		t.Errorf("report:\n%s\nwant the added 20.0 µs/request", b.String())
	}
	if rep := parseAuditCost(strings.NewReader("BenchmarkProxyAudit/off-2 10 5 ns/op\n")); rep.err == nil {
		t.Error("a round without chained-file was accepted")
	}
}
