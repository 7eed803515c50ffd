package audit

import (
	"crypto/ed25519"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
)

// A key rotation mid-chain: checkpoints carry the id of the key that signed them, and a
// verifier holding both keys (as the installer's ConfigMap does) proves the whole trail; one
// holding only the old key finds the new key's checkpoints unsigned by it.
func TestVerifyAcrossAKeyRotation(t *testing.T) {
	k1, k2 := testKey(t), testKey(t)
	path := writeChain(t, 5, k1)
	l, err := New(Options{Sandbox: "sb", Writer: io.Discard, File: path, Key: k2})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := l.Commit(Event{Kind: KindHTTP, Decision: DecisionAllow, Destination: fmt.Sprintf("r%d.test:443", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path + ".checkpoints")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []ed25519.PrivateKey{k1, k2} {
		id := KeyID(k.Public().(ed25519.PublicKey))
		if !strings.Contains(string(b), `"kid":"`+id+`"`) {
			t.Errorf("checkpoints do not name key id %s:\n%s", id, b)
		}
	}
	pub1, pub2 := k1.Public().(ed25519.PublicKey), k2.Public().(ed25519.PublicKey)
	rep, err := VerifyWith([]string{path}, VerifyOptions{Keys: []ed25519.PublicKey{pub1, pub2}})
	if err != nil || !rep.Proven() || rep.LastSeq != 10 {
		t.Fatalf("both keys: %+v %v, want proven to seq 10", rep.Tampered, err)
	}
	rep, err = VerifyWith([]string{path}, VerifyOptions{Key: pub1})
	if err != nil || rep.Tampered == nil || rep.Tampered.Kind != ProblemSignature {
		t.Fatalf("old key only: %+v, want a signature problem", rep.Tampered)
	}
	keys, err := ParsePublicKeys(append(mustPEM(t, pub1), mustPEM(t, pub2)...))
	if err != nil || len(keys) != 2 || !keys[1].Equal(pub2) {
		t.Fatalf("ParsePublicKeys: %d keys, %v", len(keys), err)
	}
}

func mustPEM(t *testing.T, pub ed25519.PublicKey) []byte {
	t.Helper()
	b, err := EncodePublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCheckpointWithAForeignKidIsRefused(t *testing.T) {
	k1, k2 := testKey(t), testKey(t)
	c := Checkpoint{Sandbox: "sb", Why: "periodic", Seq: 1, Key: k1.Public().(ed25519.PublicKey), Version: 2}
	c.Sig = ed25519.Sign(k1, c.Message())
	b, err := c.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseCheckpoint(b); err != nil {
		t.Fatalf("a checkpoint as written: %v", err)
	}
	forged := strings.Replace(string(b), KeyID(k1.Public().(ed25519.PublicKey)), KeyID(k2.Public().(ed25519.PublicKey)), 1)
	if _, err := ParseCheckpoint([]byte(forged)); err == nil || !strings.Contains(err.Error(), "key id") {
		t.Fatalf("a checkpoint naming another key's id: %v, want refused", err)
	}
}
