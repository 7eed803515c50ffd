package sidecar

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlock-dev/airlock/audit/ship"
	"github.com/airlock-dev/airlock/egress"
	"github.com/airlock-dev/airlock/policy"
)

// ShipConfig is where the sealed audit files go (--audit-ship-* flags). The zero value ships
// nothing. The operator sets it, never a policy.
type ShipConfig struct {
	// S3Bucket, when set, ships to that bucket (--audit-ship-s3-bucket), under S3Prefix
	// (--audit-ship-s3-prefix), in S3Region (--audit-ship-s3-region, default us-east-1),
	// at S3Endpoint for S3-compatible storage (--audit-ship-s3-endpoint; empty: AWS), whose
	// TLS is verified with the system roots plus S3CA (--audit-ship-s3-ca).
	S3Bucket, S3Prefix, S3Region, S3Endpoint, S3CA string
	// S3CredentialsFile holds "ACCESS_KEY_ID:SECRET_ACCESS_KEY" (--audit-ship-s3-credentials-file),
	// re-read at every fetch; S3CredentialsVault is a Vault KV path whose fields
	// access_key_id and secret_access_key hold them (--audit-ship-s3-credentials-vault),
	// read through the credential broker's Vault source. One of the two with S3Bucket.
	S3CredentialsFile, S3CredentialsVault string
	// Dir, when set, ships to that directory instead (--audit-ship-dir).
	Dir string
	// KeyPrefix names the sandbox in object keys (--audit-ship-key-prefix), e.g.
	// namespace/pod/pod-uid; empty means the --sandbox name.
	KeyPrefix string
	// RetentionMode and RetentionPeriod ask for Object Lock retention on every upload
	// (--audit-ship-retention-mode COMPLIANCE|GOVERNANCE, --audit-ship-retention).
	RetentionMode   string
	RetentionPeriod time.Duration
	// Backlog bounds the unshipped audit bytes on the volume (--audit-ship-backlog); 0: none.
	Backlog int64
	// FailClosed turns /readyz not-ready while the backlog is full (--audit-ship-fail-closed);
	// else the oldest unshipped sealed file is dropped.
	FailClosed bool
	// FinishTimeout bounds the shipping of the sealed tail and the closing marker at
	// shutdown (--audit-ship-finish-timeout); zero means DefaultShipFinishTimeout.
	FinishTimeout time.Duration
}

// DefaultShipFinishTimeout fits in Kubernetes' default 30 s termination grace period after
// the components' own shutdown.
const DefaultShipFinishTimeout = 15 * time.Second

// enabled says whether anything is shipped.
func (c ShipConfig) enabled() bool { return c.S3Bucket != "" || c.Dir != "" }

// validate checks the settings that need no file. Errors name the flag.
func (c ShipConfig) validate(auditLog, vaultAddr string) error {
	switch {
	case !c.enabled():
		return nil
	case auditLog == "":
		return errors.New("--audit-ship-* needs --audit-log: only the chained file's sealed parts are shipped")
	case c.S3Bucket != "" && c.Dir != "":
		return errors.New("--audit-ship-s3-bucket and --audit-ship-dir are exclusive: use one")
	case c.S3Bucket != "" && (c.S3CredentialsFile == "") == (c.S3CredentialsVault == ""):
		return errors.New("--audit-ship-s3-bucket needs one of --audit-ship-s3-credentials-file and --audit-ship-s3-credentials-vault")
	case c.S3CredentialsVault != "" && vaultAddr == "":
		return errors.New("--audit-ship-s3-credentials-vault needs --vault-addr")
	case c.RetentionMode != "" && c.RetentionMode != "COMPLIANCE" && c.RetentionMode != "GOVERNANCE":
		return fmt.Errorf("--audit-ship-retention-mode %q: use COMPLIANCE or GOVERNANCE", c.RetentionMode)
	case (c.RetentionMode == "") != (c.RetentionPeriod == 0):
		return errors.New("--audit-ship-retention-mode and --audit-ship-retention go together")
	case c.Backlog < 0 || c.FinishTimeout < 0 || c.RetentionPeriod < 0:
		return errors.New("--audit-ship-backlog, --audit-ship-retention and --audit-ship-finish-timeout must not be negative")
	}
	return nil
}

