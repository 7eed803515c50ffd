package audit

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	hexenc "encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Checkpoint is a signed statement that the chain reached line Seq, whose hash is Hash. The
// Logger appends one to its checkpoint file (a second sink, apart from the log) at rotation,
// at shutdown and periodically, so that truncating the log, or rewriting its chain, shows
// against a signature the log's editor cannot make without the private key.
type Checkpoint struct {
	// Time is when the checkpoint was made.
	Time time.Time
	// Sandbox is the sandbox name of the log.
	Sandbox string
	// Why is "rotate", "shutdown", "periodic" or "start".
	Why string
	// File is the base name of the audit file being written when the checkpoint was made.
	File string
	// Seq and Hash are the last written line's sequence number and SHA-256.
	Seq  uint64
	Hash [32]byte
	// Key is the public key that signed the checkpoint; Sig the Ed25519 signature of
	// Message().
	Key ed25519.PublicKey
	Sig []byte
	// Version is the form of Message: 2 signs Why and File too, so a checkpoint cannot be
	// relabelled a rotation boundary (verify relies on that); 0 or 1 (written before) does
	// not.
	Version int
}

// checkpointVersion is the Version a Logger signs.
const checkpointVersion = 2

// checkpointJSON is a Checkpoint's line in the checkpoint file.
type checkpointJSON struct {
	Checkpoint string    `json:"checkpoint"`
	Time       time.Time `json:"time"`
	Sandbox    string    `json:"sandbox"`
	File       string    `json:"file"`
	Seq        uint64    `json:"seq"`
	Hash       string    `json:"hash"`
	Key        string    `json:"key"`
	Kid        string    `json:"kid,omitempty"`
	Sig        string    `json:"sig"`
	Version    int       `json:"v,omitempty"`
}

// Message is the byte string a checkpoint's signature covers.
func (c Checkpoint) Message() []byte {
	m := "airlock-audit-checkpoint/v1\n"
	if c.Version >= 2 {
		m = "airlock-audit-checkpoint/v2\n" + c.Why + "\n" + c.File + "\n"
	}
	return []byte(m + c.Sandbox + "\n" + strconv.FormatUint(c.Seq, 10) + "\n" +
		hexenc.EncodeToString(c.Hash[:]) + "\n" + c.Time.UTC().Format(time.RFC3339Nano) + "\n")
}

// Boundary reports whether c marks, under its signature, a rotation: the chain goes on in a
// new file after c.Seq.
func (c Checkpoint) Boundary() bool { return c.Version >= 2 && c.Why == "rotate" }

// MarshalJSON encodes c as one line of the checkpoint file.
func (c Checkpoint) MarshalJSON() ([]byte, error) {
	return json.Marshal(checkpointJSON{Checkpoint: c.Why, Time: c.Time.UTC(), Sandbox: c.Sandbox, File: c.File,
		Seq: c.Seq, Hash: hexenc.EncodeToString(c.Hash[:]), Key: base64.StdEncoding.EncodeToString(c.Key), Kid: KeyID(c.Key),
		Sig: base64.StdEncoding.EncodeToString(c.Sig), Version: c.Version})
}

// ParseCheckpoint decodes one line of a checkpoint file. It does not check the signature
// (Checkpoint.Verify does).
func ParseCheckpoint(b []byte) (Checkpoint, error) {
	var j checkpointJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return Checkpoint{}, fmt.Errorf("decode checkpoint: %w", err)
	}
	if j.Checkpoint == "" {
		return Checkpoint{}, errors.New("decode checkpoint: not a checkpoint line")
	}
	c := Checkpoint{Time: j.Time, Sandbox: j.Sandbox, Why: j.Checkpoint, File: j.File, Seq: j.Seq, Version: j.Version}
	h, err := hexenc.DecodeString(j.Hash)
	if err != nil || len(h) != len(c.Hash) {
		return Checkpoint{}, errors.New("decode checkpoint: hash is not 32 hex-encoded bytes")
	}
	copy(c.Hash[:], h)
	if c.Key, err = base64.StdEncoding.DecodeString(j.Key); err != nil || len(c.Key) != ed25519.PublicKeySize {
		return Checkpoint{}, errors.New("decode checkpoint: key is not a base64 Ed25519 public key")
	}
	if j.Kid != "" && j.Kid != KeyID(c.Key) {
		return Checkpoint{}, fmt.Errorf("decode checkpoint: key id %q is not the id of its key (%s)", j.Kid, KeyID(c.Key))
	}
	if c.Sig, err = base64.StdEncoding.DecodeString(j.Sig); err != nil {
		return Checkpoint{}, errors.New("decode checkpoint: signature is not base64")
	}
	return c, nil
}

// KeyID names a checkpoint signing key: "ed25519:" and the first 16 hex digits of the
// SHA-256 of the public key. Checkpoints carry it (kid), so that a verifier holding several
// keys (before and after a rotation) sees which one signed; it is not a secret and proves
// nothing by itself: the signature is checked against the key the verifier holds.
func KeyID(pub ed25519.PublicKey) string {
	if len(pub) != ed25519.PublicKeySize {
		return ""
	}
	sum := sha256.Sum256(pub)
	return "ed25519:" + hexenc.EncodeToString(sum[:8])
}

