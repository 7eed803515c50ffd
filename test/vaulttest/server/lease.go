package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hashicorp/vault/sdk/framework"
	"github.com/hashicorp/vault/sdk/logical"
)

// leaseTTL is short so tests see renewals within seconds.
const leaseTTL = 3 * time.Second

// leaseBackend is a minimal dynamic secrets engine: reading creds/NAME mints a
// random value under a renewable lease; stats reports how often leases were
// issued, renewed and revoked. The leases themselves are managed by Vault's
// real expiration manager.
type leaseBackend struct {
	*framework.Backend
	issued, renewed, revoked atomic.Int64
}

const secretType = "leasetest_cred"

func leaseFactory(ctx context.Context, conf *logical.BackendConfig) (logical.Backend, error) {
	b := &leaseBackend{}
	b.Backend = &framework.Backend{
		BackendType: logical.TypeLogical,
		Help:        "test engine with renewable leases",
		Paths: []*framework.Path{
			{
				Pattern: "creds/" + framework.GenericNameRegex("name"),
				Fields: map[string]*framework.FieldSchema{
					"name": {Type: framework.TypeString},
				},
				Operations: map[logical.Operation]framework.OperationHandler{
					logical.ReadOperation: &framework.PathOperation{Callback: b.read},
				},
			},
			{
				Pattern: "stats",
				Operations: map[logical.Operation]framework.OperationHandler{
					logical.ReadOperation: &framework.PathOperation{Callback: b.stats},
				},
			},
		},
		Secrets: []*framework.Secret{{
			Type:   secretType,
			Fields: map[string]*framework.FieldSchema{"value": {Type: framework.TypeString}},
			Renew:  b.renew,
			Revoke: b.revoke,
		}},
	}
	if err := b.Setup(ctx, conf); err != nil {
		return nil, fmt.Errorf("setup leasetest: %w", err)
	}
	return b, nil
}

func (b *leaseBackend) read(_ context.Context, _ *logical.Request, d *framework.FieldData) (*logical.Response, error) {
	buf := make([]byte, 16)
	if _, err := rand.Read(buf); err != nil {
		return nil, fmt.Errorf("mint value: %w", err)
	}
	value := "dyn-" + d.Get("name").(string) + "-" + hex.EncodeToString(buf)
	resp := b.Secret(secretType).Response(map[string]any{"value": value}, map[string]any{"value": value})
	resp.Secret.TTL = leaseTTL
	resp.Secret.MaxTTL = time.Hour
	resp.Secret.Renewable = true
	b.issued.Add(1)
	return resp, nil
}

func (b *leaseBackend) renew(_ context.Context, req *logical.Request, _ *framework.FieldData) (*logical.Response, error) {
	b.renewed.Add(1)
	resp := &logical.Response{Secret: req.Secret}
	resp.Secret.TTL = leaseTTL
	resp.Secret.MaxTTL = time.Hour
	return resp, nil
}

func (b *leaseBackend) revoke(context.Context, *logical.Request, *framework.FieldData) (*logical.Response, error) {
	b.revoked.Add(1)
	return nil, nil
}

func (b *leaseBackend) stats(context.Context, *logical.Request, *framework.FieldData) (*logical.Response, error) {
	return &logical.Response{Data: map[string]any{
		"issued":  b.issued.Load(),
		"renewed": b.renewed.Load(),
		"revoked": b.revoked.Load(),
	}}, nil
}
