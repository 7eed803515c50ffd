package proxy

import (
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
)

// fakeIdentities answers every lookup with who (or err), as the kernel would for the
// connection's cgroup.
type fakeIdentities struct {
	// mu guards who and err.
	mu  sync.Mutex
	who string
	err error
}

func (f *fakeIdentities) Identity(netip.AddrPort) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.who, f.err
}

func (f *fakeIdentities) set(who string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.who, f.err = who, err
}

const identityEgress = basicEgress + `  identities:
    reviewer:
      egress:
        - name: plain-read
          hosts: ["plain.test"]
          ports: [80]
          http:
            - methods: [GET]
`

func TestIdentityDecides(t *testing.T) {
	ids := &fakeIdentities{}
	h := newHarness(t, mustPolicy(t, policyDoc("ids", "enforce", identityEgress)), func(c *Config) { c.Identities = ids })
	h.route(addrPlain, 80, httpServer(t, echo()))
	c := h.client(nil)
	tests := []struct {
		name     string
		who      string
		err      error
		method   string
		status   int
		reason   string
		identity string
	}{
		{"the sandbox's own", "", nil, "POST", 200, "", ""},
		{"reviewer reads", "reviewer", nil, "GET", 200, "", "reviewer"},
		{"reviewer may not post", "reviewer", nil, "POST", 403, "method_not_allowed", "reviewer"},
		{"cgroup not told", "", errors.New("no record"), "GET", 403, "identity_unknown", ""},
		{"identity the policy lacks", "ghost", nil, "GET", 403, "identity_unknown", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ids.set(tc.who, tc.err)
			c.CloseIdleConnections() // each case its own connection, as a new process would
			resp, body := get(t, c, tc.method, "http://plain.test/x", strings.NewReader("b"))
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			evs := h.log.wait(t, 1)
			if got := evs[len(evs)-1]["identity"]; (got == nil && tc.identity != "") || (got != nil && got != tc.identity) {
				t.Errorf("audit identity %v, want %q", got, tc.identity)
			}
			if tc.status != 403 {
				return
			}
			d := deniedJSON(t, body)
			if d.Reason != tc.reason || d.Identity != tc.identity {
				t.Errorf("refusal reason %q identity %q, want %q %q", d.Reason, d.Identity, tc.reason, tc.identity)
			}
		})
	}
	// The metrics carry the identity: reviewer's one read and one refusal, and the bytes of
	// its read (the echo of a one-byte body), apart from the sandbox's own.
	for _, m := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"airlock_proxy_requests_total", map[string]string{"identity": "reviewer", "decision": "allow"}, 1},
		{"airlock_proxy_requests_total", map[string]string{"identity": "reviewer", "decision": "deny"}, 1},
		{"airlock_proxy_requests_total", map[string]string{"identity": "", "decision": "allow"}, 1},
		{"airlock_proxy_bytes_total", map[string]string{"identity": "reviewer", "direction": "up"}, 1},
	} {
		if got := h.metric(m.name, m.labels); got != m.want {
			t.Errorf("%s%v = %v, want %v", m.name, m.labels, got, m.want)
		}
	}
	if own, rev := h.metric("airlock_proxy_bytes_total", map[string]string{"identity": "", "direction": "down"}),
		h.metric("airlock_proxy_bytes_total", map[string]string{"identity": "reviewer", "direction": "down"}); own == 0 || rev == 0 {
		t.Errorf("bytes down: the sandbox's own %v, reviewer's %v; want both counted", own, rev)
	}
}
