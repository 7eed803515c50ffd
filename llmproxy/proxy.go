package llmproxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/egress"
	"github.com/airlock-dev/airlock/policy"
)

// Proxy is the local model API. It is safe for concurrent use.
type Proxy struct {
	cfg          Config
	log          logrus.FieldLogger
	now          func() time.Time
	budget       *Budget
	tok          *tokenizers
	routes       routesCache
	idRoutes     identityRoutes
	transports   *transports
	metrics      *metrics
	backoff      time.Duration
	maxRetryWait time.Duration
	maxBody      int64
	mux          *http.ServeMux
	srv          *http.Server
}

// New builds a Proxy from cfg; the budget starts from the ledger's totals. It starts
// nothing: Serve does.
func New(cfg Config) (*Proxy, error) {
	switch {
	case cfg.Policy == nil:
		return nil, errors.New("llmproxy: Config.Policy is required")
	case cfg.Keys == nil:
		return nil, errors.New("llmproxy: Config.Keys is required")
	case cfg.Ledger == nil:
		return nil, errors.New("llmproxy: Config.Ledger is required")
	case cfg.Audit == nil:
		return nil, errors.New("llmproxy: Config.Audit is required")
	}
	p := &Proxy{cfg: cfg, log: cfg.Logger, now: cfg.Now, backoff: cfg.RetryBackoff, maxRetryWait: cfg.MaxRetryWait, maxBody: cfg.MaxBodyBytes}
	if p.log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		p.log = l
	}
	if p.now == nil {
		p.now = time.Now
	}
	if p.backoff <= 0 {
		p.backoff = defaultRetryBackoff
	}
	if p.maxRetryWait <= 0 {
		p.maxRetryWait = defaultMaxRetryWait
	}
	if p.maxBody <= 0 {
		p.maxBody = DefaultMaxBodyBytes
	}
	op := cfg.Operator
	if op == nil {
		var err error
		if op, err = egress.NewOperator(egress.Config{}); err != nil {
			return nil, fmt.Errorf("llmproxy: %w", err)
		}
	}
	p.transports = &transports{op: op, byKey: make(map[string]*http.Transport)}
	p.metrics = newMetrics(cfg.Registerer)
	p.tok = newTokenizers()
	p.restoreBudgets(cfg.Ledger)
	p.mux = http.NewServeMux()
	for _, ep := range []endpoint{epChat, epCompletions, epEmbeddings, epResponses, epMessages, epCountTokens} {
		p.mux.HandleFunc("POST "+ep.path(), func(w http.ResponseWriter, r *http.Request) { p.serveCall(w, r, ep) })
	}
	p.mux.HandleFunc("GET /v1/models", p.serveModels)
	p.mux.HandleFunc("GET /v1/models/{model...}", p.serveModels)
	p.mux.HandleFunc("/", p.serveNotFound)
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute}
	p.updateRemaining(p.table())
	return p, nil
}

// ServeHTTP serves the model API.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) { p.mux.ServeHTTP(w, r) }

// Serve serves the model API on ln until Shutdown (after which it returns
// http.ErrServerClosed, also when Shutdown came first).
func (p *Proxy) Serve(ln net.Listener) error {
	p.transports.op.Self().AddListener(ln)
	return p.srv.Serve(ln)
}

// Shutdown stops accepting calls and waits (until ctx ends) for calls in flight; a call
// that ends settles in the ledger as usual. It does not close the ledger.
func (p *Proxy) Shutdown(ctx context.Context) error {
	err := p.srv.Shutdown(ctx)
	p.transports.closeIdle()
	return err
}

// table returns the routes of the policy in force.
func (p *Proxy) table() *routeTable { return p.routes.get(p.cfg.Policy.Current()) }

// serveNotFound answers paths the API does not have, in the OpenAI format (most SDKs).
func (p *Proxy) serveNotFound(w http.ResponseWriter, r *http.Request) {
	(&apiError{status: http.StatusNotFound, code: "unknown_endpoint", openaiType: "invalid_request_error",
		message: "airlock: no endpoint " + r.Method + " " + r.URL.Path + "; the model API serves POST /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses, /v1/messages, /v1/messages/count_tokens and GET /v1/models"}).write(w, familyOpenAI)
}

// serveModels lists the policy's models: the Anthropic format when the caller sends
// anthropic-version (the Anthropic SDKs do), else the OpenAI format.
func (p *Proxy) serveModels(w http.ResponseWriter, r *http.Request) {
	t, _, iderr := p.tableFor(r)
	if iderr != nil {
		f := familyOpenAI
		if r.Header.Get("Anthropic-Version") != "" {
			f = familyAnthropic
		}
		iderr.write(w, f)
		return
	}
	anthropic := r.Header.Get("Anthropic-Version") != ""
	item := func(name string) map[string]any {
		rt := t.models[name]
		if anthropic {
			return map[string]any{"type": "model", "id": name, "display_name": name, "created_at": "1970-01-01T00:00:00Z"}
		}
		return map[string]any{"id": name, "object": "model", "created": 0, "owned_by": rt.provider}
	}
	w.Header().Set("Content-Type", "application/json")
	if id := r.PathValue("model"); id != "" {
		if _, ok := t.models[id]; !ok {
			f := familyOpenAI
			if anthropic {
				f = familyAnthropic
			}
			notAllowed(t, id).write(w, f)
			return
		}
		_ = json.NewEncoder(w).Encode(item(id))
		return
	}
	data := make([]any, 0, len(t.names))
	for _, n := range t.names {
		data = append(data, item(n))
	}
	if anthropic {
		var first, last any
		if len(t.names) > 0 {
			first, last = t.names[0], t.names[len(t.names)-1]
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"data": data, "has_more": false, "first_id": first, "last_id": last})
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data})
}

