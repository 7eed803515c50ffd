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
