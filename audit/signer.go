package audit

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
)

// Signer signs audit checkpoints. A local Ed25519 key is one (KeySigner); a key held by a
// signing service (Vault's Transit engine: credentials/vault) is another, so that the
// private key never enters the sidecar. Either way a checkpoint carries the public key that
// signed it and that key's id (KeyID), and verify checks it with one code path.
type Signer interface {
	// Sign signs msg with Ed25519 and returns the signature and the public key whose
	// private half made it (a service that rotates keys signs with, and returns, its newest).
	Sign(ctx context.Context, msg []byte) (pub ed25519.PublicKey, sig []byte, err error)
	// String names the signer in logs and audit events; it holds no secret.
	String() string
}

// KeySigner returns the Signer of a local Ed25519 key. A Logger signs with it on its writer
// goroutine, as the signature costs microseconds and cannot fail.
func KeySigner(key ed25519.PrivateKey) Signer { return keySigner{key} }

type keySigner struct{ key ed25519.PrivateKey }

func (k keySigner) Sign(_ context.Context, msg []byte) (ed25519.PublicKey, []byte, error) {
	if len(k.key) != ed25519.PrivateKeySize {
		return nil, nil, errors.New("sign audit checkpoint: not an Ed25519 private key")
	}
	return k.key.Public().(ed25519.PublicKey), ed25519.Sign(k.key, msg), nil
}

func (k keySigner) String() string {
	if len(k.key) != ed25519.PrivateKeySize {
		return "local key (invalid)"
	}
	return "local key " + KeyID(k.key.Public().(ed25519.PublicKey))
}

// signCheckpoint signs c with s and checks the answer: a signature that its returned key
// does not verify is refused (a signing service answering garbage, or another key's name),
// so no checkpoint is written that verify would reject.
func signCheckpoint(ctx context.Context, s Signer, c Checkpoint) (Checkpoint, error) {
	c.Version = checkpointVersion
	pub, sig, err := s.Sign(ctx, c.Message())
	if err != nil {
		return c, err
	}
	if len(pub) != ed25519.PublicKeySize || !ed25519.Verify(pub, c.Message(), sig) {
		return c, fmt.Errorf("sign audit checkpoint with %s: the signature does not verify with the key it names", s)
	}
	c.Key, c.Sig = pub, sig
	return c, nil
}
