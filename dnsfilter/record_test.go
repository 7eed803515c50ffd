package dnsfilter

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/audit"
)

// brokenAudit is an audit sink whose writes fail while down is set.
type brokenAudit struct {
	recordingAudit
	down atomic.Bool
}

func (a *brokenAudit) Health() error {
	if a.down.Load() {
		return errors.New("audit log unavailable: write: no space left on device")
	}
	return nil
}

// An answer that cannot be recorded is not given: SERVFAIL, without the addresses.
func TestAnswerFailsClosedWhenTheAuditLogCannotBeWritten(t *testing.T) {
	a := &brokenAudit{}
	h := newHarness(t, basicSpec, func(c *Config) { c.Audit = a })
	h.up.setA("allowed.example", 30, "198.18.0.10")
	if r := h.ask(t, "udp", "allowed.example", dns.TypeA); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("healthy: got %s with %d answers, want the address", dns.RcodeToString[r.Rcode], len(r.Answer))
	}
	a.down.Store(true)
	for _, name := range []string{"allowed.example", "denied.example"} {
		if r := h.ask(t, "udp", name, dns.TypeA); r.Rcode != dns.RcodeServerFailure || len(r.Answer) != 0 {
			t.Errorf("%s with the log down: got %s with %d answers, want SERVFAIL and none", name, dns.RcodeToString[r.Rcode], len(r.Answer))
		}
	}
	a.down.Store(false)
	if r := h.ask(t, "udp", "allowed.example", dns.TypeA); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Errorf("recovered: got %s with %d answers, want the address", dns.RcodeToString[r.Rcode], len(r.Answer))
	}
}

var _ audit.Sink = (*brokenAudit)(nil)
