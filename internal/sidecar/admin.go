package sidecar

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"
)

// adminComponent serves the admin endpoints. It never serves the sandbox: the admin listener
// stays on loopback (or a pod-internal address) and is never an allowed destination.
//
//	/healthz       200 while the process serves
//	/readyz        200 once every listener is up and a policy is loaded, and while the audit
//	               log takes writes and (with --audit-ship-fail-closed) the shipping backlog
//	               is not full; else 503 saying why. The body says when shipping lags, and
//	               when checkpoint signing (--audit-sign vault-transit:) lags.
//	/metrics       Prometheus metrics
//	/v1/decisions  the most recent audit events, newest first (JSON)
//	/v1/usage      model usage per model and the budget left (JSON; 404 with --llm-addr off)
//	/debug/pprof/  Go profiles, only with --admin-pprof
type adminComponent struct {
	s *Sidecar

	srv *http.Server

	closeOnce sync.Once
}

func (a *adminComponent) name() string { return "admin endpoints" }

func (a *adminComponent) start(context.Context) error {
	s := a.s
	if s.sockets.admin == nil {
		return nil
	}
	a.srv = &http.Server{Handler: a.mux(), ReadHeaderTimeout: 10 * time.Second}
	srv, ln := a.srv, s.sockets.admin
	s.goServe("admin", func() error { return srv.Serve(ln) })
	return nil
}

func (a *adminComponent) mux() *http.ServeMux {
	s := a.s
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		select {
		case <-s.ready:
			if err := s.audit.Health(); err != nil { // requests fail closed meanwhile
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte("not ready: " + err.Error() + "\n"))
				return
			}
			// Shipping that lags keeps the sidecar ready (the body says so); only a full
			// backlog with --audit-ship-fail-closed does not.
			shipLine, err := s.ship.readyz()
			if err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte("not ready: " + err.Error() + "\n"))
				return
			}
			_, _ = w.Write([]byte("ready: policy " + s.store.Current().Name() + "\n"))
			if shipLine != "" {
				_, _ = w.Write([]byte(shipLine + "\n"))
			}
			if signLine := s.signingReadyz(); signLine != "" {
				_, _ = w.Write([]byte(signLine + "\n"))
			}
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("starting\n"))
		}
	})
	mux.Handle("GET /metrics", promHandler(s.reg))
	mux.HandleFunc("GET /v1/decisions", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"decisions": s.audit.Recent()})
	})
	mux.Handle("GET /v1/usage", s.llm.usageHandler())
	mux.Handle("GET /v1/usage/compute", s.usage.handler())
	if s.cfg.AdminPprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	}
	return mux
}

func (a *adminComponent) close(ctx context.Context) error {
	a.closeOnce.Do(func() {
		if a.srv != nil {
			_ = a.srv.Shutdown(ctx)
		}
	})
	return nil
}