// shipper is the running audit shipper: Run in the background from start, Finish after the
// audit log is closed (Sidecar.Close).
type shipper struct {
	s *Sidecar

	sh     *ship.Shipper
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	// credMu guards lastID and lastSecret: the last S3 keys read. Shutdown ships the tail
	// after the credential broker has closed (its Vault token revoked); the keys read
	// before are still the bucket's keys then.
	credMu             sync.Mutex
	lastID, lastSecret string
	creds              ship.Credentials // credentials(), set at start
}

// prefetch reads the S3 keys once while the credential broker runs (at start, and at close,
// before the broker closes), so that shutdown has them. A failure is logged: shipping
// retries it.
func (sp *shipper) prefetch() {
	if sp.creds == nil || sp.s.cfg.Ship.S3Bucket == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, _, err := sp.creds(ctx); err != nil {
		sp.s.log.WithField("error", err.Error()).Warn("audit shipping: the S3 keys cannot be read yet")
	}
}

func (sp *shipper) name() string { return "audit shipper" }

func (sp *shipper) start(context.Context) error {
	s := sp.s
	c := s.cfg.Ship
	if !c.enabled() {
		return nil
	}
	store, err := sp.store()
	if err != nil {
		return err
	}
	keyPrefix := c.KeyPrefix
	if keyPrefix == "" {
		keyPrefix = s.cfg.Sandbox
	}
	sh, err := ship.New(ship.Config{Log: s.cfg.AuditLog, Checkpoints: s.cfg.Audit.Checkpoints, Store: store,
		Prefix: c.S3Prefix, KeyPrefix: keyPrefix, Retention: ship.Retention{Mode: c.RetentionMode, Period: c.RetentionPeriod},
		Backlog: c.Backlog, FailClosed: c.FailClosed, Logger: s.log})
	if err != nil {
		return fmt.Errorf("--audit-ship-*: %w", err)
	}
	if err := sh.Open(); err != nil {
		return err
	}
	sp.sh = sh
	sp.creds = sp.credentials()
	sp.prefetch()
	sp.register()
	ctx, cancel := context.WithCancel(context.Background())
	sp.cancel, sp.done = cancel, make(chan struct{})
	go func() { defer close(sp.done); sh.Run(ctx) }()
	return nil
}

// store builds the destination: a directory, or the S3 bucket reached through the
// operator's dial path (so an upstream proxy and the own-address checks apply).
func (sp *shipper) store() (ship.Store, error) {
	s, c := sp.s, sp.s.cfg.Ship
	if c.Dir != "" {
		return ship.DirStore{Root: c.Dir}, nil
	}
	tc := s.operator.TLSConfig()
	if c.S3CA != "" {
		pem, err := os.ReadFile(c.S3CA)
		if err != nil {
			return nil, fmt.Errorf("--audit-ship-s3-ca: %v", err)
		}
		if tc.RootCAs == nil {
			if tc.RootCAs, err = x509.SystemCertPool(); err != nil {
				tc.RootCAs = x509.NewCertPool()
			}
		}
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--audit-ship-s3-ca %s: no PEM certificate", c.S3CA)
		}
	}
	st, err := ship.NewS3Store(ship.S3Config{Bucket: c.S3Bucket, Region: c.S3Region, Endpoint: c.S3Endpoint,
		Transport: s.operator.Transport(egress.AllRanges(), tc), Credentials: func(ctx context.Context) (string, string, string, error) { return sp.creds(ctx) }})
	if err != nil {
		return nil, fmt.Errorf("--audit-ship-s3-*: %w", err)
	}
	return st, nil
}

// credentials reads the S3 keys from the file or from Vault (through the credential
// broker's Vault source) at every fetch, and hands the secret to the redactor: it never
// reaches a log line or an audit event.
func (sp *shipper) credentials() ship.Credentials {
	c := sp.s.cfg.Ship
	return func(ctx context.Context) (string, string, string, error) {
		id, secret, err := sp.readCredentials(ctx, c)
		sp.credMu.Lock()
		defer sp.credMu.Unlock()
		if err != nil {
			if sp.lastID == "" {
				return "", "", "", err
			}
			return sp.lastID, sp.lastSecret, "", nil
		}
		sp.s.redactor.Add(secret)
		sp.lastID, sp.lastSecret = id, secret
		return id, secret, "", nil
	}
}

