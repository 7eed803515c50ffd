package llmproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/test/fakellm"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Keys the fakes accept and the caller sends: the two must never cross.
const (
	openaiKey    = "sk-proj-PROVIDERKEYopenai-0123456789abcdef"
	anthropicKey = "sk-ant-api03-PROVIDERKEYanthropic-0123456789"
	callerKey    = "sk-caller-key-that-must-not-reach-a-provider"
)

// staticPolicy is a PolicySource with a fixed policy.
type staticPolicy struct{ p *policy.Policy }

func (s staticPolicy) Current() *policy.Policy { return s.p }

// mapKeys stands in for the credential broker (not part of this package): a fixed map.
type mapKeys map[string]string

func (m mapKeys) Value(_ context.Context, secret string) (string, error) {
	v, ok := m[secret]
	if !ok {
		return "", fmt.Errorf("secret %q unavailable", secret)
	}
	return v, nil
}

// env is one test's setup: fake providers, the proxy on a loopback listener, its ledger.
type env struct {
	t         testing.TB
	openai    *fakellm.Server
	anthropic *fakellm.Server
	oaURL     string
	anURL     string
	proxy     *Proxy
	now       func() time.Time // the proxy's clock; nil means time.Now
	admit     func() error     // Config.Admit
	ledger    *Ledger
	stateDir  string
	URL       string // http://127.0.0.1:port of the proxy
	audit     *auditSink
	keys      mapKeys
	stopFn    func()
	ids       Identities
}

// auditSink collects audit lines; while full is set its writes fail as on a full disk.
type auditSink struct {
	mu   sync.Mutex
	buf  strings.Builder
	full atomic.Bool
}

func (a *auditSink) Write(p []byte) (int, error) {
	if a.full.Load() {
		return 0, syscall.ENOSPC
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.buf.Write(p)
}

func (a *auditSink) String() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.buf.String()
}

// policyYAML is the test policy; %s are the fake providers' URLs, then the extra llm
// fields (budget ...).
const policyYAML = `apiVersion: airlock/v1
kind: EgressPolicy
metadata: {name: llm-test}
spec:
  secrets:
    openai-key: {env: TEST_OPENAI_KEY}
    anthropic-key: {env: TEST_ANTHROPIC_KEY}
  llm:
    providers:
      openai: {baseURL: "%s", apiKey: {secret: openai-key}, retries: 2}
      anthropic: {baseURL: "%s", apiKey: {secret: anthropic-key}}
      backup: {baseURL: "%s", type: openai-compatible, apiKey: {secret: openai-key}}
    models:
      - {name: gpt-test, provider: openai, upstreamModel: gpt-upstream, price: {inputPerMTok: 1, outputPerMTok: 2}, fallbacks: [gpt-backup]}
      - {name: gpt-backup, provider: backup}
      - {name: claude-test, provider: anthropic, upstreamModel: claude-upstream, price: {inputPerMTok: 3, outputPerMTok: 15}}
%s`

type setup struct {
	openai, anthropic fakellm.Config
	llmExtra          string // appended under spec.llm (indented four spaces)
	stateDir          string
	backupURL         string
	now               func() time.Time // the proxy's clock; nil means time.Now
	admit             func() error     // Config.Admit
	identities        Identities       // Config.Identities; nil means none
}

func newEnv(t testing.TB, s setup) *env {
	t.Helper()
	s.openai.Flavor, s.anthropic.Flavor = fakellm.OpenAI, fakellm.Anthropic
	if s.openai.Key == "" {
		s.openai.Key = openaiKey
	}
	if s.anthropic.Key == "" {
		s.anthropic.Key = anthropicKey
	}
	e := &env{t: t, openai: fakellm.New(s.openai), anthropic: fakellm.New(s.anthropic), audit: &auditSink{}}
	oa := httptest.NewServer(e.openai)
	an := httptest.NewServer(e.anthropic)
	t.Cleanup(oa.Close)
	t.Cleanup(an.Close)
	e.oaURL, e.anURL = oa.URL, an.URL
	if s.backupURL == "" {
		s.backupURL = oa.URL
	}
	pol, err := policy.Parse("test.yaml", fmt.Appendf(nil, policyYAML, oa.URL, an.URL, s.backupURL, s.llmExtra))
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	e.stateDir = s.stateDir
	if e.stateDir == "" {
		e.stateDir = t.TempDir()
	}
	e.keys = mapKeys{"openai-key": openaiKey, "anthropic-key": anthropicKey}
	e.now, e.ids, e.admit = s.now, s.identities, s.admit
	e.start(pol)
	return e
}

// start opens the ledger and serves a new proxy for pol.
func (e *env) start(pol *policy.Policy) {
	t := e.t
	l, err := OpenLedger(e.stateDir, nil)
	if err != nil {
		t.Fatalf("open ledger: %v", err)
	}
	al, err := audit.New(audit.Options{Sandbox: "test", Writer: e.audit})
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{Policy: staticPolicy{pol}, Keys: e.keys, Ledger: l, Audit: al, RetryBackoff: time.Millisecond, Now: e.now, Admit: e.admit, Identities: e.ids})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.proxy, e.ledger, e.URL = p, l, "http://"+ln.Addr().String()
	done := make(chan error, 1)
	go func() { done <- p.Serve(ln) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := p.Shutdown(ctx); err != nil {
				t.Errorf("shutdown: %v", err)
			}
			if err := <-done; !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("serve: %v", err)
			}
			if err := l.Close(); err != nil {
				t.Errorf("ledger close: %v", err)
			}
			al.Close()
		})
	}
	e.stopFn = stop
	t.Cleanup(stop)
}

// post sends body to path with the caller's key and returns status, headers and body.
func (e *env) post(path, body string) (int, http.Header, string) {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+callerKey)
	req.Header.Set("X-Api-Key", callerKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// assertNoCallerKeyUpstream checks that no provider saw the caller's key and each saw only
// its own.
func (e *env) assertKeysSeparated() {
	e.t.Helper()
	for _, f := range []*fakellm.Server{e.openai, e.anthropic} {
		for _, h := range f.Headers() {
			for name, vs := range h {
				for _, v := range vs {
					if strings.Contains(v, callerKey) {
						e.t.Errorf("provider received the caller's key in %s", name)
					}
				}
			}
		}
	}
	if a := e.audit.String(); strings.Contains(a, openaiKey) || strings.Contains(a, anthropicKey) {
		e.t.Errorf("a provider key is in the audit log")
	}
}

func fakeConfig(key string, echo bool) fakellm.Config {
	return fakellm.Config{Key: key, EchoKeyInErrors: echo}
}

func fakellmIgnoreMax() fakellm.Config {
	return fakellm.Config{IgnoreMaxTokens: true}
}

// settled waits until the ledger has settled requests calls, then flushes it. A call's record
// is settled after its response is done, so a client can read a stream's last event before
// the proxy has counted it.
func (e *env) settled(t testing.TB, requests int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.ledger.Totals().Total.Requests < requests {
		if time.Now().After(deadline) {
			t.Fatalf("ledger settled %d calls after 10 s, want %d", e.ledger.Totals().Total.Requests, requests)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := e.ledger.Flush(); err != nil {
		t.Fatal(err)
	}
}