// Usage is the report of /v1/usage and airlock usage.
type Usage struct {
	Models []ModelUsageReport `json:"models"`
	Total  ModelUsageReport   `json:"total"`
	Budget BudgetReport       `json:"budget"`
	// Identities are each identity's calls (spec.identities), sorted by name; they are
	// counted in Models and Total too.
	Identities []IdentityUsageReport `json:"identities,omitempty"`
}

// IdentityUsageReport is one identity's part of a Usage report.
type IdentityUsageReport struct {
	Identity string             `json:"identity"`
	Models   []ModelUsageReport `json:"models"`
	Total    ModelUsageReport   `json:"total"`
}

// ModelUsageReport is one model's line of a Usage report.
type ModelUsageReport struct {
	Model     string  `json:"model,omitempty"`
	Provider  string  `json:"provider,omitempty"`
	Requests  int64   `json:"requests"`
	Input     int64   `json:"input_tokens"`
	Output    int64   `json:"output_tokens"`
	CostUSD   float64 `json:"cost_usd"`
	Estimated int64   `json:"estimated,omitempty"`
}

// BudgetReport is the budget part of a Usage report; a nil cap means none.
type BudgetReport struct {
	Tokens          *int64   `json:"tokens,omitempty"`
	TokensRemaining *int64   `json:"tokens_remaining,omitempty"`
	USD             *float64 `json:"usd,omitempty"`
	USDRemaining    *float64 `json:"usd_remaining,omitempty"`
	ReservedTokens  int64    `json:"reserved_tokens"`
	ReservedUSD     float64  `json:"reserved_usd"`
}

// Report builds a Usage report from ledger totals, caps and what calls in flight hold.
func Report(t Totals, caps policy.Budget, held BudgetState) Usage {
	conv := func(m ModelUsage) ModelUsageReport {
		return ModelUsageReport{Model: m.Model, Provider: m.Provider, Requests: m.Requests, Input: m.Input,
			Output: m.Output, CostUSD: float64(m.CostNano) / 1e9, Estimated: m.Estimated}
	}
	u := Usage{Models: []ModelUsageReport{}, Total: conv(t.Total)}
	for _, m := range t.Models {
		u.Models = append(u.Models, conv(m))
	}
	for _, it := range t.Identities {
		ir := IdentityUsageReport{Identity: it.Identity, Models: []ModelUsageReport{}, Total: conv(it.Total)}
		for _, m := range it.Models {
			ir.Models = append(ir.Models, conv(m))
		}
		u.Identities = append(u.Identities, ir)
	}
	u.Budget.ReservedTokens, u.Budget.ReservedUSD = held.HeldTokens, float64(held.HeldNano)/1e9
	used := t.Total.Input + t.Total.Output
	if caps.Tokens > 0 {
		rem := max(0, caps.Tokens-used-held.HeldTokens)
		u.Budget.Tokens, u.Budget.TokensRemaining = &caps.Tokens, &rem
	}
	if caps.USD > 0 {
		rem := float64(max(0, nanoCap(caps.USD)-t.Total.CostNano-held.HeldNano)) / 1e9
		u.Budget.USD, u.Budget.USDRemaining = &caps.USD, &rem
	}
	return u
}

// restoreBudgets gives the sandbox's budget, and each identity's, the usage the ledger holds:
// lifetime totals, and what of the last minute's settles has not refilled the rate windows.
func (p *Proxy) restoreBudgets(l *Ledger) {
	t := l.Totals()
	p.budget = NewBudget(p.now, t.Total.Input+t.Total.Output, t.Total.CostNano)
	p.idRoutes.budgets = map[string]*Budget{}
	for _, it := range t.Identities {
		p.idRoutes.budgets[it.Identity] = NewBudget(p.now, it.Total.Input+it.Total.Output, it.Total.CostNano)
	}
	for _, r := range l.recentSettles(p.now().Add(-rateWindow)) {
		p.budget.restoreWindow(r.Time, r.Input+r.Output)
		if b := p.idRoutes.budgets[r.Identity]; b != nil {
			b.restoreWindow(r.Time, r.Input+r.Output)
		}
	}
}

// Usage returns the live usage report.
func (p *Proxy) Usage() Usage {
	return Report(p.cfg.Ledger.Totals(), p.table().budget, p.budget.State())
}

// Spend returns the budget's state: settled usage and what calls in flight have reserved.
func (p *Proxy) Spend() BudgetState { return p.budget.State() }

// UsageHandler serves the usage report as JSON (the admin listener's /v1/usage).
func (p *Proxy) UsageHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(p.Usage())
	})
}

// updateRemaining sets the remaining-budget gauges from the budget's own counters (the
// ledger's totals plus what calls in flight hold), without walking the ledger.
func (p *Proxy) updateRemaining(t *routeTable) {
	st := p.budget.State()
	if c := t.budget.Tokens; c > 0 {
		p.metrics.remaining.WithLabelValues("tokens").Set(float64(max(0, c-st.UsedTokens-st.HeldTokens)))
	}
	if c := t.budget.USD; c > 0 {
		p.metrics.remaining.WithLabelValues("usd").Set(float64(max(0, nanoCap(c)-st.UsedNano-st.HeldNano)) / 1e9)
	}
}
