package vaulttest

import (
	"strings"
	"testing"
)

// TestServer starts the real Vault test server and exercises what the helpers rely on.
func TestServer(t *testing.T) {
	s := Start(t)
	if v := s.PutKV(t, "smoke", map[string]any{"k": "v"}); v != 1 {
		t.Fatalf("first KV version: got %d, want 1", v)
	}
	out := s.Must(t, "GET", "secret/data/smoke", nil)
	if got := out["data"].(map[string]any)["data"].(map[string]any)["k"]; got != "v" {
		t.Fatalf("KV read: got %v, want v", got)
	}
	roleID, secretID := s.AppRole(t, "smoke", 60, 120)
	login := s.Must(t, "POST", "auth/approle/login", map[string]any{"role_id": roleID, "secret_id": secretID})
	if tok, _ := login["auth"].(map[string]any)["client_token"].(string); tok == "" {
		t.Fatal("approle login returned no token")
	}
	lease := s.Must(t, "GET", "dyn/creds/smoke", nil)
	id, _ := lease["lease_id"].(string)
	if !strings.HasPrefix(id, "dyn/creds/smoke/") || !s.LeaseAlive(t, id) {
		t.Fatalf("dynamic lease %q not alive", id)
	}
	s.Must(t, "PUT", "sys/leases/revoke", map[string]any{"lease_id": id})
	if s.LeaseAlive(t, id) {
		t.Fatal("lease alive after revoke")
	}
	if issued, _, revoked := s.LeaseStats(t); issued != 1 || revoked != 1 {
		t.Fatalf("lease stats: issued %d revoked %d, want 1 1", issued, revoked)
	}
}
