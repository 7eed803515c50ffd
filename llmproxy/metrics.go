package llmproxy

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the proxy's Prometheus metrics, registered on the sidecar's registry (none are
// global). Model, provider and identity labels only take names of the policy (identity "" is
// the sandbox's own).
type metrics struct {
	requests  *prometheus.CounterVec   // model, provider, status, identity
	tokens    *prometheus.CounterVec   // model, provider, direction, identity
	cost      *prometheus.CounterVec   // model, provider, identity
	latency   *prometheus.HistogramVec // model, provider
	ttft      *prometheus.HistogramVec // model, provider
	denied    *prometheus.CounterVec   // reason, identity
	retries   *prometheus.CounterVec   // provider
	remaining *prometheus.GaugeVec     // budget: tokens, usd
}

func newMetrics(reg prometheus.Registerer) *metrics {
	buckets := []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "airlock_llm_requests_total",
			Help: "Model calls, by model, provider, HTTP status returned to the caller and identity."}, []string{"model", "provider", "status", "identity"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "airlock_llm_tokens_total",
			Help: "Tokens charged, by model, provider, direction (input, output) and identity."}, []string{"model", "provider", "direction", "identity"}),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "airlock_llm_cost_usd_total",
			Help: "Cost charged in US dollars, from the policy's prices, by model, provider and identity."}, []string{"model", "provider", "identity"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "airlock_llm_request_duration_seconds",
			Help: "Model call duration, from request to the last byte.", Buckets: buckets}, []string{"model", "provider"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "airlock_llm_time_to_first_token_seconds",
			Help: "Time from request to the first event (stream) or first body byte passed to the caller.", Buckets: buckets}, []string{"model", "provider"}),
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "airlock_llm_denied_total",
			Help: "Model calls refused by airlock, by reason and identity."}, []string{"reason", "identity"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "airlock_llm_retries_total",
			Help: "Provider calls retried or sent to a fallback before the first byte."}, []string{"provider"}),
		remaining: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "airlock_llm_budget_remaining",
			Help: "Budget left (cap minus used minus reserved), by unit (tokens, usd); absent without a cap."}, []string{"unit"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.tokens, m.cost, m.latency, m.ttft, m.denied, m.retries, m.remaining)
	}
	return m
}

func statusLabel(s int) string { return strconv.Itoa(s) }
