package proxy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

// eventsWithID returns the events (decision-phase ones included) carrying request id.
func eventsWithID(t *testing.T, l *eventLog, id string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, ev := range l.allEvents(t) {
		if ev["request_id"] == id {
			out = append(out, ev)
		}
	}
	return out
}

func TestRequestIDAndWriteBeforeRespond(t *testing.T) {
	h := newHarness(t, mustPolicy(t, policyDoc("basic", "enforce", basicEgress)))
	var upstreamSaw atomic.Int32 // decision events in the log when the request reached the upstream
	h.route(addrPlain, 80, httpServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamSaw.Store(int32(len(eventsWithID(t, h.log, r.Header.Get(headerRequestID)))))
		w.Header().Set(headerRequestID, "upstream-own-id")
		_, _ = w.Write([]byte("ok"))
	})))

	req, _ := http.NewRequest("GET", "http://plain.test/x", nil)
	req.Header.Set(headerRequestID, "client-id-1")
	resp, err := h.client(nil).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if got := resp.Header.Get(headerAirlockRequestID); got != "client-id-1" {
		t.Errorf("allowed: %s = %q, want the client's id", headerAirlockRequestID, got)
	}
	if got := resp.Header.Get(headerRequestID); got != "upstream-own-id" {
		t.Errorf("allowed: %s = %q, want the upstream's own, untouched", headerRequestID, got)
	}
	if upstreamSaw.Load() != 1 {
		t.Errorf("the upstream got the request with %d events of it in the log, want its decision event first", upstreamSaw.Load())
	}
	h.log.wait(t, 1)
	evs := eventsWithID(t, h.log, "client-id-1")
	if len(evs) != 2 || evs[0]["phase"] != "decision" || evs[1]["phase"] != nil || evs[1]["status"] != float64(200) {
		t.Fatalf("got events %v, want a decision event then the completion with status 200", evs)
	}

	// A denial without X-Request-Id: an id is made up, and its event is in the log by the
	// time the client has the response headers.
	resp, _ = get(t, h.client(nil), "GET", "http://evil.test/", nil)
	id := resp.Header.Get(headerAirlockRequestID)
	if resp.StatusCode != http.StatusForbidden || len(id) != 32 {
		t.Fatalf("denied: got %d with id %q, want 403 with a made-up id", resp.StatusCode, id)
	}
	if evs := eventsWithID(t, h.log, id); len(evs) != 1 || evs[0]["decision"] != "deny" {
		t.Fatalf("denied: events %v in the log when the answer arrived, want its deny event", evs)
	}
}

// brokenDisk is an audit writer that fails with ENOSPC while full is set.
type brokenDisk struct {
	full atomic.Bool
	log  *eventLog
}

func (d *brokenDisk) Write(p []byte) (int, error) {
	if d.full.Load() {
		return 0, syscall.ENOSPC
	}
	return d.log.Write(p)
}

func TestFailsClosedWhenTheAuditLogCannotBeWritten(t *testing.T) {
	disk := &brokenDisk{log: newEventLog()}
	al, err := audit.New(audit.Options{Writer: disk, RetryEvery: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = al.Close() })
	h := newHarness(t, mustPolicy(t, policyDoc("basic", "enforce", basicEgress)), func(c *Config) { c.Audit = al })
	var reached atomic.Int32
	h.route(addrPlain, 80, httpServer(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		reached.Add(1)
	})))
	disk.full.Store(true)
	al.Log(audit.Event{Kind: audit.KindDNS, Decision: audit.DecisionAllow}) // its write fails
	for al.Health() == nil {
		time.Sleep(time.Millisecond) // polling the writer's state, not synchronising
	}
	for _, url := range []string{"http://plain.test/", "http://evil.test/"} {
		resp, body := get(t, h.client(nil), "GET", url, nil)
		var b failedBody
		_ = json.Unmarshal([]byte(body), &b)
		if resp.StatusCode != http.StatusServiceUnavailable || b.Reason != "audit_unavailable" {
			t.Errorf("%s with a full disk: got %d %q, want 503 audit_unavailable", url, resp.StatusCode, body)
		}
	}
	if reached.Load() != 0 {
		t.Errorf("the upstream was reached %d times while the log could not be written", reached.Load())
	}
	disk.full.Store(false)
	for al.Health() != nil {
		time.Sleep(time.Millisecond)
	}
	if resp, _ := get(t, h.client(nil), "GET", "http://plain.test/", nil); resp.StatusCode != http.StatusOK || reached.Load() != 1 {
		t.Errorf("after space returned: got %d (upstream reached %d), want 200 without a restart", resp.StatusCode, reached.Load())
	}
	if text := disk.log.text(); !strings.Contains(text, `"count":2,`) || strings.Contains(text, "evil.test") {
		t.Errorf("want the 2 refused requests counted in one event and no event of their own:\n%s", disk.log.text())
	}
}

func TestConcurrentDenialFloodIsSummarised(t *testing.T) {
	log := newEventLog()
	al, err := audit.New(audit.Options{Writer: log, FloodInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = al.Close() })
	h := newHarness(t, mustPolicy(t, policyDoc("basic", "enforce", basicEgress)), func(c *Config) { c.Audit = al })
	h.log = log
	const workers, each = 20, 50
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := h.client(nil)
			for range each {
				resp, _ := get(t, c, "GET", "http://evil.test/", nil)
				if resp.StatusCode != http.StatusForbidden {
					t.Errorf("got %d, want 403", resp.StatusCode)
				}
			}
		}()
	}
	wg.Wait()
	var events, sum int
	for _, ev := range h.log.events(t) {
		events++
		if c, ok := ev["count"].(float64); ok {
			sum += int(c)
		} else {
			sum++
		}
	}
	if sum != workers*each || events >= workers*each/2 {
		t.Fatalf("%d denials made %d events counting %d; want fewer events counting all", workers*each, events, sum)
	}
}

// connect sends a CONNECT for target with X-Request-Id id and returns the response head.
func connect(t *testing.T, addr, target, id string) *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nX-Request-Id: %s\r\n\r\n", target, target, id)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestConnectWritesBeforeAnswering(t *testing.T) {
	h := newHarness(t, mustPolicy(t, policyDoc("basic", "enforce", basicEgress)))
	h.route(addrAPI, 443, httpServer(t, echo()))
	for _, tc := range []struct {
		target, id string
		status     int
		decision   string
	}{
		{"api.test:443", "tunnel-ok", http.StatusOK, "allow"},
		{"evil.test:443", "tunnel-denied", http.StatusForbidden, "deny"},
	} {
		resp := connect(t, h.addr, tc.target, tc.id)
		if resp.StatusCode != tc.status || resp.Header.Get(headerAirlockRequestID) != tc.id {
			t.Errorf("%s: got %d with id %q, want %d with %q", tc.target, resp.StatusCode, resp.Header.Get(headerAirlockRequestID), tc.status, tc.id)
		}
		if evs := eventsWithID(t, h.log, tc.id); len(evs) != 1 || evs[0]["decision"] != tc.decision || evs[0]["kind"] != "connect" {
			t.Errorf("%s: events %v in the log when the answer arrived, want one %s event", tc.target, evs, tc.decision)
		}
	}
}
