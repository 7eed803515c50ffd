package sidecar

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

// AuditKeyFile is the signing key's name under --state-dir when --audit-key is not set.
const AuditKeyFile = "audit-signing.key"

// openAudit opens the audit logger: stderr always, and with --audit-log the chained file,
// its rotation and its signed checkpoints.
func (s *Sidecar) openAudit(stderr io.Writer) (*audit.Logger, error) {
	o := audit.Options{Sandbox: s.cfg.Sandbox, Writer: stderr, File: s.cfg.AuditLog, Keep: 256,
		Redact: s.redactor.Bytes, MaxBytes: s.cfg.Audit.MaxBytes, MaxAge: s.cfg.Audit.MaxAge,
		Checkpoints: s.cfg.Audit.Checkpoints, CheckpointEvery: s.cfg.Audit.CheckpointEvery,
		// A shipped log seals its tail at shutdown, so that the shipper can take it.
		SealOnClose: s.cfg.Ship.enabled()}
	if o.Signer = s.auditSigner(); o.Signer == nil && s.cfg.AuditLog != "" {
		path := s.cfg.Audit.Key
		if path == "" {
			path = filepath.Join(s.cfg.StateDir, AuditKeyFile)
		}
		key, err := audit.LoadOrCreateKey(path)
		if err != nil {
			return nil, fmt.Errorf("--audit-key %s: %w", path, err)
		}
		o.Key = key
	}
	l, err := audit.New(o)
	if err != nil {
		return nil, fmt.Errorf("--audit-log %s: %w", s.cfg.AuditLog, err)
	}
	return l, nil
}

// PolicyHistoryDir is where, under --state-dir, the sidecar keeps a copy of every policy it
// loaded (at start and at each successful reload), named by load time and hash, for
// evidence packs (airlock audit export).
const PolicyHistoryDir = "policy-history"

// archivePolicy copies the policy file into PolicyHistoryDir unless the newest copy there has
// the same content, and returns the copy's name relative to --state-dir. The file is read
// again after it loaded: a change in between is caught by the reload it triggers.
func (s *Sidecar) archivePolicy() (string, error) {
	b, err := os.ReadFile(s.cfg.PolicyFile)
	if err != nil {
		return "", fmt.Errorf("archive policy: %w", err)
	}
	sum := sha256.Sum256(b)
	dir := filepath.Join(s.cfg.StateDir, PolicyHistoryDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("archive policy: %w", err)
	}
	tag := hex.EncodeToString(sum[:8])
	if names, _ := filepath.Glob(filepath.Join(dir, "*.yaml")); len(names) > 0 {
		sort.Strings(names)
		if last := names[len(names)-1]; strings.HasSuffix(last, "-"+tag+".yaml") {
			return filepath.Join(PolicyHistoryDir, filepath.Base(last)), nil
		}
	}
	name := time.Now().UTC().Format("20060102T150405.000000000Z") + "-" + tag + ".yaml"
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
		return "", fmt.Errorf("archive policy: %w", err)
	}
	return filepath.Join(PolicyHistoryDir, name), nil
}
