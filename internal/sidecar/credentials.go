package sidecar

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/credentials"
	"github.com/airlock-dev/airlock/credentials/vault"
	"github.com/airlock-dev/airlock/egress"
	"github.com/airlock-dev/airlock/llmproxy"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/proxy"
)

// reloadPrefetchTimeout bounds the background fetch of a reloaded policy's secrets.
const reloadPrefetchTimeout = time.Minute

// The broker is the proxy's injector and the model API's key source (Vault, env and file
// secrets, cached, fail closed).
var (
	_ proxy.Injector = (*credentials.Broker)(nil)
	_ llmproxy.Keys  = (*credentials.Broker)(nil)
)

// credentialBroker is the running broker, its Vault source and the placeholders file.
type credentialBroker struct {
	s *Sidecar

	broker *credentials.Broker
	vault  *vault.Source
	// vaultSrc is vault, for readers outside the start (the upstream proxy's credentials).
	vaultSrc     atomic.Pointer[vault.Source]
	placeholders *credentials.Placeholders

	// mu guards gen, the generation of the last policy whose placeholders were written, and
	// serialises the writes.
	mu  sync.Mutex
	gen uint64

	// bg bounds the background fetches after reloads (prefetch); close cancels it.
	bg        context.Context
	cancelBG  context.CancelFunc
	prefetch  sync.WaitGroup
	closeOnce sync.Once
}

func (cb *credentialBroker) name() string { return "credential broker" }

// start builds the broker (and logs in to Vault when configured), writes the placeholders
// file and fetches every secret of the policy once so values are cached and redacted before
// the first request. Fetch failures are logged, not fatal: requests that need a missing
// secret fail closed with 503.
func (cb *credentialBroker) start(context.Context) error {
	s := cb.s
	// Vault login, renewal and the first fetch do not end with the start's context: leases
	// are revoked by close.
	ctx := context.Background()
	cb.bg, cb.cancelBG = context.WithCancel(ctx)
	pol := s.store.Current()
	if err := cb.startVault(ctx, pol); err != nil {
		return err
	}
	ph, err := credentials.LoadPlaceholders(s.cfg.StateDir)
	if err != nil {
		return fmt.Errorf("--state-dir: %v", err)
	}
	bc := credentials.Config{Policy: s.store, Placeholders: ph, Redactor: s.redactor, Audit: s.audit, Logger: s.log,
		Registerer: s.reg, CacheTTL: s.cfg.CredentialCacheTTL}
	if cb.vault != nil {
		bc.Vault = cb.vault
	}
	if cb.broker, err = credentials.New(bc); err != nil {
		return err
	}
	cb.placeholders = ph
	if _, err := ph.WritePolicy(s.cfg.StateDir, pol); err != nil {
		return fmt.Errorf("--state-dir: %v", err)
	}
	if err := cb.broker.Prefetch(ctx); err != nil {
		s.log.WithField("error", err.Error()).Warn("some secrets could not be fetched at start; requests needing them fail closed until they can")
	}
	if n := len(pol.Secrets()); n > 0 {
		s.log.WithFields(logrus.Fields{"secrets": n, "placeholders": s.cfg.StateDir + "/" + credentials.PlaceholdersFile}).Info("credential broker ready")
	}
	return nil
}

// startVault logs in to Vault when --vault-addr is set; a policy with vault secrets needs it.
func (cb *credentialBroker) startVault(ctx context.Context, pol *policy.Policy) error {
	v := &cb.s.cfg.Vault
	var vaultNames []string
	for name, sec := range pol.Secrets() {
		if sec.Vault != nil {
			vaultNames = append(vaultNames, name)
		}
	}
	slices.Sort(vaultNames)
	if len(vaultNames) > 0 && v.Addr == "" {
		return fmt.Errorf("policy secrets %s come from Vault: set --vault-addr (or VAULT_ADDR)", strings.Join(vaultNames, ", "))
	}
	if v.Addr == "" {
		return nil
	}
	src, err := v.Source(cb.s.log, cb.s.operator.DialContext(egress.AllRanges())) // the operator configured Vault's address
	if err != nil {
		return err
	}
	if err := src.Start(ctx); err != nil {
		cb.s.log.WithError(err).Warn("vault login failed at start; retrying in the background (vault secrets fail closed until then)")
	}
	cb.vault = src
	cb.vaultSrc.Store(src)
	return nil
}

// vaultSource returns the Vault source once started (nil before, or without --vault-addr).
func (cb *credentialBroker) vaultSource() *vault.Source { return cb.vaultSrc.Load() }

// injector is the proxy's Injector (nil when the broker did not start).
func (cb *credentialBroker) injector() proxy.Injector {
	if cb.broker == nil {
		return nil
	}
	return cb.broker
}

// applyPolicy rewrites placeholders.json for the secrets of a reloaded policy, so secrets
// the reload added get placeholders and removed ones disappear, then fetches the policy's
// secrets in the background so their values are cached and redacted before the first
// request needs them. The broker reads the policy in force on every request, so injection
// follows the reload without this. Nothing here is fatal: the reload stands, and a failed
// write is logged. A generation older than the last applied is refused.
func (cb *credentialBroker) applyPolicy(gen uint64, p *policy.Policy) {
	if cb.broker == nil || cb.placeholders == nil {
		return
	}
	log, file := cb.s.log, cb.s.cfg.StateDir+"/"+credentials.PlaceholdersFile
	cb.mu.Lock()
	if gen <= cb.gen {
		cb.mu.Unlock()
		log.WithField("generation", gen).Warn("credential broker: refused a policy older than the one applied")
		return
	}
	cb.gen = gen
	n, err := cb.placeholders.WritePolicy(cb.s.cfg.StateDir, p)
	cb.mu.Unlock()
	if err != nil {
		log.WithFields(logrus.Fields{"placeholders": file, "error": err.Error()}).Error("placeholders file not updated after policy reload")
	} else {
		log.WithFields(logrus.Fields{"placeholders": file, "secrets": n}).Info("placeholders file updated")
	}
	cb.prefetch.Add(1)
	go func() {
		defer cb.prefetch.Done()
		ctx, cancel := context.WithTimeout(cb.bg, reloadPrefetchTimeout)
		defer cancel()
		if err := cb.broker.Prefetch(ctx); err != nil && ctx.Err() == nil {
			log.WithField("error", err.Error()).Warn("some secrets of the reloaded policy could not be fetched; requests needing them fail closed until they can")
		}
	}()
}

// close waits for background fetches, then revokes the leases the broker holds (the
// sandbox's end) and stops renewing.
func (cb *credentialBroker) close(ctx context.Context) error {
	cb.closeOnce.Do(func() {
		if cb.cancelBG != nil {
			cb.cancelBG()
		}
		cb.prefetch.Wait()
		var err error
		if cb.broker != nil {
			err = cb.broker.Close(ctx)
		} else if cb.vault != nil {
			err = cb.vault.Close(ctx)
		}
		if err != nil {
			cb.s.log.WithField("error", err.Error()).Warn("credential broker shutdown incomplete")
		} else if cb.vault != nil {
			cb.s.log.Info("vault leases revoked")
		}
	})
	return nil
}
