package proxy

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric kinds: one per audit event, named after the event's source.
const (
	kindHTTP        = "http"        // an HTTP request (absolute-form, inside an intercepted tunnel, or transparent)
	kindConnect     = "connect"     // a CONNECT tunnel
	kindTransparent = "transparent" // a transparent TLS connection (or a transparent connection refused before any request)
)

// metrics are the proxy's Prometheus collectors. They live on the Proxy, never in package
// state, and are registered on Config.Registerer.
type metrics struct {
	requests    *prometheus.CounterVec   // kind, decision, rule, identity
	bytes       *prometheus.CounterVec   // direction, identity
	ownBytes    *identityBytes           // bytes of the sandbox's own identity ("")
	byIdentity  sync.Map                 // identity name → *identityBytes, for the others
	openTunnels prometheus.Gauge         // tunnels open now
	duration    *prometheus.HistogramVec // kind
	h1Paths     *prometheus.CounterVec   // path: HTTP/1.x requests by the server that read them
	h1Strict    prometheus.Counter       // h1Paths{path="strict"}
	h1NetHTTP   prometheus.Counter       // h1Paths{path="nethttp"}
	// durations holds duration's series of each kind seen (string -> prometheus.Observer),
	// looked up once rather than per request; a series still appears at its first use.
	durations sync.Map
	// series holds requests' series of each label tuple seen (requestLabels ->
	// prometheus.Counter): WithLabelValues validates and hashes its four labels under a lock
	// on every call. The tuples are as bounded as the series themselves (rules, identities).
	series sync.Map
}

// requestLabels are the labels of one series of requests.
type requestLabels struct{ kind, decision, rule, identity string }

func newMetrics() *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_proxy_requests_total",
			Help: "Requests and tunnels handled by the proxy, by kind, decision, rule and identity (spec.identities; empty for the sandbox's own).",
		}, []string{"kind", "decision", "rule", "identity"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "airlock_proxy_bytes_total",
			Help: "Payload bytes relayed: up (to upstreams) and down (to clients), by identity (spec.identities; empty for the sandbox's own).",
		}, []string{"direction", "identity"}),
		openTunnels: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "airlock_proxy_open_tunnels",
			Help: "CONNECT tunnels and transparent connections open now.",
		}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "airlock_proxy_request_duration_seconds",
			Help:    "Duration of requests and tunnels, from decision to the last byte.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600},
		}, []string{"kind"}),
	}
	m.h1Paths = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "airlock_proxy_http1_requests_total",
		Help: "HTTP/1.x requests by the path that read them: strict (the fast path) or nethttp (net/http and goproxy).",
	}, []string{"path"})
	m.h1Strict = m.h1Paths.WithLabelValues(pathStrict)
	m.h1NetHTTP = m.h1Paths.WithLabelValues(pathNetHTTP)
	m.ownBytes = m.newIdentityBytes("")
	return m
}

// identityBytes are the children of bytes for one identity.
type identityBytes struct {
	up, down prometheus.Counter
}

func (m *metrics) newIdentityBytes(identity string) *identityBytes {
	return &identityBytes{up: m.bytes.WithLabelValues("up", identity), down: m.bytes.WithLabelValues("down", identity)}
}

// bytesOf returns the byte counters of identity (a name of the policy's spec.identities, so
// the label takes a bounded set of values; "" for the sandbox's own).
func (m *metrics) bytesOf(identity string) *identityBytes {
	if identity == "" {
		return m.ownBytes
	}
	if b, ok := m.byIdentity.Load(identity); ok {
		return b.(*identityBytes)
	}
	b, _ := m.byIdentity.LoadOrStore(identity, m.newIdentityBytes(identity))
	return b.(*identityBytes)
}

// register registers every collector on r, unregistering those already registered when one
// fails, so a failed New leaves the registry as it found it.
func (m *metrics) register(r prometheus.Registerer) error {
	if r == nil {
		return nil
	}
	cs := []prometheus.Collector{m.requests, m.bytes, m.openTunnels, m.duration, m.h1Paths}
	for i, c := range cs {
		if err := r.Register(c); err != nil {
			for _, done := range cs[:i] {
				r.Unregister(done)
			}
			return fmt.Errorf("register proxy metrics: %w", err)
		}
	}
	return nil
}

// observe counts one finished request or tunnel of identity.
func (m *metrics) observe(kind, decision, rule, identity string, d time.Duration) {
	key := requestLabels{kind, decision, rule, identity}
	c, ok := m.series.Load(key)
	if !ok {
		c, _ = m.series.LoadOrStore(key, m.requests.WithLabelValues(kind, decision, rule, identity))
	}
	c.(prometheus.Counter).Inc()
	o, ok := m.durations.Load(kind)
	if !ok {
		o, _ = m.durations.LoadOrStore(kind, m.duration.WithLabelValues(kind))
	}
	o.(prometheus.Observer).Observe(d.Seconds())
}

// countPath counts one HTTP/1.x request on the path that read it ("" counts nothing).
func (m *metrics) countPath(path string) {
	switch path {
	case pathStrict:
		m.h1Strict.Inc()
	case pathNetHTTP:
		m.h1NetHTTP.Inc()
	}
}
