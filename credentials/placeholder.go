package credentials

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/airlock-dev/airlock/policy"
)

// PlaceholderPrefix starts every placeholder. A placeholder is
//
//	airlock-placeholder:<secret name>:<first 16 hex digits of HMAC-SHA256(key, name)>
//
// where key is the sidecar's placeholder key (placeholder.key in the state directory). A
// placeholder is not secret: it only stands for a secret, and the proxy swaps it for the
// value in requests to the rule's destinations and refuses it everywhere else.
const PlaceholderPrefix = "airlock-placeholder:"

// PlaceholderKeyFile and PlaceholdersFile are the files the placeholders live in, in the
// state directory.
const (
	PlaceholderKeyFile = "placeholder.key"
	PlaceholdersFile   = "placeholders.json"
)

// Placeholders maps secret names to placeholders and back.
type Placeholders struct {
	key []byte
	// memo maps a secret name to its placeholder (the HMAC is computed once per name), for
	// at most maxPlaceholderMemo names: names also come from text the sandbox sends
	// (placeholderSecret), which must not grow it without bound.
	memo  sync.Map
	memos atomic.Int64
}

// maxPlaceholderMemo bounds Placeholders.memo.
const maxPlaceholderMemo = 1024

// LoadPlaceholders reads the placeholder key from dir, creating it (0600) when missing.
func LoadPlaceholders(dir string) (*Placeholders, error) {
	path := filepath.Join(dir, PlaceholderKeyFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		b = make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return nil, fmt.Errorf("create placeholder key: %w", err)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("create placeholder key: %w", err)
		}
		if err := os.WriteFile(path, []byte(hex.EncodeToString(b)+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("create placeholder key: %w", err)
		}
		return &Placeholders{key: b}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read placeholder key: %w", err)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) < 16 {
		return nil, fmt.Errorf("read placeholder key %s: not 32 hex-encoded bytes; delete it to make a new one", path)
	}
	return &Placeholders{key: key}, nil
}

// NewPlaceholders uses key (at least 16 bytes) as the placeholder key.
func NewPlaceholders(key []byte) *Placeholders { return &Placeholders{key: slices.Clone(key)} }

// For returns the placeholder of the secret called name.
func (p *Placeholders) For(name string) string {
	if ph, ok := p.memo.Load(name); ok {
		return ph.(string)
	}
	m := hmac.New(sha256.New, p.key)
	m.Write([]byte(name))
	ph := PlaceholderPrefix + name + ":" + hex.EncodeToString(m.Sum(nil))[:16]
	if p.memos.Add(1) <= maxPlaceholderMemo {
		p.memo.Store(name, ph)
	}
	return ph
}

// Write writes {"name": "placeholder", ...} for exactly names to dir/placeholders.json
// (0644: the placeholders are meant to be handed to the sandbox), replacing the file
// atomically (a temporary file renamed over it): a reader sees the old set or the new one,
// never a partial file.
func (p *Placeholders) Write(dir string, names []string) error {
	m := make(map[string]string, len(names))
	for _, n := range names {
		m[n] = p.For(n)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("write placeholders: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(dir, PlaceholdersFile), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write placeholders: %w", err)
	}
	return nil
}

// writeFileAtomic writes data to a temporary file next to path, syncs it, gives it mode
// perm and renames it over path. On error the temporary file is removed.
func writeFileAtomic(path string, data []byte, perm os.FileMode) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// ForPolicy returns the placeholder of every secret the policy defines, by name.
func (p *Placeholders) ForPolicy(pol *policy.Policy) map[string]string {
	out := make(map[string]string, len(pol.Secrets()))
	for n := range pol.Secrets() {
		out[n] = p.For(n)
	}
	return out
}

// WritePolicy writes dir/placeholders.json (see Write) for exactly the secrets the policy
// defines, so a reload that adds a secret gives it a placeholder and one that removes a
// secret drops it. It returns how many secrets the file holds.
func (p *Placeholders) WritePolicy(dir string, pol *policy.Policy) (int, error) {
	names := slices.Sorted(maps.Keys(pol.Secrets()))
	return len(names), p.Write(dir, names)
}
