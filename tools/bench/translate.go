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
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/test/fakellm"
)

// The translation leg measures what translating a call costs: the same Anthropic model
// (a fake Anthropic provider in a child process) called directly with the Messages API,
// through airlock with the Messages API (passed through), and through airlock with the
// OpenAI Chat Completions API (translated both ways). "added" is the translated call's
// percentile minus the direct one's; "translation" is minus the passed-through one's.

// llmAnthropicRole is the argument that makes this binary the fake Anthropic provider.
const llmAnthropicRole = "llm-anthropic-provider-child"

// runLLMAnthropicChild serves the fake Anthropic provider on a loopback port until stdin
// closes.
func runLLMAnthropicChild() int {
	srv := &http.Server{Handler: fakellm.New(fakellm.Config{Flavor: fakellm.Anthropic, Key: llmBenchKey}), ReadHeaderTimeout: 10 * time.Second}
	return serveChild("llm anthropic provider", srv)
}

// trTarget is one way of making the call.
type trTarget struct {
	name       string
	path, body string
	direct     bool // to the provider itself, with its key
}

// trLoad is one measured load: conns closed-loop workers; stream measures time to first
// event.
type trLoad struct {
	name   string
	conns  int
	stream bool
}

// trResult is one load's latencies by target name.
type trResult struct {
	load trLoad
	lat  map[string][]time.Duration
	err  string
}

// translateReport is the whole translation leg.
type translateReport struct {
	results []trResult
	err     error
}

// trTargets are the three ways, in report order.
var trTargets = []trTarget{
	{name: "direct", path: "/v1/messages", direct: true,
		body: `{"model":"claude-bench","max_tokens":64,%s"messages":[{"role":"user","content":"Say hello in five words."}]}`},
	{name: "passthrough", path: "/v1/messages",
		body: `{"model":"bench-claude","max_tokens":64,%s"messages":[{"role":"user","content":"Say hello in five words."}]}`},
	{name: "translated", path: "/v1/chat/completions",
		body: `{"model":"bench-claude","max_tokens":64,%s"messages":[{"role":"user","content":"Say hello in five words."}]}`},
}

func runTranslateBench(ctx context.Context, e *env, root string) (rep translateReport) {
	dir := filepath.Join(root, "llm-translate")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return translateReport{err: err}
	}
	e.progress("llm translation: starting the fake Anthropic provider and airlock --llm-addr")
	prov, provAddr, err := startSelf(ctx, "llm-anthropic", llmAnthropicRole, nil, filepath.Join(dir, "provider.log"))
	if err != nil {
		return translateReport{err: fmt.Errorf("start fake provider: %w", err)}
	}
	defer prov.stop()
	policy := fmt.Sprintf(`apiVersion: airlock/v1
kind: EgressPolicy
metadata: {name: bench-translate}
spec:
  secrets:
    bench-key: {env: BENCH_LLM_KEY}
  llm:
    providers:
      anthropic: {baseURL: "http://%s", apiKey: {secret: bench-key}}
    models:
      - {name: bench-claude, provider: anthropic, upstreamModel: claude-bench, price: {inputPerMTok: 3, outputPerMTok: 15}}
    budget: {tokens: 1000000000000}
`, provAddr)
	al, llmAddr, err := startAirlockModelAPI(ctx, e, dir, "bench-translate", policy)
	if err != nil {
		return translateReport{err: err}
	}
	defer al.stop()
	for _, l := range []trLoad{{"1 connection", 1, false}, {"16 connections", 16, false}, {"TTFT, stream, 1 connection", 1, true}} {
		if ctx.Err() != nil {
			return translateReport{err: ctx.Err()}
		}
		e.progress("llm translation: %s", l.name)
		r := trResult{load: l, lat: map[string][]time.Duration{}}
		for _, t := range trTargets {
			base := "http://" + llmAddr
			if t.direct {
				base = "http://" + provAddr
			}
			lat, err := trRun(ctx, base, t, l, e.cfg.duration)
			if err != nil {
				r.err = fmt.Sprintf("%s: %v", t.name, err)
				rep.err = fmt.Errorf("llm translation %s: %s", l.name, r.err)
				break
			}
			r.lat[t.name] = lat
		}
		rep.results = append(rep.results, r)
	}
	return rep
}

