package sidecar

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/airlock-dev/airlock/llmproxy"
)

// llmComponent is the local model API of a running sidecar: its proxy, its usage ledger and
// its listener.
type llmComponent struct {
	s *Sidecar

	proxy *llmproxy.Proxy // nil with --llm-addr off
	// started is proxy once built, for the usage meter's goroutine.
	started atomic.Pointer[llmproxy.Proxy]
	ledger  *llmproxy.Ledger
	ln      net.Listener

	closeOnce sync.Once
}

func (l *llmComponent) name() string { return "model API" }

// start opens the usage ledger in the state directory, builds the model API and serves it
// on --llm-addr. With --llm-addr off it does nothing (the admin /v1/usage then answers 404).
func (l *llmComponent) start(context.Context) error {
	s := l.s
	if s.cfg.LLMAddr == Off {
		return nil
	}
	var err error
	if l.ledger, err = llmproxy.OpenLedger(s.cfg.StateDir, nil); err != nil {
		return fmt.Errorf("--state-dir: %v", err)
	}
	if l.ln, err = net.Listen("tcp", s.cfg.LLMAddr); err != nil {
		return fmt.Errorf("--llm-addr: %v", err)
	}
	s.self.AddListener(l.ln)
	p, err := llmproxy.New(llmproxy.Config{
		Policy: s.store,
		// Provider keys come from the credential broker (env, file or Vault sources); it fails
		// closed and teaches the log redactor every key it fetches.
		Keys:       s.creds.broker,
		Ledger:     l.ledger,
		Audit:      s.audit,
		Logger:     s.log,
		Registerer: s.reg,
		Operator:   s.operator,
		Admit:      s.usage.admit,
	})
	if err != nil {
		return err
	}
	l.proxy = p
	l.started.Store(p)
	ln := l.ln
	s.goServe("llm", func() error { return p.Serve(ln) })
	s.log.WithField("llm", ln.Addr().String()).Info("model API listening")
	return nil
}

// proxyIfStarted returns the model API once it is built, else nil; safe from any goroutine.
func (l *llmComponent) proxyIfStarted() *llmproxy.Proxy { return l.started.Load() }

// usageHandler serves /v1/usage on the admin listener.
func (l *llmComponent) usageHandler() http.Handler {
	if l.proxy == nil {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "the model API is off (--llm-addr off)", http.StatusNotFound)
		})
	}
	return l.proxy.UsageHandler()
}

// close lets calls in flight finish (they settle in the ledger) and then syncs and closes the
// ledger.
func (l *llmComponent) close(ctx context.Context) error {
	l.closeOnce.Do(func() {
		if l.proxy != nil {
			if err := l.proxy.Shutdown(ctx); err != nil {
				l.s.log.WithError(err).Warn("model API shutdown did not finish cleanly")
			}
		} else if l.ln != nil {
			l.ln.Close()
		}
		if l.ledger != nil {
			if err := l.ledger.Close(); err != nil {
				l.s.log.WithError(err).Error("usage ledger close failed")
			}
		}
	})
	return nil
}
