package dnsfilter

import (
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the filter's Prometheus collectors. They live on the Filter, never in package
// state, and are registered on Config.Registerer.
type metrics struct {
	queries   *prometheus.CounterVec // decision, reason, identity
	upstream  *prometheus.CounterVec // result: ok, error
	allowMap  *prometheus.CounterVec // op: allow, revoke, error
	evictions prometheus.Counter
	duration  prometheus.Histogram

	// counters caches the children of the vectors above by label values: WithLabelValues
	// hashes the values and takes the vector's lock on every call, on every query.
	countersMu sync.RWMutex
	counters   map[counterKey]prometheus.Counter
}

// counterKey names one child of a counter vector: the vector and up to three label values.
type counterKey struct {
	vec     *prometheus.CounterVec
	a, b, c string
}

// query returns the child of queries for a query's decision, reason and identity (the
// spec.identities name that sent it; "" for the sandbox's own, or when it cannot be told).
func (m *metrics) query(decision, reason, identity string) prometheus.Counter {
	return m.child(counterKey{m.queries, decision, reason, identity})
}

// counter returns the child of a one-label vec with label value a. Like WithLabelValues, it
// creates the series on first use.
func (m *metrics) counter(vec *prometheus.CounterVec, a string) prometheus.Counter {
	return m.child(counterKey{vec: vec, a: a})
}

// child returns the child k names, from the cache when it holds it.
func (m *metrics) child(k counterKey) prometheus.Counter {
	vec := k.vec
	m.countersMu.RLock()
	c, ok := m.counters[k]
	m.countersMu.RUnlock()
	if ok {
		return c
	}
	if vec == m.queries {
		c = vec.WithLabelValues(k.a, k.b, k.c)
	} else {
		c = vec.WithLabelValues(k.a)
	}
	m.countersMu.Lock()
	m.counters[k] = c
	m.countersMu.Unlock()
	return c
}

func newMetrics() *metrics {
	return &metrics{
		queries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_dns_queries_total",
			Help: "DNS queries answered by the filter, by decision (allow, deny, report), reason and identity (spec.identities; empty for the sandbox's own).",
		}, []string{"decision", "reason", "identity"}),
		upstream: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_dns_upstream_exchanges_total",
			Help: "Queries forwarded upstream, by result (ok, error).",
		}, []string{"result"}),
		allowMap: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_dns_allow_map_updates_total",
			Help: "Kernel allow map updates by the DNS filter: addresses allowed, evicted, and failed updates.",
		}, []string{"op"}),
		evictions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "airlock_dns_evictions_total",
			Help: "Addresses evicted (and revoked) by the per-name cap dns.maxIPsPerName.",
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "airlock_dns_query_duration_seconds",
			Help:    "Time from a query's arrival to its answer being written.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		counters: map[counterKey]prometheus.Counter{},
	}
}

// register registers every collector on r, unregistering those already registered when one
// fails, so a failed New leaves the registry as it found it.
func (m *metrics) register(r prometheus.Registerer) error {
	if r == nil {
		return nil
	}
	cs := []prometheus.Collector{m.queries, m.upstream, m.allowMap, m.evictions, m.duration}
	for i, c := range cs {
		if err := r.Register(c); err != nil {
			for _, done := range cs[:i] {
				r.Unregister(done)
			}
			return fmt.Errorf("register dns filter metrics: %w", errors.Join(err))
		}
	}
	return nil
}
