package vault

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/hashicorp/vault/api"

	"github.com/airlock-dev/airlock/credentials"
	"github.com/airlock-dev/airlock/policy"
)

// fetchStatic reads a KV secret: KV v2 (data under "data") or any other path's data.
func (s *Source) fetchStatic(ctx context.Context, name string, ref *policy.VaultRef) (credentials.Value, error) {
	var q map[string][]string
	if ref.Version > 0 {
		q = map[string][]string{"version": {strconv.Itoa(ref.Version)}}
	}
	secret, err := s.client.Logical().ReadWithDataWithContext(ctx, ref.Path, q)
	if err != nil {
		return credentials.Value{}, fmt.Errorf("read secret %q from vault %s: %w", name, ref.Path, err)
	}
	if secret == nil || secret.Data == nil {
		return credentials.Value{}, fmt.Errorf("read secret %q: vault has nothing at %s", name, ref.Path)
	}
	data := secret.Data
	if inner, ok := data["data"].(map[string]any); ok {
		if _, v2 := data["metadata"]; v2 {
			data = inner
		}
	} else if _, v2 := data["metadata"]; v2 {
		return credentials.Value{}, fmt.Errorf("read secret %q: %s is deleted or destroyed in vault", name, ref.Path)
	}
	v, err := pick(data, ref.Field)
	if err != nil {
		return credentials.Value{}, fmt.Errorf("read secret %q at %s: %w", name, ref.Path, err)
	}
	return credentials.Value{Secret: v}, nil
}

// pick returns the field of data, or with no field the single value (or all of data as
// JSON, for a multi-key dynamic secret).
func pick(data map[string]any, field string) (string, error) {
	if field == "" {
		if len(data) == 1 {
			for _, v := range data {
				return str(v)
			}
		}
		b, err := json.Marshal(data)
		if err != nil {
			return "", fmt.Errorf("encode secret data: %w", err)
		}
		return string(b), nil
	}
	v, ok := data[field]
	if !ok {
		return "", fmt.Errorf("field %q not found (fields: %v)", field, slices.Sorted(maps.Keys(data)))
	}
	return str(v)
}

func str(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case json.Number:
		return x.String(), nil
	case nil:
		return "", fmt.Errorf("field is null")
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encode field: %w", err)
	}
	return string(b), nil
}

// lease is a dynamic secret the source holds and renews.
type lease struct {
	id      string
	value   string
	watcher *api.LifetimeWatcher

	// expires is guarded by Source.mu.
	expires time.Time
}

// fetchDynamic returns the held value of a dynamic secret while its lease lives, else reads
// a new one and starts renewing its lease.
func (s *Source) fetchDynamic(ctx context.Context, name string, ref *policy.VaultRef) (credentials.Value, error) {
	key := ref.Path + "#" + ref.Field
	s.mu.Lock()
	if l := s.leases[key]; l != nil && time.Now().Before(l.expires) {
		v := credentials.Value{Secret: l.value, Expires: l.expires, LeaseID: l.id, Renewable: true}
		s.mu.Unlock()
		return v, nil
	}
	s.mu.Unlock()
	secret, err := s.client.Logical().ReadWithContext(ctx, ref.Path)
	if err != nil {
		return credentials.Value{}, fmt.Errorf("read dynamic secret %q from vault %s: %w", name, ref.Path, err)
	}
	if secret == nil || secret.LeaseID == "" {
		return credentials.Value{}, fmt.Errorf("read dynamic secret %q: %s returned no lease", name, ref.Path)
	}
	v, err := pick(secret.Data, ref.Field)
	if err != nil {
		s.revoke(ctx, secret.LeaseID)
		return credentials.Value{}, fmt.Errorf("read dynamic secret %q at %s: %w", name, ref.Path, err)
	}
	l := &lease{id: secret.LeaseID, value: v, expires: time.Now().Add(time.Duration(secret.LeaseDuration) * time.Second)}
	if secret.Renewable {
		w, err := s.client.NewLifetimeWatcher(&api.LifetimeWatcherInput{Secret: secret})
		if err == nil {
			l.watcher = w
		}
	}
	renew := l.watcher != nil
	if !renew {
		l.watcher = nopWatcher(s)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.revoke(ctx, secret.LeaseID)
		return credentials.Value{}, fmt.Errorf("read dynamic secret %q: vault source is closed", name)
	}
	old := s.leases[key]
	s.leases[key] = l
	expires := l.expires
	s.mu.Unlock()
	if old != nil {
		// Its lease ended (or is about to): stop renewing it and make sure it is gone.
		old.watcher.Stop()
		s.revoke(ctx, old.id)
	}
	if renew {
		go s.renewLease(key, l)
	}
	s.log.WithFields(map[string]any{"secret": name, "ttl_s": secret.LeaseDuration}).Info("vault dynamic secret leased")
	return credentials.Value{Secret: v, Expires: expires, LeaseID: l.id, Renewable: secret.Renewable}, nil
}

// renewLease renews l until its max TTL (then the next fetch leases a new secret) or Stop.
func (s *Source) renewLease(key string, l *lease) {
	go l.watcher.Start()
	for {
		select {
		case err := <-l.watcher.DoneCh():
			if err != nil {
				s.log.WithError(err).WithField("path", key).Warn("vault lease renewal ended")
			}
			return
		case r := <-l.watcher.RenewCh():
			s.count(func(st *Stats) { st.LeaseRenewals++ })
			if r != nil && r.Secret != nil {
				s.mu.Lock()
				l.expires = r.RenewedAt.Add(time.Duration(r.Secret.LeaseDuration) * time.Second)
				s.mu.Unlock()
			}
		}
	}
}

// revoke revokes a lease, logging a failure.
func (s *Source) revoke(ctx context.Context, id string) {
	if _, err := s.client.Logical().WriteWithContext(ctx, "sys/leases/revoke", map[string]any{"lease_id": id}); err != nil {
		s.log.WithError(err).Warn("vault lease revoke failed")
	}
}

// nopWatcher is a stopped watcher for a non-renewable lease, so Close can Stop every lease.
func nopWatcher(s *Source) *api.LifetimeWatcher {
	w, _ := s.client.NewLifetimeWatcher(&api.LifetimeWatcherInput{Secret: &api.Secret{}})
	return w
}
