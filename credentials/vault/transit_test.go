package vault

import (
	"context"
	"crypto/ed25519"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/test/vaulttest"
)

// A real Vault's Transit engine signs with an ed25519 key: the signature verifies with the
// public key of the version that made it; after a rotation the newest version signs, and
// every version's public key is still readable for verifiers. A key of another type, a
// missing key, and a refused token are errors, never a signature.
func TestTransitSignRotateAndPublicKeys(t *testing.T) {
	v := vaulttest.Start(t)
	if why := v.TransitMissing(t); why != "" {
		t.Fatal(why) // the test server mounts Transit: its absence is a broken build, not a skip
	}
	v.Must(t, "POST", "transit/keys/audit", map[string]any{"type": "ed25519"})
	v.Must(t, "POST", "transit/keys/ecdsa", map[string]any{"type": "ecdsa-p256"})
	s := startSource(t, Config{Address: v.Address, CACertFile: v.CACertFile, Token: v.RootToken})
	ctx := context.Background()
	k := s.Transit("transit", "audit")
	msg := []byte("airlock-audit-checkpoint/v2\nperiodic\naudit.log\nsb\n7\n")
	pub1, sig, err := k.Sign(ctx, msg)
	if err != nil {
		t.Fatal(err)
	}
	if !ed25519.Verify(pub1, msg, sig) {
		t.Fatal("transit's signature does not verify with the public key of its version")
	}
	if ed25519.Verify(pub1, []byte("another message"), sig) {
		t.Fatal("the signature verifies another message")
	}
	v.Must(t, "POST", "transit/keys/audit/rotate", nil)
	pub2, sig2, err := k.Sign(ctx, msg)
	if err != nil {
		t.Fatal(err)
	}
	if pub2.Equal(pub1) || !ed25519.Verify(pub2, msg, sig2) {
		t.Fatal("after a rotation: want version 2's key signing")
	}
	keys, err := s.TransitPublicKeys(ctx, "transit", "audit")
	if err != nil || len(keys) != 2 || !keys[0].Equal(pub1) || !keys[1].Equal(pub2) {
		t.Fatalf("TransitPublicKeys: %d keys, %v; want versions 1 and 2 in order", len(keys), err)
	}
	for _, tc := range []struct{ name, key, want string }{
		{"a key of another type", "ecdsa", "Ed25519"},
		{"no such key", "nope", "transit/"},
	} {
		if _, _, err := s.Transit("transit", tc.key).Sign(ctx, msg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Sign: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
	v.Policy(t, "nosign", `path "transit/keys/audit" { capabilities = ["read"] }`)
	tok := v.Must(t, "POST", "auth/token/create", map[string]any{"policies": []string{"nosign"}})
	auth, _ := tok["auth"].(map[string]any)
	ro := startSource(t, Config{Address: v.Address, CACertFile: v.CACertFile, Token: auth["client_token"].(string)})
	if _, _, err := ro.Transit("transit", "audit").Sign(ctx, msg); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("Sign without update on transit/sign: %v, want refused (403)", err)
	}
	if keys, err := ro.TransitPublicKeys(ctx, "transit", "audit"); err != nil || len(keys) != 2 {
		t.Errorf("a read-only verifier's TransitPublicKeys: %d, %v", len(keys), err)
	}
}

func TestParseTransitSignatureRefusesMalformed(t *testing.T) {
	for _, s := range []any{nil, 7, "", "vault:v1", "vault:1:AAAA", "vault:v0:AAAA", "vault:v1:!!", "vault:v1:AAAA", "other:v1:AAAA"} {
		if _, _, err := parseTransitSignature(s); err == nil {
			t.Errorf("parseTransitSignature(%v): no error", s)
		}
	}
	for _, ref := range []string{"", "transit", "/key", "transit/"} {
		if _, _, err := ParseTransitRef(ref); err == nil {
			t.Errorf("ParseTransitRef(%q): no error", ref)
		}
	}
	if m, n, err := ParseTransitRef("secrets/transit/audit"); err != nil || m != "secrets/transit" || n != "audit" {
		t.Errorf("ParseTransitRef: %q %q %v", m, n, err)
	}
}