// startAirlockModelAPI starts airlock's model API with policy (audit events under sandbox
// name sandbox); it returns the process and the --llm-addr. The LLM and translation legs
// share it.
func startAirlockModelAPI(ctx context.Context, e *env, dir, sandbox, policy string) (*proc, string, error) {
	bin := e.airlockBin
	if bin == "" {
		var err error
		if bin, err = airlockBinary(ctx, e, dir); err != nil {
			return nil, "", err
		}
	}
	policyPath := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policyPath, []byte(policy), 0o644); err != nil {
		return nil, "", err
	}
	var addrs [3]string
	for i := range addrs {
		a, err := freeAddr()
		if err != nil {
			return nil, "", err
		}
		addrs[i] = a
	}
	cmd := exec.Command(bin, "run", "--policy", policyPath, "--proxy-addr", addrs[0], "--admin-addr", addrs[1],
		"--llm-addr", addrs[2], "--state-dir", filepath.Join(dir, "state"), "--audit-log", filepath.Join(dir, "audit.jsonl"),
		"--sandbox", sandbox, "--transparent-addr", "off", "--dns-addr", "off", "--upstream-dns", "127.0.0.1:53")
	cmd.Dir = dir
	for _, kv := range withoutProxyEnv(os.Environ()) {
		if !strings.HasPrefix(kv, "AIRLOCK_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "BENCH_LLM_KEY="+llmBenchKey)
	p, err := startProc(sandbox, cmd, filepath.Join(dir, "airlock.log"))
	if err != nil {
		return nil, "", err
	}
	if err := waitReady(ctx, p, 30*time.Second, dialCheck(addrs[2])); err != nil {
		p.stop()
		return nil, "", err
	}
	return p, addrs[2], nil
}

// trOne makes one call and returns its latency, or its time to first event for a stream.
func trOne(ctx context.Context, client *http.Client, base string, t trTarget, stream bool) (time.Duration, error) {
	extra := ""
	if stream {
		extra = `"stream":true,`
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+t.path, strings.NewReader(fmt.Sprintf(t.body, extra)))
	req.Header.Set("Content-Type", "application/json")
	if t.direct {
		req.Header.Set("X-Api-Key", llmBenchKey)
		req.Header.Set("Anthropic-Version", "2023-06-01")
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
	if stream {
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil || !(strings.HasPrefix(line, "data: ") || strings.HasPrefix(line, "event: ")) {
			return 0, fmt.Errorf("first event: %q, %v", line, err)
		}
		first = time.Since(start)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, err
	}
	if stream {
		return first, nil
	}
	return time.Since(start), nil
}

// trRun runs load l closed-loop against base for d, after one unmeasured call per
// connection; the first failure ends it.
func trRun(ctx context.Context, base string, t trTarget, l trLoad, d time.Duration) ([]time.Duration, error) {
	tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: l.conns, MaxConnsPerHost: l.conns, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	for range l.conns {
		if _, err := trOne(ctx, client, base, t, l.stream); err != nil {
			return nil, err
		}
	}
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for range l.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) && ctx.Err() == nil {
				v, err := trOne(ctx, client, base, t, l.stream)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				} else if err == nil {
					lat = append(lat, v)
				}
				stop := firstErr != nil
				mu.Unlock()
				if stop {
					return
				}
			}
		}()
	}
	wg.Wait()
	return lat, firstErr
}

// printTranslateReport prints the translation leg.
func printTranslateReport(w io.Writer, rep translateReport) {
	fmt.Fprintln(w, "\nLLM translation: an Anthropic model called directly (Messages), through airlock (Messages, passed")
	fmt.Fprintln(w, "through) and through airlock from an OpenAI client (Chat Completions, translated). Milliseconds.")
	fmt.Fprintf(w, "  %-28s %8s %8s  %8s %8s  %8s %8s  %8s %8s  %8s %8s\n", "load", "direct50", "direct99", "pass50", "pass99",
		"trans50", "trans99", "added50", "added99", "xlate50", "xlate99")
	for _, r := range rep.results {
		if r.err != "" {
			fmt.Fprintf(w, "  %-28s invalid: %s\n", r.load.name, r.err)
			continue
		}
		d, p, t := r.lat["direct"], r.lat["passthrough"], r.lat["translated"]
		d50, d99, p50, p99, t50, t99 := pct(d, 50), pct(d, 99), pct(p, 50), pct(p, 99), pct(t, 50), pct(t, 99)
		fmt.Fprintf(w, "  %-28s %8s %8s  %8s %8s  %8s %8s  %8s %8s  %8s %8s\n", r.load.name, llmMS(d50), llmMS(d99), llmMS(p50), llmMS(p99),
			llmMS(t50), llmMS(t99), llmMS(t50-d50), llmMS(t99-d99), llmMS(t50-p50), llmMS(t99-p99))
	}
	if rep.err != nil && !errors.Is(rep.err, context.Canceled) {
		fmt.Fprintf(w, "  translation leg failed: %v\n", rep.err)
	}
}
