package main

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/internal/cli"
	"github.com/airlock-dev/airlock/internal/sidecar"
)

const auditUsage = `Usage: airlock audit <verify|keygen|pubkey|export|ocsf> [flags] [args]

  verify FILE... [--key PUB]        check the hash chain and signed checkpoints of audit files
  verify s3://BUCKET/PREFIX/        ... or of the chains a sidecar shipped (file:///DIR too)
  keygen -o KEY [--pub PUB]         make an Ed25519 checkpoint signing key (and its public key)
  pubkey [--key KEY]                print the public key of a signing key (for verify --key)
  export SANDBOX -o DIR             write a sandbox's evidence pack: policy, audit files,
                                    checkpoints, usage ledger and a manifest of hashes
  export --from s3://B/P/ -o DIR    write the evidence pack of a shipped chain
  ocsf [FILE...]                    render audit lines as OCSF events for a SIEM
`

func auditCmd(args []string, stdout, stderr io.Writer) error {
	return cli.Dispatch("audit", auditUsage, map[string]cli.RunFunc{
		"verify": auditVerify, "keygen": auditKeygen, "pubkey": auditPubkey, "export": auditExport, "ocsf": auditOCSF,
	}, args, stdout, stderr)
}

// auditFlags registers airlock run's audit file flags.
func auditFlags(fs *cli.FlagSet, c *sidecar.Config) {
	a := &c.Audit
	fs.StringVar(&a.Key, "audit-key", "", "Ed25519 key (PKCS #8 PEM) that signs audit checkpoints; created when absent; default: audit-signing.key in --state-dir. Keep it off the log's volume (docs/audit.md: Where the key lives)")
	fs.StringVar(&a.Sign, "audit-sign", "local", "who signs audit checkpoints: local (the --audit-key key) or vault-transit:MOUNT/KEY (an ed25519 key of Vault's Transit engine, with the --vault-* login; the private key never enters the sidecar; docs/audit.md: Signing with Vault Transit)")
	fs.StringVar(&a.Checkpoints, "audit-checkpoints", "", "file the signed checkpoints are appended to; default: the --audit-log file + .checkpoints")
	fs.Int64Var(&a.MaxBytes, "audit-max-bytes", 0, "rotate the --audit-log file when it reaches this size (0: never on size)")
	fs.DurationVar(&a.MaxAge, "audit-max-age", 0, "rotate the --audit-log file when it is this old (0: never on age)")
	fs.DurationVar(&a.CheckpointEvery, "audit-checkpoint-every", audit.DefaultCheckpointEvery, "sign a checkpoint of the audit chain this often (also at rotation and shutdown)")
	shipFlags(fs, &c.Ship)
}

// shipFlags registers airlock run's audit shipping flags (docs/audit.md, "Shipping").
func shipFlags(fs *cli.FlagSet, c *sidecar.ShipConfig) {
	fs.StringVar(&c.S3Bucket, "audit-ship-s3-bucket", "", "ship every sealed --audit-log file and its checkpoints to this S3 bucket (needs --audit-max-bytes or --audit-max-age to seal files while running)")
	fs.StringVar(&c.S3Prefix, "audit-ship-s3-prefix", "", "key prefix in the bucket (or under --audit-ship-dir)")
	fs.StringVar(&c.S3Region, "audit-ship-s3-region", "us-east-1", "region of the bucket")
	fs.StringVar(&c.S3Endpoint, "audit-ship-s3-endpoint", "", "endpoint URL of S3-compatible storage (default: AWS for the region)")
	fs.StringVar(&c.S3CA, "audit-ship-s3-ca", "", "PEM CA file the S3 endpoint's certificate is verified with (besides the system roots)")
	fs.StringVar(&c.S3CredentialsFile, "audit-ship-s3-credentials-file", "", "file holding ACCESS_KEY_ID:SECRET_ACCESS_KEY (a Secret volume), re-read at each use")
	fs.StringVar(&c.S3CredentialsVault, "audit-ship-s3-credentials-vault", "", "Vault KV path whose fields access_key_id and secret_access_key are the S3 keys (read with the --vault-* settings)")
	fs.StringVar(&c.Dir, "audit-ship-dir", "", "ship to this directory instead of S3 (a mounted volume)")
	fs.StringVar(&c.KeyPrefix, "audit-ship-key-prefix", "", "the sandbox's part of object keys, e.g. NAMESPACE/POD/POD_UID (default: --sandbox); the chain id follows it")
	fs.StringVar(&c.RetentionMode, "audit-ship-retention-mode", "", "Object Lock retention mode of every upload: COMPLIANCE or GOVERNANCE (the bucket must have Object Lock)")
	fs.DurationVar(&c.RetentionPeriod, "audit-ship-retention", 0, "Object Lock retention period of every upload, e.g. 2160h")
	fs.Int64Var(&c.Backlog, "audit-ship-backlog", 0, "bound, in bytes, of unshipped audit data on the volume; keep it below the volume's size limit (0: no bound)")
	fs.BoolVar(&c.FailClosed, "audit-ship-fail-closed", false, "turn /readyz not-ready while the backlog is full, instead of dropping the oldest unshipped sealed file")
	fs.DurationVar(&c.FinishTimeout, "audit-ship-finish-timeout", sidecar.DefaultShipFinishTimeout, "how long shutdown may spend shipping the sealed tail and the closing marker")
}

