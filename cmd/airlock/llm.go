package main

import (
	"context"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/egress"
	"github.com/airlock-dev/airlock/llmproxy"
)

// llmSidecar is the local model API of a running sidecar: its proxy, its ledger and its
// listener's serve loop.
type llmSidecar struct {
	proxy  *llmproxy.Proxy
	ledger *llmproxy.Ledger
	log    *logrus.Logger
}

// startLLM opens the usage ledger in the state directory, builds the model API and serves
// it on --llm-addr. With --llm-addr off it returns nil (the admin /v1/usage then answers
// 404). On error nothing is left open.
func startLLM(cfg *runConfig, s *sidecar, reg prometheus.Registerer, guard *egress.Guard, al audit.Sink) (*llmSidecar, error) {
	if cfg.llmAddr == "off" {
		return nil, nil
	}
	ledger, err := llmproxy.OpenLedger(cfg.stateDir, nil)
	if err != nil {
		return nil, failf("--state-dir: %v", err)
	}
	ln, err := net.Listen("tcp", cfg.llmAddr)
	if err != nil {
		ledger.Close()
		return nil, failf("--llm-addr: %v", err)
	}
	guard.Self().AddListener(ln) // the SSRF guard refuses it as a destination
	p, err := llmproxy.New(llmproxy.Config{
		Policy: s.store,
		// Provider keys come from the credential broker (env, file or Vault sources); it fails
		// closed and teaches the log redactor every key it fetches.
		Keys:       s.creds.broker,
		Ledger:     ledger,
		Audit:      al,
		Logger:     s.log,
		Registerer: reg,
		Guard:      guard,
	})
	if err != nil {
		ln.Close()
		ledger.Close()
		return nil, failf("%v", err)
	}
	l := &llmSidecar{proxy: p, ledger: ledger, log: s.log}
	s.goServe("llm", func() error { return p.Serve(ln) })
	s.log.WithField("llm", ln.Addr().String()).Info("model API listening")
	return l, nil
}

// usageHandler serves /v1/usage on the admin listener.
func (l *llmSidecar) usageHandler() http.Handler {
	if l == nil {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "the model API is off (--llm-addr off)", http.StatusNotFound)
		})
	}
	return l.proxy.UsageHandler()
}

// stop lets calls in flight finish (they settle in the ledger) and then syncs and closes the
// ledger.
func (l *llmSidecar) stop(ctx context.Context) {
	if l == nil {
		return
	}
	if err := l.proxy.Shutdown(ctx); err != nil {
		l.log.WithError(err).Warn("model API shutdown did not finish cleanly")
	}
	if err := l.ledger.Close(); err != nil {
		l.log.WithError(err).Error("usage ledger close failed")
	}
}
