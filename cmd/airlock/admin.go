package main

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// newAdminServer serves the admin endpoints. It never serves the sandbox: the admin listener
// stays on loopback (or a pod-internal address) and is never an allowed destination.
//
//	/healthz       200 while the process serves
//	/readyz        200 once every listener is up and a policy is loaded, else 503
//	/metrics       Prometheus metrics
//	/v1/decisions  the most recent audit events, newest first (JSON)
//	/v1/usage      model usage per model and the budget left (JSON; 404 with --llm-addr off)
//	/debug/pprof/  Go profiles, only with withPprof (--admin-pprof)
func newAdminServer(reg *prometheus.Registry, store *policy.Store, al *audit.Logger, ready <-chan struct{}, withPprof bool, usage http.Handler) *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		select {
		case <-ready:
			_, _ = w.Write([]byte("ready: policy " + store.Current().Name() + "\n"))
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("starting\n"))
		}
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /v1/decisions", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"decisions": al.Recent()})
	})
	mux.Handle("GET /v1/usage", usage)
	if withPprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	}
	return &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
}
