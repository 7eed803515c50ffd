package llmproxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkChat measures one non-streamed chat completion against the fake provider,
// directly and through the proxy (keep-alive on both), with the ledger and audit on.
func BenchmarkChat(b *testing.B) {
	for _, via := range []bool{false, true} {
		name := "direct"
		if via {
			name = "airlock"
		}
		b.Run(name, func(b *testing.B) {
			e := newEnv(b, setup{})
			url, auth := e.oaURL, "Bearer "+openaiKey
			if via {
				url, auth = e.URL, ""
			}
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(chatBody))
				req.Header.Set("Authorization", auth)
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
		})
	}
}
