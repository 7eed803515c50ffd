package sidecar

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/credentials/vault"
	"github.com/airlock-dev/airlock/egress"
	"github.com/prometheus/client_golang/prometheus"
)

// AuditSignVaultTransit is the prefix of --audit-sign's Vault Transit form,
// "vault-transit:MOUNT/KEY".
const AuditSignVaultTransit = "vault-transit:"

// validateAuditSign checks --audit-sign: "" (the local key of --audit-key) or
// "vault-transit:MOUNT/KEY", which needs --audit-log and --vault-addr.
func (c *Config) validateAuditSign() error {
	v := c.Audit.Sign
	if v == "" || v == "local" {
		return nil
	}
	ref, ok := strings.CutPrefix(v, AuditSignVaultTransit)
	if !ok {
		return fmt.Errorf("--audit-sign %q: use local or vault-transit:MOUNT/KEY", v)
	}
	if _, _, err := vault.ParseTransitRef(ref); err != nil {
		return fmt.Errorf("--audit-sign: %w", err)
	}
	if c.AuditLog == "" {
		return errors.New("--audit-sign vault-transit: needs --audit-log (checkpoints sign the audit file's chain)")
	}
	if c.Vault.Addr == "" {
		return errors.New("--audit-sign vault-transit: needs --vault-addr (or VAULT_ADDR) and a --vault-auth login")
	}
	return nil
}

// transitSigner signs checkpoints with a key of Vault's Transit engine. It logs in to Vault
// on its own (with the --vault-* settings), apart from the credential broker, so that it
// outlives the broker at shutdown, when the last checkpoints are signed; it is closed after
// the audit log. Until its login (which needs the operator dial path, built after the audit
// log opens) it refuses to sign, and the checkpoints wait.
type transitSigner struct {
	name string // "vault-transit:MOUNT/KEY"

	mu  sync.Mutex
	src *vault.Source
	key *vault.TransitKey
}

func (t *transitSigner) String() string { return t.name }

// Sign signs with the transit key once logged in.
func (t *transitSigner) Sign(ctx context.Context, msg []byte) (ed25519.PublicKey, []byte, error) {
	t.mu.Lock()
	k := t.key
	t.mu.Unlock()
	if k == nil {
		return nil, nil, errors.New("the Vault login for checkpoint signing has not started yet")
	}
	return k.Sign(ctx, msg)
}

// auditSigner returns the --audit-sign signer (nil: the local key).
func (s *Sidecar) auditSigner() audit.Signer {
	if !strings.HasPrefix(s.cfg.Audit.Sign, AuditSignVaultTransit) {
		return nil
	}
	s.transit = &transitSigner{name: s.cfg.Audit.Sign}
	return s.transit
}

// startAuditSigner logs the transit signer in to Vault through the operator dial path. A
// failed login is retried in the background; checkpoints wait meanwhile.
func (s *Sidecar) startAuditSigner(ctx context.Context) error {
	if s.transit == nil {
		return nil
	}
	v := &s.cfg.Vault
	src, err := vault.New(vault.Config{
		Address: v.Addr, CACertFile: v.CACert, Auth: v.Auth,
		Token: v.Token, TokenFile: v.TokenFile,
		RoleIDFile: v.RoleIDFile, SecretIDFile: v.SecretIDFile, AppRoleMount: v.AppRoleMount,
		KubernetesRole: v.K8sRole, KubernetesJWTFile: v.K8sJWTFile, KubernetesMount: v.K8sMount,
		Logger: s.log,
		Dial:   s.operator.DialContext(egress.AllRanges()),
	})
	if err != nil {
		return fmt.Errorf("--audit-sign: %w", err)
	}
	mount, name, _ := vault.ParseTransitRef(strings.TrimPrefix(s.cfg.Audit.Sign, AuditSignVaultTransit))
	if err := src.Start(ctx); err != nil {
		s.log.WithError(err).Warn("vault login for audit checkpoint signing failed at start; retrying in the background (checkpoints wait unsigned until then)")
	}
	s.transit.mu.Lock()
	s.transit.src, s.transit.key = src, src.Transit(mount, name)
	s.transit.mu.Unlock()
	return nil
}

// closeAuditSigner ends the transit signer's Vault login (after the audit log is closed).
func (s *Sidecar) closeAuditSigner(ctx context.Context) error {
	if s.transit == nil {
		return nil
	}
	s.transit.mu.Lock()
	src := s.transit.src
	s.transit.key = nil
	s.transit.mu.Unlock()
	if src == nil {
		return nil
	}
	return src.Close(ctx)
}

// signingReadyz returns the /readyz line about checkpoint signing ("" with a local key or
// none). Signing that lags keeps the sidecar ready: requests never wait for it.
func (s *Sidecar) signingReadyz() string {
	st := s.audit.Signing()
	switch {
	case s.transit == nil || st.Signer == "":
		return ""
	case st.Lagging():
		return fmt.Sprintf("audit signing lags: %d checkpoint(s) unsigned from seq %d, failing since %s; last error: %s",
			st.Pending, st.OldestSeq, st.Since.UTC().Format("2006-01-02T15:04:05Z"), st.LastError)
	}
	return fmt.Sprintf("audit signing: %s, %d checkpoint(s) signed", st.Signer, st.Signed)
}

// registerSigningMetrics exports the state of checkpoint signing.
func (s *Sidecar) registerSigningMetrics() {
	g := func(name, help string, f func(audit.SignStatus) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "airlock_audit_signing_" + name, Help: help},
			func() float64 { return f(s.audit.Signing()) })
	}
	s.reg.MustRegister(
		g("pending", "Audit checkpoints made and not yet signed (a signing service lags).", func(st audit.SignStatus) float64 { return float64(st.Pending) }),
		g("lagging", "1 while signing checkpoints fails (they wait, retried; none is written unsigned).", func(st audit.SignStatus) float64 {
			if st.Lagging() {
				return 1
			}
			return 0
		}),
		g("signed", "Audit checkpoints signed by a signing service since start.", func(st audit.SignStatus) float64 { return float64(st.Signed) }),
	)
}
