//go:build linux

package e2e

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/test/privtest"
	"github.com/airlock-dev/airlock/test/testnet"
)

// dnsPolicy allows two names of the world by exact host and one wildcard zone.
const dnsPolicy = `apiVersion: airlock/v1
kind: EgressPolicy
metadata:
  name: dns-e2e
spec:
  dns:
    minTTL: 5s
  egress:
    - name: allowed
      hosts: ["allowed.test", "loopback.test"]
      ports: [443]
    - name: wild
      hosts: ["*.wild.test"]
`

// dnsAddr is where the DNS filter listens in the sidecar namespace.
const dnsAddr = "127.0.0.1:5353"

// digResult is one run of dig against the DNS filter.
type digResult struct {
	status  string   // NOERROR, REFUSED, NXDOMAIN, SERVFAIL
	answers []string // the addresses (or other data) of the answer section
	out     string
}

var digStatusRE = regexp.MustCompile(`status: ([A-Z]+)`)

// dig runs the dig binary in the sidecar namespace against the filter.
func dig(t *testing.T, w *testnet.World, args ...string) digResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	host, port, _ := strings.Cut(dnsAddr, ":")
	full := append([]string{"@" + host, "-p", port, "+tries=1", "+time=5", "+noall", "+comments", "+answer"}, args...)
	cmd := w.Sidecar.Command(ctx, "dig", full...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("dig %v: %v: %s %s", args, err, stdout.String(), stderr.String())
	}
	r := digResult{out: stdout.String()}
	if m := digStatusRE.FindStringSubmatch(r.out); m != nil {
		r.status = m[1]
	}
	for _, line := range strings.Split(r.out, "\n") {
		if line == "" || strings.HasPrefix(line, ";") {
			continue
		}
		if f := strings.Fields(line); len(f) >= 5 {
			r.answers = append(r.answers, f[len(f)-1])
		}
	}
	return r
}

func TestDNSFilter(t *testing.T) {
	privtest.Require(t, "dig")
	parallelWorld(t)
	w := testnet.NewWorld(t)
	w.DNS.Set("a.wild.test", testnet.DefaultTTL, netip.MustParseAddr("198.18.0.10"))
	a := w.StartAirlock(t, testnet.AirlockConfig{Binary: airlockBinary(t), Policy: dnsPolicy, Sandbox: sandboxName,
		Args: []string{"--dns-addr", dnsAddr}})

	t.Run("allowed name is forwarded and answered", func(t *testing.T) {
		for _, proto := range []string{"+notcp", "+tcp"} {
			r := dig(t, w, proto, "allowed.test", "A")
			if r.status != "NOERROR" || !slices.Equal(r.answers, []string{"198.18.0.10"}) {
				t.Errorf("%s: got %s %v, want NOERROR [198.18.0.10]\n%s", proto, r.status, r.answers, r.out)
			}
		}
		if n := w.DNS.Queries(testnet.NameAllowed); n != 2 {
			t.Errorf("upstream queries for allowed.test: got %d, want 2", n)
		}
		e := a.WaitEvent(t, "dns allow event", func(e testnet.AuditEvent) bool {
			return e.Kind == "dns" && e.Destination == "allowed.test"
		})
		checkEvent(t, e, testnet.AuditEvent{Sandbox: sandboxName, Kind: "dns", Decision: "allow", Rule: "allowed",
			Addr: testnet.DNSAddr.String()})
	})

	t.Run("denied name never reaches the upstream", func(t *testing.T) {
		for _, name := range []string{testnet.NameDenied, testnet.NameAPI, "wild.test"} {
			r := dig(t, w, name, "A")
			if r.status != "REFUSED" || len(r.answers) != 0 {
				t.Errorf("%s: got %s %v, want REFUSED and no answer", name, r.status, r.answers)
			}
			if n := w.DNS.Queries(name); n != 0 {
				t.Errorf("upstream queries for %s: got %d, want 0", name, n)
			}
		}
		e := a.WaitEvent(t, "dns deny event", func(e testnet.AuditEvent) bool {
			return e.Kind == "dns" && e.Destination == testnet.NameDenied
		})
		checkEvent(t, e, testnet.AuditEvent{Kind: "dns", Decision: "deny", Reason: "no_rule"})
	})

	t.Run("internal address is left out", func(t *testing.T) {
		r := dig(t, w, testnet.NameLoopback, "A")
		if r.status != "NOERROR" || len(r.answers) != 0 {
			t.Errorf("got %s %v, want NOERROR without 127.0.0.1", r.status, r.answers)
		}
	})

	t.Run("ANY is refused", func(t *testing.T) {
		before := w.DNS.Queries(testnet.NameAllowed)
		if r := dig(t, w, "+tcp", testnet.NameAllowed, "ANY"); r.status != "REFUSED" {
			t.Errorf("got %s, want REFUSED", r.status)
		}
		if n := w.DNS.Queries(testnet.NameAllowed); n != before {
			t.Errorf("upstream queries: got %d, want %d", n, before)
		}
	})

	t.Run("wildcard and exfiltration brake", func(t *testing.T) {
		if r := dig(t, w, "a.wild.test", "A"); r.status != "NOERROR" || !slices.Equal(r.answers, []string{"198.18.0.10"}) {
			t.Errorf("a.wild.test: got %s %v, want NOERROR [198.18.0.10]", r.status, r.answers)
		}
		long := strings.Repeat("x", 60) + ".wild.test"
		if r := dig(t, w, long, "A"); r.status != "REFUSED" {
			t.Errorf("60-byte label: got %s, want REFUSED", r.status)
		}
		if n := w.DNS.Queries(long); n != 0 {
			t.Errorf("upstream queries for the long name: got %d, want 0", n)
		}
	})

	t.Run("reserved LLM name", func(t *testing.T) {
		if r := dig(t, w, "llm.airlock.internal", "A"); r.status != "NOERROR" || !slices.Equal(r.answers, []string{"127.0.0.1"}) {
			t.Errorf("got %s %v, want NOERROR [127.0.0.1] (the --llm-addr host)", r.status, r.answers)
		}
	})

	t.Run("metrics", func(t *testing.T) {
		if n, ok := a.MetricSum(t, "airlock_dns_queries_total"); !ok || n < 8 {
			t.Errorf("airlock_dns_queries_total: got %v (present %v), want at least 8", n, ok)
		}
	})

	t.Run("policy reload applies to the next query", func(t *testing.T) {
		from := a.Mark()
		a.WritePolicy(t, strings.Replace(dnsPolicy, `"loopback.test"]`, `"loopback.test", "denied.test"]`, 1))
		a.WaitEventFrom(t, from, "policy reload event", func(e testnet.AuditEvent) bool {
			return e.Kind == "policy" && e.Decision == "allow"
		})
		if r := dig(t, w, testnet.NameDenied, "A"); r.status != "NOERROR" || !slices.Equal(r.answers, []string{"198.18.0.20"}) {
			t.Errorf("after reload: got %s %v, want NOERROR [198.18.0.20]", r.status, r.answers)
		}
	})
}
