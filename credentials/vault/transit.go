package vault

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// TransitKey is an ed25519 key of Vault's Transit engine that signs audit checkpoints: the
// private key stays in Vault, the sidecar sends the message and gets the signature. It is
// an audit.Signer. Create it with Source.Transit; it is safe for concurrent use.
type TransitKey struct {
	src         *Source
	mount, name string

	mu   sync.Mutex
	pubs map[int]ed25519.PublicKey // by key version, as read from transit/keys/NAME
}

// ParseTransitRef splits "MOUNT/KEY" (the mount may hold slashes, a transit key name may
// not) into the mount path and the key name.
func ParseTransitRef(ref string) (mount, name string, err error) {
	i := strings.LastIndexByte(ref, '/')
	if i <= 0 || i == len(ref)-1 {
		return "", "", fmt.Errorf("vault transit key %q: want MOUNT/KEY, e.g. transit/airlock-audit", ref)
	}
	return strings.Trim(ref[:i], "/"), ref[i+1:], nil
}

// Transit returns the transit key name under mount (e.g. "transit"), used with the source's
// login.
func (s *Source) Transit(mount, name string) *TransitKey {
	return &TransitKey{src: s, mount: mount, name: name, pubs: map[int]ed25519.PublicKey{}}
}

// String names the key as the --audit-sign flag does.
func (k *TransitKey) String() string { return "vault-transit:" + k.mount + "/" + k.name }

// Sign signs msg with the key's newest version (transit/sign/NAME) and returns the signature
// and that version's public key, read from transit/keys/NAME (a rotation gives a new key, and
// so a new key id). It fails while the source is not logged in.
func (k *TransitKey) Sign(ctx context.Context, msg []byte) (ed25519.PublicKey, []byte, error) {
	k.src.mu.Lock()
	ready := k.src.loggedIn && !k.src.closed
	k.src.mu.Unlock()
	if !ready {
		return nil, nil, errors.New("not logged in to vault")
	}
	ctx, cancel := context.WithTimeout(ctx, k.src.cfg.Timeout)
	defer cancel()
	path := k.mount + "/sign/" + k.name
	sec, err := k.src.client.Logical().WriteWithContext(ctx, path, map[string]any{"input": base64.StdEncoding.EncodeToString(msg)})
	if err != nil {
		return nil, nil, fmt.Errorf("vault %s: %w", path, err)
	}
	if sec == nil || sec.Data == nil {
		return nil, nil, fmt.Errorf("vault %s: no data in the answer", path)
	}
	version, sig, err := parseTransitSignature(sec.Data["signature"])
	if err != nil {
		return nil, nil, fmt.Errorf("vault %s: %w", path, err)
	}
	pub, err := k.publicKey(ctx, version)
	if err != nil {
		return nil, nil, err
	}
	return pub, sig, nil
}

// parseTransitSignature reads "vault:vN:BASE64" into the key version and the signature.
func parseTransitSignature(v any) (int, []byte, error) {
	s, _ := v.(string)
	parts := strings.Split(s, ":")
	if len(parts) != 3 || parts[0] != "vault" || !strings.HasPrefix(parts[1], "v") {
		return 0, nil, errors.New(`signature is not of the form "vault:vN:BASE64"`)
	}
	version, err := strconv.Atoi(parts[1][1:])
	if err != nil || version < 1 {
		return 0, nil, fmt.Errorf("signature names key version %q", parts[1])
	}
	sig, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil || len(sig) != ed25519.SignatureSize {
		return 0, nil, errors.New("signature is not a base64 Ed25519 signature")
	}
	return version, sig, nil
}

// publicKey returns the public key of a version, reading the key again when it is not known
// (a rotation since the last read).
func (k *TransitKey) publicKey(ctx context.Context, version int) (ed25519.PublicKey, error) {
	k.mu.Lock()
	pub, ok := k.pubs[version]
	k.mu.Unlock()
	if ok {
		return pub, nil
	}
	pubs, err := k.src.readTransitKeys(ctx, k.mount, k.name)
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.pubs = pubs
	if pub, ok = pubs[version]; !ok {
		return nil, fmt.Errorf("vault %s/keys/%s: no version %d", k.mount, k.name, version)
	}
	return pub, nil
}

// TransitPublicKeys reads the public keys of every version of the transit key mount/name
// still in Vault, oldest first: what a verifier checks checkpoints with across rotations.
// The source must be started (logged in).
func (s *Source) TransitPublicKeys(ctx context.Context, mount, name string) ([]ed25519.PublicKey, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	pubs, err := s.readTransitKeys(ctx, mount, name)
	if err != nil {
		return nil, err
	}
	versions := make([]int, 0, len(pubs))
	for v := range pubs {
		versions = append(versions, v)
	}
	sort.Ints(versions)
	out := make([]ed25519.PublicKey, 0, len(versions))
	for _, v := range versions {
		out = append(out, pubs[v])
	}
	return out, nil
}

// readTransitKeys reads transit/keys/NAME: an ed25519 key's public keys by version.
func (s *Source) readTransitKeys(ctx context.Context, mount, name string) (map[int]ed25519.PublicKey, error) {
	path := mount + "/keys/" + name
	sec, err := s.client.Logical().ReadWithContext(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("vault %s: %w", path, err)
	}
	if sec == nil || sec.Data == nil {
		return nil, fmt.Errorf("vault %s: no such key", path)
	}
	if t, _ := sec.Data["type"].(string); t != "ed25519" {
		return nil, fmt.Errorf("vault %s: a key of type %q; audit checkpoints need an ed25519 key (vault write -f %s type=ed25519)", path, t, path)
	}
	keys, _ := sec.Data["keys"].(map[string]any)
	pubs := map[int]ed25519.PublicKey{}
	for v, raw := range keys {
		version, err := strconv.Atoi(v)
		if err != nil {
			return nil, fmt.Errorf("vault %s: key version %q", path, v)
		}
		entry, _ := raw.(map[string]any)
		b64, _ := entry["public_key"].(string)
		pub, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(pub) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("vault %s: version %d has no base64 Ed25519 public key", path, version)
		}
		pubs[version] = pub
	}
	if len(pubs) == 0 {
		return nil, fmt.Errorf("vault %s: no key versions", path)
	}
	return pubs, nil
}
