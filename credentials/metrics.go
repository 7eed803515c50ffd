package credentials

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the broker's counters, per secret name (never a value).
type metrics struct {
	injections *prometheus.CounterVec // secret
	misuse     *prometheus.CounterVec // secret
	failures   *prometheus.CounterVec // secret
}

func newMetrics() *metrics {
	return &metrics{
		injections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_credential_injections_total",
			Help: "Requests a secret was injected into (header or placeholder), by secret name.",
		}, []string{"secret"}),
		misuse: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_credential_misuse_total",
			Help: "Requests denied for carrying a secret's placeholder where its rule does not allow it, or for injecting into cleartext http, by secret name.",
		}, []string{"secret"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_credential_failures_total",
			Help: "Requests failed closed (503) because a secret's value could not be had, by secret name.",
		}, []string{"secret"}),
	}
}

func (m *metrics) register(r prometheus.Registerer) error {
	if r == nil {
		return nil
	}
	cs := []prometheus.Collector{m.injections, m.misuse, m.failures}
	for i, c := range cs {
		if err := r.Register(c); err != nil {
			for _, done := range cs[:i] {
				r.Unregister(done)
			}
			return fmt.Errorf("register credential metrics: %w", err)
		}
	}
	return nil
}
