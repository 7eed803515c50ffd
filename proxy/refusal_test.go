package proxy

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/airlock-dev/airlock/policy"
)

// refusingInjector refuses requests whose X-Token header holds "placeholder", and scrubs
// "s3cret" from responses (the ResponseFilter half of a credential broker).
type refusingInjector struct{}

type refusal struct{ error }

func (refusal) DenyReason() policy.Reason { return "credential_misuse" }

func (refusingInjector) Inject(r *http.Request, _ policy.Decision) error {
	if strings.Contains(r.Header.Get("X-Token"), "placeholder") {
		return refusal{errors.New("a placeholder is not allowed here")}
	}
	return nil
}

func (refusingInjector) FilterResponse(resp *http.Response, _ bool) (*http.Response, error) {
	b, _ := io.ReadAll(resp.Body)
	resp.Body = io.NopCloser(strings.NewReader(strings.ReplaceAll(string(b), "s3cret", "[REDACTED]")))
	resp.ContentLength = -1
	resp.Header.Del("Content-Length")
	return resp, nil
}

// TestInjectorRefusalAndFilter: an Injector error that is a Refusal denies (403, its
// reason, upstream not reached); a ResponseFilter sees every upstream response.
func TestInjectorRefusalAndFilter(t *testing.T) {
	egress := `    - name: plain
      hosts: ["plain.test"]
      ports: [80]
`
	h := newHarness(t, mustPolicy(t, policyDoc("refuse", "enforce", egress)), func(c *Config) { c.Injector = refusingInjector{} })
	var reached atomic.Int32
	h.route(addrPlain, 80, httpServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		_, _ = w.Write([]byte("echo s3cret"))
	})))
	req, _ := http.NewRequest(http.MethodGet, "http://plain.test/", nil)
	req.Header.Set("X-Token", "a placeholder")
	resp, err := h.client(nil).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	body := string(b)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, `"reason":"credential_misuse"`) ||
		resp.Header.Get("X-Airlock-Decision") != "deny" {
		t.Fatalf("got %d %s, want 403 credential_misuse", resp.StatusCode, body)
	}
	if n := reached.Load(); n != 0 {
		t.Fatalf("upstream reached %d times, want 0", n)
	}
	ev := h.log.wait(t, 1)[0]
	if ev["decision"] != "deny" || ev["reason"] != "credential_misuse" {
		t.Fatalf("audit event %v, want a credential_misuse deny", ev)
	}
	resp, body = get(t, h.client(nil), "GET", "http://plain.test/", nil)
	if resp.StatusCode != http.StatusOK || body != "echo [REDACTED]" {
		t.Fatalf("got %d %q, want the filtered body", resp.StatusCode, body)
	}
}