const verifyLong = `
Check audit files written with --audit-log: every line's sequence number and the hash of the
line before it (the chain continues across rotated files, given in any order), and the signed
checkpoints (the FILE.checkpoints beside each file is read when present, or name checkpoint
files among the FILEs). Prints "intact", or the first line changed, removed, reordered or
truncated, and exits 1. A partial last line, as a crash leaves it, is reported as torn, not
as tampering.

Without --key it proves only that the chain is consistent: the checkpoints are checked
against the key each one names, which shows they were not altered, not who made them, and
a chain rewritten whole, cut at its start or without checkpoints still reads "intact".
With --key (the public key you keep apart) it proves the whole trail: every checkpoint is
signed by that key and accounted for; the chain starts at seq 1, or right after a rotation
the key signed; and no line was written more than the checkpoint period (--checkpoint-every)
plus a minute after the last checkpoint. A trail that is not tampered but that the key's
checkpoints do not prove (no checkpoints, a start after seq 1 without a signed rotation,
a long unsigned tail) is reported "unanchored" and exits 3.

An s3://BUCKET/PREFIX/ (or file:///DIR) argument verifies what sidecars shipped there
(docs/audit.md, "Shipping"): every chain under the prefix, each read at the object versions
shipped (a delete marker or a newer version over one is reported, and read past), its
segments joined in order (a missing object is named by its sequence range) and closed by a
closing marker. A chain without one is reported "open, last shipped seq N" and exits 4.
Read-only S3 credentials suffice (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY).

Checkpoints signed by Vault's Transit engine (--audit-sign vault-transit:MOUNT/KEY) verify
with --vault-transit-key MOUNT/KEY: the public keys of every version still in Vault are read
with VAULT_ADDR and VAULT_TOKEN (or export them once with airlock audit pubkey
--vault-transit-key and pass the file as --key).`

// exitUnanchored is verify's exit status for a trail not tampered but not proven by the key.
const exitUnanchored = 3

func auditVerify(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("audit verify", "airlock audit verify FILE... [--key PUB] [--json]", verifyLong, stderr)
	keyFile := fs.String("key", "", "public key (PEM, from airlock audit keygen or pubkey) the checkpoints must be signed with; several PEM blocks: any of them (a key rotation), each checkpoint checked against the one it names")
	transit := fs.String("vault-transit-key", "", transitKeyHelp)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	every := fs.Duration("checkpoint-every", audit.DefaultCheckpointEvery, "the --audit-checkpoint-every the log was written with")
	var sf storeFlags
	sf.register(fs)
	files, err := fs.ParseArgs(args, stdout, false)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		fs.Usage()
		return cli.ErrUsage
	}
	keys, err := readPub(*keyFile)
	if err != nil {
		return err
	}
	tkeys, err := transitKeys(*transit)
	if err != nil {
		return err
	}
	keys = append(keys, tkeys...)
	if len(files) == 1 && isShipped(files[0]) {
		return verifyShipped(files[0], &sf, keys, *every, stdout)
	}
	rep, err := audit.VerifyWith(files, audit.VerifyOptions{Keys: keys, CheckpointEvery: *every})
	if err != nil {
		return cli.Failf("%v", err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		printVerify(stdout, rep)
	}
	if !rep.Intact() {
		return cli.Failf("%s", rep.Tampered)
	}
	if rep.Unanchored != nil {
		return &cli.ExitError{Code: exitUnanchored, Msg: "unanchored: " + rep.Unanchored.String()}
	}
	return nil
}