// readCredentials reads the S3 keys from the file or from Vault.
func (sp *shipper) readCredentials(ctx context.Context, c ShipConfig) (id, secret string, err error) {
	if c.S3CredentialsFile != "" {
		b, err := os.ReadFile(c.S3CredentialsFile)
		if err != nil {
			return "", "", fmt.Errorf("--audit-ship-s3-credentials-file: %v", err)
		}
		id, secret, ok := strings.Cut(strings.TrimSpace(string(b)), ":")
		if !ok || id == "" || secret == "" {
			return "", "", fmt.Errorf("--audit-ship-s3-credentials-file %s: want ACCESS_KEY_ID:SECRET_ACCESS_KEY", c.S3CredentialsFile)
		}
		return id, secret, nil
	}
	src := sp.s.creds.vaultSource()
	if src == nil {
		return "", "", fmt.Errorf("--audit-ship-s3-credentials-vault %s: vault is not started", c.S3CredentialsVault)
	}
	var got [2]string
	for i, field := range []string{"access_key_id", "secret_access_key"} {
		v, err := src.Fetch(ctx, "audit-ship-"+field, policy.Secret{Vault: &policy.VaultRef{Path: c.S3CredentialsVault, Field: field}})
		if err != nil {
			return "", "", fmt.Errorf("--audit-ship-s3-credentials-vault %s: %w", c.S3CredentialsVault, err)
		}
		got[i] = v.Secret
	}
	return got[0], got[1], nil
}

// register adds the airlock_audit_ship_* metrics.
func (sp *shipper) register() {
	g := func(name, help string, f func(ship.Status) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "airlock_audit_ship_" + name, Help: help},
			func() float64 { return f(sp.sh.Status()) })
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	sp.s.reg.MustRegister(
		g("backlog_bytes", "Audit bytes on the volume not yet shipped (sealed files and the open file).", func(s ship.Status) float64 { return float64(s.BacklogBytes) }),
		g("backlog_files", "Sealed audit files not yet shipped.", func(s ship.Status) float64 { return float64(s.BacklogFiles) }),
		g("shipped_seq", "The last audit sequence number shipped and read back.", func(s ship.Status) float64 { return float64(s.ShippedSeq) }),
		g("backlog_full", "1 while the backlog is at its bound (--audit-ship-backlog).", func(s ship.Status) float64 { return b2f(s.Full) }),
		g("dropped_files", "Sealed files removed unshipped because the backlog was full (fail-open).", func(s ship.Status) float64 { return float64(s.DroppedFiles) }),
		g("uploads", "Objects uploaded and read back intact.", func(s ship.Status) float64 { return float64(s.Uploads) }),
		g("failures", "Failed upload attempts.", func(s ship.Status) float64 { return float64(s.Failures) }),
	)
}

// readyz returns the /readyz line about shipping ("" when not shipping) and whether it
// makes the sidecar not ready (only a full backlog with fail-closed).
func (sp *shipper) readyz() (string, error) {
	if sp.sh == nil {
		return "", nil
	}
	if err := sp.sh.Ready(); err != nil {
		return "", err
	}
	st := sp.sh.Status()
	if st.Lagging() {
		return fmt.Sprintf("audit shipping lags: %d sealed file(s), %d bytes unshipped, shipped up to seq %d; last error: %s", st.BacklogFiles, st.BacklogBytes, st.ShippedSeq, st.LastError), nil
	}
	return fmt.Sprintf("audit shipping: shipped up to seq %d", st.ShippedSeq), nil
}

// close stops the background shipping; Finish (after the audit log is closed) ships the rest.
func (sp *shipper) close(context.Context) error {
	sp.once.Do(func() {
		if sp.cancel != nil {
			sp.cancel()
			<-sp.done
			sp.prefetch() // the broker closes next, its Vault token revoked
		}
	})
	return nil
}

// finish ships the sealed tail and the closing marker, within FinishTimeout.
func (sp *shipper) finish() error {
	if sp.sh == nil {
		return nil
	}
	d := sp.s.cfg.Ship.FinishTimeout
	if d <= 0 {
		d = DefaultShipFinishTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return sp.sh.Finish(ctx)
}
