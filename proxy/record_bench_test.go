package proxy

import (
	"io"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/airlock-dev/airlock/audit"
)

// BenchmarkProxyAudit measures allowed plain HTTP requests through the proxy with the audit
// trail off (Discard) and on as the sidecar runs it: a chained file, signed checkpoints, the
// decision event written before each request goes upstream. The difference is the cost of
// the chain and of write-before-respond (the bench/ legs run with --audit-log on).
func BenchmarkProxyAudit(b *testing.B) {
	for _, tc := range []struct {
		name string
		sink func(b *testing.B) audit.Sink
	}{
		{"off", func(*testing.B) audit.Sink { return audit.Discard() }},
		{"chained-file", func(b *testing.B) audit.Sink {
			key, err := audit.GenerateKey()
			if err != nil {
				b.Fatal(err)
			}
			l, err := audit.New(audit.Options{Writer: io.Discard, File: filepath.Join(b.TempDir(), "audit.log"), Key: key})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = l.Close() })
			return l
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			sink := tc.sink(b)
			h := newHarness(b, mustPolicy(b, policyDoc("basic", "enforce", basicEgress)), func(c *Config) { c.Audit = sink })
			h.route(addrPlain, 80, httpServer(b, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				_, _ = w.Write([]byte("ok"))
			})))
			c := h.client(nil)
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := c.Get("http://plain.test/")
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						b.Errorf("status %d: a benchmark counts only successful responses", resp.StatusCode)
						return
					}
				}
			})
		})
	}
}

// BenchmarkInterceptedKeepAlive measures GETs on kept-alive intercepted tunnels (the strict
// HTTP/1.1 path unless AIRLOCK_TEST_HTTP1_FASTPATH=off), with the audit trail as the sidecar
// runs it (a chained file, write-before-respond): the in-process counterpart of make bench's
// intercepted keep-alive leg, for CPU and allocation profiles of the proxy's side
// (go test -bench InterceptedKeepAlive -cpuprofile, -memprofile).
func BenchmarkInterceptedKeepAlive(b *testing.B) {
	l, err := audit.New(audit.Options{Writer: io.Discard, File: filepath.Join(b.TempDir(), "audit.log")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	h := newHarness(b, mustPolicy(b, policyDoc("l7", "enforce", l7Egress)), func(c *Config) { c.Audit = l })
	h.route(addrAPI, 443, h.upstream.tlsServer(b, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("hello from the upstream"))
	}), "api.test"))
	c := h.client(h.airlockRoots())
	c.Transport.(*http.Transport).MaxIdleConnsPerHost = 16
	b.SetParallelism(8)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := c.Get("https://api.test/repos/acme/app")
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Errorf("status %d: a benchmark counts only successful responses", resp.StatusCode)
				return
			}
		}
	})
}