// printVerify prints a verify report for people.
func printVerify(w io.Writer, rep audit.Report) {
	for _, p := range rep.Torn {
		fmt.Fprintf(w, "note: %s\n", p)
	}
	if !rep.Intact() {
		fmt.Fprintf(w, "TAMPERED: %s\n", rep.Tampered)
		return
	}
	verdict := "intact"
	if rep.Unanchored != nil {
		verdict = "UNANCHORED"
	}
	fmt.Fprintf(w, "%s: %d events (seq %d..%d) in %d file(s)\n", verdict, rep.Events, rep.FirstSeq, rep.LastSeq, len(rep.Files))
	if rep.Unanchored != nil {
		fmt.Fprintf(w, "unanchored: %s\n", rep.Unanchored)
	}
	switch {
	case rep.Checkpoints == 0:
		fmt.Fprintln(w, "warning: no checkpoints found: truncation and a rewritten chain cannot be detected")
	case !rep.KeyGiven:
		fmt.Fprintf(w, "checkpoints: %d, signed up to seq %d, by the key they name (pass --key to check whose key)\n", rep.Checkpoints, rep.SignedSeq)
	default:
		fmt.Fprintf(w, "checkpoints: %d, signed up to seq %d by the given key\n", rep.Checkpoints, rep.SignedSeq)
	}
	if rep.SignedSeq < rep.LastSeq {
		fmt.Fprintf(w, "note: seq %d..%d come after the last checkpoint: they are chained but not yet signed\n", rep.SignedSeq+1, rep.LastSeq)
	}
}

const keygenLong = `
Make an Ed25519 key for signing audit checkpoints and write it (PKCS #8 PEM, mode 0600) to
KEY, refusing to overwrite one; with --pub also write its public key. Give the sidecar the
key with --audit-key from a place the audit log's writers cannot reach (a Kubernetes Secret
volume, a file provisioned by Vault), and keep the public key with whoever verifies.`

func auditKeygen(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("audit keygen", "airlock audit keygen -o KEY [--pub PUB]", keygenLong, stderr)
	out := fs.String("o", "", "file to write the private key to (required)")
	pubOut := fs.String("pub", "", "file to write the public key to (default: print it)")
	rest, err := fs.ParseArgs(args, stdout, false)
	if err != nil {
		return err
	}
	if len(rest) != 0 || *out == "" {
		fs.Usage()
		return cli.ErrUsage
	}
	key, err := audit.GenerateKey()
	if err != nil {
		return cli.Failf("%v", err)
	}
	priv, err := audit.EncodePrivateKey(key)
	if err != nil {
		return cli.Failf("%v", err)
	}
	f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return cli.Failf("-o: %v", err)
	}
	if _, err := f.Write(priv); err != nil {
		_ = f.Close()
		return cli.Failf("-o: %v", err)
	}
	if err := f.Close(); err != nil {
		return cli.Failf("-o: %v", err)
	}
	return writePublic(key.Public().(ed25519.PublicKey), *pubOut, stdout)
}

// writePublic writes pub as PEM to path, or to stdout when path is "".
func writePublic(pub ed25519.PublicKey, path string, stdout io.Writer) error {
	b, err := audit.EncodePublicKey(pub)
	if err != nil {
		return cli.Failf("%v", err)
	}
	if path == "" {
		_, err = stdout.Write(b)
		return err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return cli.Failf("--pub: %v", err)
	}
	return nil
}

func auditPubkey(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("audit pubkey", "airlock audit pubkey [--key KEY | --state-dir DIR | --vault-transit-key MOUNT/KEY]", `
Print the public key (PEM) of the checkpoint signing key a sidecar uses: --key, else
audit-signing.key in --state-dir. Hand it to whoever runs airlock audit verify --key.
With --vault-transit-key, print the public keys of every version of that Vault Transit key
(VAULT_ADDR, VAULT_TOKEN), oldest first: a key file for verify --key across rotations.`, stderr)
	keyFile := fs.String("key", "", "the signing key (what airlock run --audit-key names)")
	transit := fs.String("vault-transit-key", "", transitKeyHelp)
	stateDir := fs.String("state-dir", cli.DefaultStateDir(), "state directory holding audit-signing.key when --key is not given (env AIRLOCK_STATE_DIR)")
	rest, err := fs.ParseArgs(args, stdout, true)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		fs.Usage()
		return cli.ErrUsage
	}
	if *transit != "" {
		return writeTransitPublic(*transit, stdout)
	}
	path := *keyFile
	if path == "" {
		path = filepath.Join(*stateDir, sidecar.AuditKeyFile)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return cli.Failf("read signing key: %v", err)
	}
	pub, err := audit.ParsePublicKey(b)
	if err != nil {
		return cli.Failf("%s: %v", path, err)
	}
	return writePublic(pub, "", stdout)
}
