package credentials

import (
	"context"
	"time"

	"github.com/airlock-dev/airlock/policy"
)

// Value is one fetched secret value with what is known about its validity.
type Value struct {
	// Secret is the secret value. Never log it.
	Secret string
	// Expires is when the value stops being valid (a lease's end). Zero means no known end.
	Expires time.Time
	// LeaseID is the Vault lease of a dynamic secret. Empty for static secrets.
	LeaseID string
	// Renewable says whether the lease can be renewed.
	Renewable bool
}

// Source fetches secret values of one kind. Implementations are safe for concurrent use.
type Source interface {
	// Fetch returns the current value of the secret called name, defined as s. Errors mean
	// the value cannot be had now; they never hold the value.
	Fetch(ctx context.Context, name string, s policy.Secret) (Value, error)
}

// Closer is implemented by sources holding resources (leases, tokens) to release at
// shutdown: a Vault source revokes the leases it took.
type Closer interface {
	Close(ctx context.Context) error
}
