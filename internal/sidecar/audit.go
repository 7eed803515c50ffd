package sidecar

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/airlock-dev/airlock/audit"
)

// AuditKeyFile is the signing key's name under --state-dir when --audit-key is not set.
const AuditKeyFile = "audit-signing.key"

// openAudit opens the audit logger: stderr always, and with --audit-log the chained file,
// its rotation and its signed checkpoints.
func (s *Sidecar) openAudit(stderr io.Writer) (*audit.Logger, error) {
	o := audit.Options{Sandbox: s.cfg.Sandbox, Writer: stderr, File: s.cfg.AuditLog, Keep: 256,
		Redact: s.redactor.Bytes, MaxBytes: s.cfg.Audit.MaxBytes, MaxAge: s.cfg.Audit.MaxAge,
		Checkpoints: s.cfg.Audit.Checkpoints, CheckpointEvery: s.cfg.Audit.CheckpointEvery}
	if s.cfg.AuditLog != "" {
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
