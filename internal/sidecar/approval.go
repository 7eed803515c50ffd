package sidecar

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/airlock-dev/airlock/approval"
	"github.com/airlock-dev/airlock/dnsfilter"
	"github.com/airlock-dev/airlock/egress"
	"github.com/airlock-dev/airlock/proxy"
)

// The approval stage is the proxy's and the DNS filter's approval seam.
var (
	_ proxy.Approvals     = (*approval.Stage)(nil)
	_ dnsfilter.Approvals = (*approval.Stage)(nil)
)

// approvals is the approval stage of a running sidecar (issue 31): built with the shared
// inputs, since the DNS filter and the proxy read the effective policy (the loaded policy
// plus the live grants) from it; started before them, so that kept grants are loaded
// before the first query; its operator socket lives in the state directory.
type approvals struct {
	s     *Sidecar
	stage *approval.Stage

	cancel context.CancelFunc
	wg     sync.WaitGroup
	ln     net.Listener
	once   sync.Once
}

func (a *approvals) name() string { return "approval stage" }

// build makes the stage; it opens nothing. The webhook is dialled through the operator's
// dial path (any address the operator configured, like Vault's), with the HMAC key from the
// credential broker.
func (a *approvals) build() error {
	s := a.s
	st, err := approval.New(approval.Config{
		Policy:     s.store,
		StateDir:   s.cfg.StateDir,
		Sandbox:    s.cfg.Sandbox,
		Audit:      s.audit,
		Logger:     s.log,
		Registerer: s.reg,
		Resolver:   s.resolver,
		Self:       s.self,
		OnChange:   s.reload.grantsChanged,
		Transport:  s.operator.Transport(egress.AllRanges(), nil),
		Secrets:    brokerSecrets{s.creds},
	})
	if err != nil {
		return fmt.Errorf("approval stage: %w", err)
	}
	a.stage = st
	return nil
}

// start loads the kept grants, starts ending them as they expire, and serves the operator
// socket in the state directory.
func (a *approvals) start(ctx context.Context) error {
	s := a.s
	if err := a.stage.Load(); err != nil {
		return err
	}
	ctx, a.cancel = context.WithCancel(ctx)
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		a.stage.Run(ctx)
	}()
	if s.cfg.StateDir == "" {
		return nil
	}
	ln, err := approval.Listen(s.cfg.StateDir)
	if err != nil {
		// A state directory whose path is too long for a unix socket (108 bytes) must not
		// keep the sidecar from serving: asks then go unanswered (approval_pending), or to
		// the webhook. Fail closed, loudly.
		s.log.WithField("error", err.Error()).Error("approvals: no operator socket; the CLI cannot answer asks (a shorter --state-dir fixes it)")
		return nil
	}
	a.ln = ln
	s.goServe("approvals", func() error { return a.stage.Serve(ctx, ln) })
	s.log.WithField("socket", ln.Addr().String()).Info("approvals: operator socket listening")
	return nil
}

// close stops the socket and the expiry loop; the grants stay in the state directory.
func (a *approvals) close(context.Context) error {
	a.once.Do(func() {
		if a.cancel != nil {
			a.cancel()
		}
		if a.ln != nil {
			a.ln.Close()
		}
		a.wg.Wait()
		if a.stage != nil {
			a.stage.Close()
		}
	})
	return nil
}

// brokerSecrets fetches the webhook's key through the credential broker, which the
// credential component builds after the stage.
type brokerSecrets struct{ cb *credentialBroker }

func (b brokerSecrets) Value(ctx context.Context, name string) (string, error) {
	if b.cb == nil || b.cb.broker == nil {
		return "", errors.New("the credential broker is not running")
	}
	return b.cb.broker.Value(ctx, name)
}
