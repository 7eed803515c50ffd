//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/test/privtest"
	"github.com/airlock-dev/airlock/test/testnet"
)

// kill -9 of the sidecar under concurrent load (allowed requests and denials): every request
// that got its response headers has its event in the --audit-log file (matched by
// request_id), and the file still verifies (a torn last line at most).
func TestKill9KeepsEveryAnsweredRequest(t *testing.T) {
	privtest.Require(t, "curl")
	parallelWorld(t)
	w := testnet.NewWorld(t)
	a := w.StartAirlock(t, testnet.AirlockConfig{Binary: airlockBinary(t), Policy: enforcePolicy, Sandbox: sandboxName,
		Args: []string{"--audit-checkpoint-every", "50ms"}}) // a kill -9 leaves a recent checkpoint
	client := a.Client(t, nil)
	var mu sync.Mutex
	var answered []string // request ids whose response headers arrived
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for worker := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				id := fmt.Sprintf("kill9-%d-%d", worker, i)
				// Allowed requests, and denials (answered at once, so the window between
				// answer and write is narrowest) to names of their own (no flood folding).
				url := "http://allowed.test/load"
				if i%2 == 1 {
					url = fmt.Sprintf("http://denied-%d-%d.test/", worker, i)
				}
				req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
				req.Header.Set("X-Request-Id", id)
				resp, err := client.Do(req)
				if err != nil {
					continue // the sidecar is gone, or the test is over
				}
				if got := resp.Header.Get("X-Airlock-Request-Id"); got != id {
					t.Errorf("response to %s carries request id %q", id, got)
				}
				mu.Lock()
				answered = append(answered, id)
				mu.Unlock()
				_ = resp.Body.Close()
			}
		}()
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(answered)
		mu.Unlock()
		if n >= 300 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond) // polling the load's progress, not synchronising
	}
	a.Kill(t)
	cancel()
	wg.Wait()

	data, err := os.ReadFile(a.AuditFile)
	if err != nil {
		t.Fatal(err)
	}
	inFile := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		var ev struct {
			RequestID string `json:"request_id"`
		}
		if json.Unmarshal([]byte(line), &ev) == nil && ev.RequestID != "" {
			inFile[ev.RequestID] = true
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(answered) < 100 {
		t.Fatalf("only %d requests were answered before the kill; want load", len(answered))
	}
	missing := 0
	for _, id := range answered {
		if !inFile[id] {
			missing++
			if missing <= 5 {
				t.Errorf("request %s got its response headers but has no event in %s", id, a.AuditFile)
			}
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d answered requests have no event in the audit log", missing, len(answered))
	}
	rep, err := audit.Verify([]string{a.AuditFile}, nil)
	if err != nil || !rep.Intact() || rep.SignedSeq == 0 {
		t.Errorf("audit verify after kill -9: %v, %v, signed up to seq %d; want intact with checkpoints", rep.Tampered, err, rep.SignedSeq)
	}
	t.Logf("%d requests answered before kill -9, all in the log; %d events, %d signed, torn %v", len(answered), rep.Events, rep.SignedSeq, rep.Torn)
}
