package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/test/fakellm"
)

// The LLM leg measures what airlock's model API adds to a model call: the same chat
// completion sent to a fake OpenAI provider (test/fakellm, in a child process) directly
// and through airlock's --llm-addr, at several concurrency levels and at a fixed 1000 req/s,
// plus the time to first token of a stream. Airlock runs with its full path on: model
// allowlist, budget reservation (a token cap is set), ledger, audit log, metrics. Added
// latency is the difference of the percentiles of the two runs, not a percentile of
// differences.

// llmProviderRole is the argument that makes this binary the fake provider.
const llmProviderRole = "llm-provider-child"

// llmBenchKey is the fake provider's key: airlock has it in its environment; the direct
// run sends it itself.
const llmBenchKey = "sk-bench-provider-key-000000000000"

// llmBenchTarget is the p99 added latency the issue sets at 1000 req/s.
const llmBenchTarget = time.Millisecond

// runLLMProviderChild serves the fake provider on a loopback port until stdin closes.
func runLLMProviderChild() int {
	srv := &http.Server{Handler: fakellm.New(fakellm.Config{Flavor: fakellm.OpenAI, Key: llmBenchKey}), ReadHeaderTimeout: 10 * time.Second}
	return serveChild("llm provider", srv)
}

// llmLoad is one measured load: closed-loop with conns workers, or open-loop at rate req/s.
type llmLoad struct {
	name   string
	conns  int
	rate   int
	stream bool
}

// llmResult is one load's figures, direct and through airlock.
type llmResult struct {
	load           llmLoad
	direct, via    []time.Duration // latency (non-stream) or time to first token (stream)
	errDirect, err string
}

// llmReport is the whole LLM leg.
type llmReport struct {
	results []llmResult
	err     error
}

const llmChatBody = `{"model":"bench-model","max_tokens":64,"messages":[{"role":"user","content":"Say hello in five words."}]}`
const llmStreamBody = `{"model":"bench-model","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"Say hello in five words."}]}`

func runLLMBench(ctx context.Context, e *env, root string) (rep llmReport) {
	dir := filepath.Join(root, "llm")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return llmReport{err: err}
	}
	e.progress("llm: starting the fake provider and airlock --llm-addr")
	prov, provAddr, err := startSelf(ctx, "llm-provider", llmProviderRole, nil, filepath.Join(dir, "provider.log"))
	if err != nil {
		return llmReport{err: fmt.Errorf("start fake provider: %w", err)}
	}
	defer prov.stop()
	al, llmAddr, err := startAirlockLLM(ctx, e, dir, provAddr)
	if err != nil {
		return llmReport{err: err}
	}
	defer al.stop()
	d := e.cfg.duration
	loads := []llmLoad{
		{name: "1 connection", conns: 1},
		{name: "16 connections", conns: 16},
		{name: "64 connections", conns: 64},
		{name: "1000 req/s", rate: 1000, conns: 128},
		{name: "TTFT, stream, 200 req/s", rate: 200, conns: 64, stream: true},
	}
	for _, l := range loads {
		if ctx.Err() != nil {
			return llmReport{err: ctx.Err()}
		}
		e.progress("llm: %s", l.name)
		r := llmResult{load: l}
		// Direct and via alternate so that drift on the machine hits both.
		var derr, verr error
		r.direct, derr = llmRun(ctx, "http://"+provAddr, true, l, d)
		r.via, verr = llmRun(ctx, "http://"+llmAddr, false, l, d)
		if derr != nil {
			r.errDirect = derr.Error()
		}
		if verr != nil {
			r.err = verr.Error()
		}
		rep.results = append(rep.results, r)
		if derr != nil || verr != nil {
			rep.err = fmt.Errorf("llm %s: direct %v, airlock %v", l.name, derr, verr)
		}
	}
	return rep
}

// startAirlockLLM starts airlock with a policy that routes bench-model to the fake provider.
func startAirlockLLM(ctx context.Context, e *env, dir, provAddr string) (*proc, string, error) {
	policy := fmt.Sprintf(`apiVersion: airlock/v1
kind: EgressPolicy
metadata: {name: bench-llm}
spec:
  secrets:
    bench-key: {env: BENCH_LLM_KEY}
  llm:
    providers:
      openai: {baseURL: "http://%s", apiKey: {secret: bench-key}}
    models:
      - {name: bench-model, provider: openai, upstreamModel: gpt-4o-mini, price: {inputPerMTok: 0.15, outputPerMTok: 0.6}}
    budget: {tokens: 1000000000000}
`, provAddr)
	return startAirlockModelAPI(ctx, e, dir, "bench-llm", policy)
}