// ParsePublicKeys reads every Ed25519 public key (PKIX PEM blocks, or a private key's
// public half) in b: a verifier's key file may hold the keys before and after a rotation.
func ParsePublicKeys(b []byte) ([]ed25519.PublicKey, error) {
	var keys []ed25519.PublicKey
	for n := 1; ; n++ {
		blk, rest := pem.Decode(b)
		if blk == nil {
			break
		}
		pub, err := ParsePublicKey(pem.EncodeToMemory(blk))
		if err != nil {
			return nil, fmt.Errorf("PEM block %d: %w", n, err)
		}
		keys = append(keys, pub)
		b = rest
	}
	if len(keys) == 0 {
		return nil, errors.New("parse audit public key: no PEM block")
	}
	return keys, nil
}

// Verify checks c's signature with pub (or, when pub is nil, with the key the checkpoint
// names, which proves only that the checkpoint was not altered after it was signed).
func (c Checkpoint) Verify(pub ed25519.PublicKey) bool {
	if pub == nil {
		pub = c.Key
	}
	return len(pub) == ed25519.PublicKeySize && ed25519.Verify(pub, c.Message(), c.Sig)
}

// checkpointer appends signed checkpoints to a file. Only the writer goroutine uses it. With
// a local key it signs and writes on the writer goroutine; with a remote Signer it hands the
// checkpoints to a signQueue.
type checkpointer struct {
	f       *os.File
	signer  Signer
	queue   *signQueue // nil with a local key
	lastSeq uint64
	lastAt  time.Time
}

// openCheckpointer opens the checkpoint file; note logs an event into the chain (the signing
// queue's outage notes).
func openCheckpointer(path string, s Signer, now func() time.Time, seq uint64, note func(Event)) (*checkpointer, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open audit checkpoints: %w", err)
	}
	cp := &checkpointer{f: f, signer: s, lastSeq: seq, lastAt: now()}
	if _, local := s.(keySigner); !local {
		cp.queue = newSignQueue(s, f, now, note)
	}
	return cp, nil
}

// write signs c and appends it, or queues it for the remote signer.
func (cp *checkpointer) write(c Checkpoint) error {
	if cp.queue != nil {
		cp.queue.submit(c)
		cp.lastSeq, cp.lastAt = c.Seq, c.Time
		return nil
	}
	c, err := signCheckpoint(context.Background(), cp.signer, c)
	if err != nil {
		return err
	}
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if _, err := cp.f.Write(append(b, '\n')); err != nil {
		return err
	}
	cp.lastSeq, cp.lastAt = c.Seq, c.Time
	return nil
}

// close waits (up to grace) for queued checkpoints to be signed, then closes the file.
func (cp *checkpointer) close(grace time.Duration) error {
	var err error
	if cp.queue != nil {
		err = cp.queue.finish(grace)
	}
	if cerr := cp.f.Close(); cerr != nil {
		err = errors.Join(err, fmt.Errorf("close audit checkpoints: %w", cerr))
	}
	return err
}

// GenerateKey makes a new Ed25519 signing key for checkpoints.
func GenerateKey() (ed25519.PrivateKey, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate audit signing key: %w", err)
	}
	return priv, nil
}

// EncodePrivateKey returns key as a PKCS #8 "PRIVATE KEY" PEM block.
func EncodePrivateKey(key ed25519.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encode audit signing key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// EncodePublicKey returns pub as a PKIX "PUBLIC KEY" PEM block (what audit verify --key reads).
func EncodePublicKey(pub ed25519.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("encode audit public key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// ParsePrivateKey reads an Ed25519 key from a PKCS #8 PEM block.
func ParsePrivateKey(b []byte) (ed25519.PrivateKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, errors.New("parse audit signing key: no PRIVATE KEY PEM block")
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse audit signing key: %w", err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("parse audit signing key: a %T, not an Ed25519 key", k)
	}
	return priv, nil
}

// ParsePublicKey reads an Ed25519 public key from a PKIX PEM block, or from a private key's
// PEM block (its public half).
func ParsePublicKey(b []byte) (ed25519.PublicKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("parse audit public key: no PEM block")
	}
	if blk.Type == "PRIVATE KEY" {
		priv, err := ParsePrivateKey(b)
		if err != nil {
			return nil, err
		}
		return priv.Public().(ed25519.PublicKey), nil
	}
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse audit public key: %w", err)
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("parse audit public key: a %T, not an Ed25519 key", k)
	}
	return pub, nil
}

// LoadOrCreateKey reads the signing key at path, creating it (0600, in a 0700 directory)
// when it is absent.
func LoadOrCreateKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		return ParsePrivateKey(b)
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read audit signing key: %w", err)
	}
	key, err := GenerateKey()
	if err != nil {
		return nil, err
	}
	pemBytes, err := EncodePrivateKey(key)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create audit signing key: %w", err)
	}
	if err := os.WriteFile(path, pemBytes, 0o600); err != nil {
		return nil, fmt.Errorf("create audit signing key: %w", err)
	}
	return key, nil
}
