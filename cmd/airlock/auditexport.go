package main

import (
	"crypto/ed25519"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/internal/cli"
	"github.com/airlock-dev/airlock/internal/sidecar"
	"github.com/airlock-dev/airlock/llmproxy"
	"github.com/airlock-dev/airlock/sandbox"
)

const exportLong = `
Write the evidence pack of sandbox NAME (a local sandbox of --state-dir) to the new directory
DIR: the policy file in force, every policy version the sidecar loaded (policy/history, one
per start or reload, named by time and hash; the audit log's kind "policy" events say when),
the audit log with its rotated files and signed checkpoints, the public half of the signing
key, the model usage ledger, and manifest.json / manifest.sha256 with every file's SHA-256
and what airlock audit verify finds in the audit files. The private signing key is never
copied.

For a sidecar this host does not manage (a Kubernetes pod), copy its files out first (see the
docs/audit.md, "Evidence packs") and name them with --audit-log, --sidecar-state and --policy instead
of NAME. Exits 1 when the audit files do not verify; the pack is written anyway.`

// exportSources are the files of one sidecar that an evidence pack takes.
type exportSources struct {
	name, policy, auditLog, checkpoints, sidecarState string
}

func auditExport(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("audit export", "airlock audit export (NAME | --audit-log FILE [--sidecar-state DIR] [--policy FILE] | --from s3://BUCKET/PREFIX/) -o DIR [--key PUB]", exportLong, stderr)
	out := fs.String("o", "", "directory to create the pack in (required; must not exist or be empty)")
	stateDir := fs.String("state-dir", cli.DefaultStateDir(), "state directory of the local sandboxes (env AIRLOCK_STATE_DIR)")
	src := exportSources{}
	fs.StringVar(&src.auditLog, "audit-log", "", "audit log of a sidecar not managed here (instead of NAME)")
	fs.StringVar(&src.sidecarState, "sidecar-state", "", "that sidecar's --state-dir (policy history, ledger, signing key's public half)")
	fs.StringVar(&src.policy, "policy", "", "that sidecar's policy file")
	fs.StringVar(&src.checkpoints, "audit-checkpoints", "", "that sidecar's checkpoint file (default: the audit log + .checkpoints)")
	keyFile := fs.String("key", "", "public key the checkpoints must be signed with (default: checked against the key they name)")
	from := fs.String("from", "", "s3://BUCKET/PREFIX/ (or file:///DIR) of one shipped chain: pack what the sidecar shipped there (instead of NAME)")
	var sf storeFlags
	sf.register(fs)
	rest, err := fs.ParseArgs(args, stdout, true)
	if err != nil {
		return err
	}
	if *from != "" {
		if *out == "" || len(rest) != 0 || src.auditLog != "" || !isShipped(*from) {
			fs.Usage()
			return cli.ErrUsage
		}
		pub, err := readPub(*keyFile)
		if err != nil {
			return err
		}
		return exportShipped(*from, &sf, pub, *out, stdout)
	}
	if *out == "" || len(rest) > 1 || (len(rest) == 1) == (src.auditLog != "") {
		fs.Usage()
		return cli.ErrUsage
	}
	if len(rest) == 1 {
		if src, err = localSources(*stateDir, rest[0]); err != nil {
			return cli.Failf("%v", err)
		}
	}
	pub, err := readPub(*keyFile)
	if err != nil {
		return err
	}
	files, err := src.files()
	if err != nil {
		return cli.Failf("%v", err)
	}
	m, err := audit.WritePackWith(*out, src.name, files, audit.VerifyOptions{Keys: pub}, time.Now())
	if err != nil {
		return cli.Failf("%v", err)
	}
	fmt.Fprintf(stdout, "evidence pack %s: %d files; audit: %d events, signed up to seq %d\n", *out, len(m.Files), m.Verify.Events, m.Verify.SignedSeq)
	if !m.Verify.Intact && m.Verify.Events+m.Verify.Checkpoints > 0 {
		return cli.Failf("the audit files do not verify: %s", m.Verify.Tampered)
	}
	if m.Verify.Unanchored != "" {
		return &cli.ExitError{Code: exitUnanchored, Msg: "the audit files are not anchored by the key: " + m.Verify.Unanchored}
	}
	return nil
}

// readPub reads the --key public keys ("" means none): one PEM block, or several (the keys
// before and after a rotation, as the installer's ConfigMap holds them).
func readPub(path string) ([]ed25519.PublicKey, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, cli.Failf("--key: %v", err)
	}
	keys, err := audit.ParsePublicKeys(b)
	if err != nil {
		return nil, cli.Failf("--key %s: %v", path, err)
	}
	return keys, nil
}

// localSources are the files of local sandbox name.
func localSources(stateDir, name string) (exportSources, error) {
	store, err := sandbox.OpenStore(stateDir)
	if err != nil {
		return exportSources{}, err
	}
	st, err := store.Load(name)
	if err != nil {
		return exportSources{}, err
	}
	return exportSources{name: st.Name, policy: st.Policy, auditLog: st.AuditLog(),
		sidecarState: filepath.Join(st.Dir, "sidecar")}, nil
}

// files lists what goes in the pack: never the private signing key, only its public half.
func (s exportSources) files() ([]audit.PackFile, error) {
	var files []audit.PackFile
	if s.policy != "" {
		files = append(files, audit.PackFile{Role: "policy", Src: s.policy, Name: "policy/current.yaml"})
	}
	files = append(files, audit.AuditFiles(s.auditLog, s.checkpoints)...)
	if s.sidecarState == "" {
		return files, nil
	}
	hist, _ := filepath.Glob(filepath.Join(s.sidecarState, sidecar.PolicyHistoryDir, "*.yaml"))
	for _, h := range hist {
		files = append(files, audit.PackFile{Role: "policy-history", Src: h, Name: "policy/history/" + filepath.Base(h)})
	}
	files = append(files, audit.PackFile{Role: "ledger", Src: filepath.Join(s.sidecarState, llmproxy.LedgerFile), Name: "usage/" + llmproxy.LedgerFile})
	b, err := os.ReadFile(filepath.Join(s.sidecarState, sidecar.AuditKeyFile))
	if err != nil {
		return files, nil // the key lives elsewhere (--audit-key): verify with --key
	}
	pub, err := audit.ParsePublicKey(b)
	if err != nil {
		return nil, err
	}
	pemBytes, err := audit.EncodePublicKey(pub)
	if err != nil {
		return nil, err
	}
	return append(files, audit.PackFile{Role: "public-key", Data: pemBytes, Name: "audit/signing-key.pub.pem"}), nil
}