// llmRun runs one load against base for d and returns the latencies (or times to first
// token). Every answer must be 200 with a body; the first failure ends the run.
func llmRun(ctx context.Context, base string, direct bool, l llmLoad, d time.Duration) ([]time.Duration, error) {
	tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: l.conns, MaxConnsPerHost: l.conns, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	body := llmChatBody
	if l.stream {
		body = llmStreamBody
	}
	one := func() (time.Duration, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if direct {
			req.Header.Set("Authorization", "Bearer "+llmBenchKey)
		}
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			return 0, fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(b))
		}
		var first time.Duration
		if l.stream {
			line, err := bufio.NewReader(resp.Body).ReadString('\n')
			if err != nil || !strings.HasPrefix(line, "data: ") {
				return 0, fmt.Errorf("first event: %q, %v", line, err)
			}
			first = time.Since(start)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return 0, err
		}
		if l.stream {
			return first, nil
		}
		return time.Since(start), nil
	}
	// Warm the connections up, unmeasured.
	for range l.conns {
		if _, err := one(); err != nil {
			return nil, err
		}
	}
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error
	record := func(v time.Duration, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil && firstErr == nil {
			firstErr = err
		}
		if err == nil {
			lat = append(lat, v)
		}
	}
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	if l.rate == 0 {
		for range l.conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(end) && ctx.Err() == nil {
					record(one())
				}
			}()
		}
		wg.Wait()
		return lat, firstErr
	}
	// Open loop: request i is due at start + i/rate; a worker late to it counts the wait
	// (no coordinated omission).
	jobs := make(chan time.Time, l.conns)
	for range l.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for due := range jobs {
				if w := time.Until(due); w > 0 {
					time.Sleep(w)
				}
				late := max(0, time.Since(due)) // queued behind busy workers
				v, err := one()
				record(v+late, err)
			}
		}()
	}
	start := time.Now()
	n := int(d.Seconds() * float64(l.rate))
	for i := range n {
		select {
		case jobs <- start.Add(time.Duration(i) * time.Second / time.Duration(l.rate)):
		case <-ctx.Done():
		}
	}
	close(jobs)
	wg.Wait()
	return lat, firstErr
}

// pct returns the p-th percentile of xs (sorted in place).
func pct(xs []time.Duration, p float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	i := int(p / 100 * float64(len(xs)-1))
	return xs[i]
}

func llmMS(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond)) }

// printLLMReport prints the LLM leg.
func printLLMReport(w io.Writer, rep llmReport) {
	fmt.Fprintln(w, "\nLLM proxy: latency airlock adds to a model call (fake OpenAI provider on loopback, chat completion;")
	fmt.Fprintln(w, "allowlist, budget reservation, ledger, audit and metrics on). Milliseconds.")
	fmt.Fprintf(w, "  %-26s %8s %8s   %8s %8s   %8s %8s  %s\n", "load", "direct50", "direct99", "via50", "via99", "added50", "added99", "calls")
	for _, r := range rep.results {
		if r.err != "" || r.errDirect != "" {
			fmt.Fprintf(w, "  %-26s invalid: direct %q, airlock %q\n", r.load.name, r.errDirect, r.err)
			continue
		}
		d50, d99, v50, v99 := pct(r.direct, 50), pct(r.direct, 99), pct(r.via, 50), pct(r.via, 99)
		fmt.Fprintf(w, "  %-26s %8s %8s   %8s %8s   %8s %8s  %d/%d\n", r.load.name, llmMS(d50), llmMS(d99), llmMS(v50), llmMS(v99),
			llmMS(v50-d50), llmMS(v99-d99), len(r.direct), len(r.via))
		if r.load.rate == 1000 && !r.load.stream {
			verdict := "met"
			if v99-d99 >= llmBenchTarget {
				verdict = "NOT met"
			}
			fmt.Fprintf(w, "  target p99 added < %s at 1000 req/s: %s\n", llmBenchTarget, verdict)
		}
	}
	if rep.err != nil && !errors.Is(rep.err, context.Canceled) {
		fmt.Fprintf(w, "  LLM leg failed: %v\n", rep.err)
	}
}
