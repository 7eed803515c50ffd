package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/airlock-dev/airlock/credentials"
	"github.com/airlock-dev/airlock/egress"
	"github.com/airlock-dev/airlock/internal/cli"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/sandbox"
	"github.com/airlock-dev/airlock/sandbox/image"
)

// fixedPolicy is the policy a one-off credential broker reads: the sandbox's, as loaded.
type fixedPolicy struct{ p *policy.Policy }

func (f fixedPolicy) Current() *policy.Policy { return f.p }

// imagePullLogin fetches the registry login of --image-pull-secret: the secret of that name
// in the sandbox policy's spec.secrets, through the credential broker as the sidecar would
// fetch it (Vault with the sidecar's Vault flags after -- and VAULT_*, env or file), so the
// login never has to be written on a command line or into the sandbox.
func imagePullLogin(ctx context.Context, o sandbox.CreateOptions, secret string) (*image.Credential, error) {
	if o.Image == "" {
		return nil, cli.Failf("--image-pull-secret %s: give --image REF too (a registry reference)", secret)
	}
	if o.PolicyFile == "" {
		return nil, cli.Failf("--image-pull-secret %s: built-in profiles define no secrets; give --policy FILE whose spec.secrets defines %s", secret, secret)
	}
	pol, err := policy.Load(o.PolicyFile)
	if err != nil {
		return nil, cli.Failf("%v", err)
	}
	sec, ok := pol.Secrets()[secret]
	if !ok {
		names := make([]string, 0, len(pol.Secrets()))
		for n := range pol.Secrets() {
			names = append(names, n)
		}
		slices.Sort(names)
		return nil, cli.Failf("--image-pull-secret %s: no such secret in spec.secrets of %s (it defines: %s)", secret, o.PolicyFile, strings.Join(names, ", "))
	}
	bc := credentials.Config{Policy: fixedPolicy{pol}}
	if sec.Vault != nil {
		src, err := pullVaultSource(ctx, o.RunArgs, secret)
		if err != nil {
			return nil, err
		}
		defer src.Close(context.WithoutCancel(ctx)) // revokes a dynamic secret's lease
		bc.Vault = src
	}
	b, err := credentials.New(bc)
	if err != nil {
		return nil, cli.Failf("--image-pull-secret %s: %v", secret, err)
	}
	v, err := b.Value(ctx, secret)
	if err != nil {
		return nil, cli.Failf("--image-pull-secret %s: %v", secret, err)
	}
	cred, err := image.ParseCredential(v)
	if err != nil {
		return nil, cli.Failf("--image-pull-secret %s: %v", secret, err)
	}
	return cred, nil
}

// pullVaultSource logs in to Vault as the sandbox's sidecar will: with the Vault flags among
// the sidecar flags after -- (runArgs) and VAULT_ADDR, VAULT_CACERT, VAULT_TOKEN.
func pullVaultSource(ctx context.Context, runArgs []string, secret string) (interface {
	credentials.Source
	credentials.Closer
}, error) {
	fs, cfg := runFlags(io.Discard)
	if _, err := fs.ParseArgs(runArgs, io.Discard, true); err != nil {
		return nil, cli.Failf("sidecar flags after --: %v", err)
	}
	vaultEnv(&cfg.Vault)
	if cfg.Vault.Addr == "" {
		return nil, cli.Failf("--image-pull-secret %s comes from Vault: set VAULT_ADDR (or give --vault-addr after --)", secret)
	}
	op, err := egress.NewOperator(egress.Config{})
	if err != nil {
		return nil, cli.Failf("vault: %v", err)
	}
	src, err := cfg.Vault.Source(nil, op.DialContext(egress.AllRanges()))
	if err != nil {
		return nil, cli.Failf("vault: %v", err)
	}
	if err := src.Start(ctx); err != nil {
		_ = src.Close(context.WithoutCancel(ctx))
		return nil, cli.Failf("--image-pull-secret %s: vault login: %v", secret, err)
	}
	return src, nil
}

// withPullLogin makes m's image cache pull with cred.
func withPullLogin(m *sandbox.Manager, cred *image.Credential) error {
	st, ok := m.Images.(*image.Store)
	if !ok {
		return fmt.Errorf("image pulls: no registry login for this image source")
	}
	st.Credential = cred
	return nil
}
