package vault

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/vault/api"
)

// authLoop logs in, keeps the token renewed, and logs in again when renewal ends (max TTL
// reached, renewal refused) or the token file changes. The first login's result goes to
// first.
func (s *Source) authLoop(ctx context.Context, first chan<- error) {
	defer close(s.done)
	backoff := time.Second
	for ctx.Err() == nil {
		secret, err := s.login(ctx)
		if err != nil {
			if first != nil {
				first <- err
				first = nil
			}
			s.log.WithError(err).Warn("vault login failed; retrying")
			if !sleep(ctx, backoff) {
				return
			}
			backoff = min(backoff*2, 30*time.Second)
			continue
		}
		backoff = time.Second
		s.count(func(st *Stats) { st.Logins++ })
		s.mu.Lock()
		s.loggedIn = true
		s.mu.Unlock()
		if first != nil {
			first <- nil
			first = nil
		}
		s.log.WithField("auth", s.cfg.Auth).Info("logged in to vault")
		s.keepRenewed(ctx, secret)
	}
}

// login authenticates with the configured method and sets the client's token.
func (s *Source) login(ctx context.Context) (*api.Secret, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	switch s.cfg.Auth {
	case AuthAppRole:
		roleID, err := readTrimmed(s.cfg.RoleIDFile)
		if err != nil {
			return nil, fmt.Errorf("vault approle login: %w", err)
		}
		secretID, err := readTrimmed(s.cfg.SecretIDFile)
		if err != nil {
			return nil, fmt.Errorf("vault approle login: %w", err)
		}
		return s.loginWrite(ctx, "auth/"+s.cfg.AppRoleMount+"/login", map[string]any{"role_id": roleID, "secret_id": secretID})
	case AuthKubernetes:
		jwt, err := readTrimmed(s.cfg.KubernetesJWTFile)
		if err != nil {
			return nil, fmt.Errorf("vault kubernetes login: %w", err)
		}
		return s.loginWrite(ctx, "auth/"+s.cfg.KubernetesMount+"/login", map[string]any{"role": s.cfg.KubernetesRole, "jwt": jwt})
	}
	token := s.cfg.Token
	if token == "" {
		t, err := readTrimmed(s.cfg.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("vault token: %w", err)
		}
		token = t
	}
	s.client.SetToken(token)
	self, err := s.client.Auth().Token().LookupSelfWithContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("vault token lookup: %w", err)
	}
	ttl, _ := self.TokenTTL()
	renewable, _ := self.TokenIsRenewable()
	return &api.Secret{Auth: &api.SecretAuth{ClientToken: token, Renewable: renewable, LeaseDuration: int(ttl.Seconds())}}, nil
}

func (s *Source) loginWrite(ctx context.Context, path string, data map[string]any) (*api.Secret, error) {
	// Log in without the old token (it may have expired).
	c, err := s.client.CloneWithHeaders()
	if err != nil {
		return nil, fmt.Errorf("vault login: %w", err)
	}
	c.ClearToken()
	secret, err := c.Logical().WriteWithContext(ctx, path, data)
	if err != nil {
		return nil, fmt.Errorf("vault login at %s: %w", path, err)
	}
	if secret == nil || secret.Auth == nil || secret.Auth.ClientToken == "" {
		return nil, fmt.Errorf("vault login at %s: no token in the answer", path)
	}
	s.client.SetToken(secret.Auth.ClientToken)
	return secret, nil
}

// keepRenewed renews the token until renewal ends, the token file changes, or ctx ends.
func (s *Source) keepRenewed(ctx context.Context, secret *api.Secret) {
	ctx, cancel := context.WithCancel(ctx) // ends the token file watch with this login
	defer cancel()
	fileChanged := s.watchTokenFile(ctx, secret.Auth.ClientToken) // the token that logged in
	if !secret.Auth.Renewable || secret.Auth.LeaseDuration == 0 {
		// A root or periodic-less token: nothing to renew. Wait for a new token file, or
		// for the token's end.
		var end <-chan time.Time
		if secret.Auth.LeaseDuration > 0 {
			end = time.After(time.Duration(secret.Auth.LeaseDuration) * time.Second)
		}
		select {
		case <-ctx.Done():
		case <-fileChanged:
			s.log.Info("vault token file changed; using the new token")
		case <-end:
			s.log.Info("vault token expired; logging in again")
		}
		return
	}
	w, err := s.client.NewLifetimeWatcher(&api.LifetimeWatcherInput{Secret: secret})
	if err != nil {
		s.log.WithError(err).Warn("vault token renewal could not start; logging in again")
		sleep(ctx, time.Second)
		return
	}
	go w.Start()
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-fileChanged:
			s.log.Info("vault token file changed; using the new token")
			return
		case err := <-w.DoneCh():
			if err != nil {
				s.log.WithError(err).Warn("vault token renewal failed; logging in again")
			} else {
				s.log.Info("vault token reached its max TTL; logging in again")
			}
			return
		case <-w.RenewCh():
			s.count(func(st *Stats) { st.TokenRenewals++ })
			s.log.Info("vault token renewed")
		}
	}
}

// watchTokenFile returns a channel closed when the token file holds a token other than
// loggedIn, the token this login used (checked at once, then every second; an agent may
// replace the file atomically, which inotify on the old inode would miss). The baseline is
// the token that logged in, never the file as the watch first finds it: a rotation that lands
// between the login and the watch's start is seen. It returns nil (never ready) when no
// token file is in use.
func (s *Source) watchTokenFile(ctx context.Context, loggedIn string) <-chan struct{} {
	if s.cfg.Auth != AuthToken || s.cfg.Token != "" || s.cfg.TokenFile == "" {
		return nil
	}
	ch := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for !s.tokenFileRotated(loggedIn) {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		close(ch)
	}()
	return ch
}

// tokenFileRotated says whether the token file holds a token other than loggedIn, compared
// as login reads it (trimmed). An unreadable or empty file is no rotation: the agent may be
// between removing the old file and writing the new one.
func (s *Source) tokenFileRotated(loggedIn string) bool {
	b, err := os.ReadFile(s.cfg.TokenFile)
	tok := strings.TrimSpace(string(b))
	return err == nil && tok != "" && tok != loggedIn
}

func readTrimmed(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", errors.New("file " + path + " is empty")
	}
	return v, nil
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
