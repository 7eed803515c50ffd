package main

import (
	"context"
	"crypto/ed25519"
	"io"
	"os"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/credentials/vault"
	"github.com/airlock-dev/airlock/internal/cli"
)

// transitKeyHelp is the --vault-transit-key flag's help, shared by verify and pubkey.
const transitKeyHelp = "MOUNT/KEY of the Vault Transit key that signs the checkpoints (--audit-sign vault-transit:MOUNT/KEY): its public keys, every version still in Vault, are read with VAULT_ADDR, VAULT_TOKEN and VAULT_CACERT"

// transitKeys reads the public keys of every version of the Vault Transit key ref
// ("MOUNT/KEY") with the operator's VAULT_ADDR, VAULT_TOKEN and VAULT_CACERT: the verifier's
// keys come from Vault, never from the bucket or the pod.
func transitKeys(ref string) ([]ed25519.PublicKey, error) {
	if ref == "" {
		return nil, nil
	}
	mount, name, err := vault.ParseTransitRef(ref)
	if err != nil {
		return nil, cli.Failf("--vault-transit-key: %v", err)
	}
	addr, token := os.Getenv("VAULT_ADDR"), os.Getenv("VAULT_TOKEN")
	if addr == "" || token == "" {
		return nil, cli.Failf("--vault-transit-key: set VAULT_ADDR and VAULT_TOKEN (a token that may read %s/keys/%s)", mount, name)
	}
	src, err := vault.New(vault.Config{Address: addr, Token: token, CACertFile: os.Getenv("VAULT_CACERT")})
	if err != nil {
		return nil, cli.Failf("--vault-transit-key: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	defer func() { _ = src.Close(ctx) }()
	if err := src.Start(ctx); err != nil {
		return nil, cli.Failf("--vault-transit-key: %v", err)
	}
	keys, err := src.TransitPublicKeys(ctx, mount, name)
	if err != nil {
		return nil, cli.Failf("--vault-transit-key: %v", err)
	}
	return keys, nil
}

// writeTransitPublic prints the public keys of every version of a transit key as PEM
// blocks, oldest first: a key file audit verify --key takes.
func writeTransitPublic(ref string, stdout io.Writer) error {
	keys, err := transitKeys(ref)
	if err != nil {
		return err
	}
	for _, k := range keys {
		b, err := audit.EncodePublicKey(k)
		if err != nil {
			return cli.Failf("%v", err)
		}
		if _, err := stdout.Write(b); err != nil {
			return err
		}
	}
	return nil
}
