package ship

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// ErrNotFound is returned (wrapped) by Store.Get for an object that is not there.
var ErrNotFound = errors.New("object not found")

// Retention is the Object Lock retention an upload asks for. The zero value asks for none.
type Retention struct {
	// Mode is "COMPLIANCE" or "GOVERNANCE"; empty sets no retention.
	Mode string
	// Period is how long from the upload the object version is kept.
	Period time.Duration
}

// Version is one stored version of an object.
type Version struct {
	Key string
	// ID is the store's version id ("" where the store keeps no versions).
	ID string
	// Latest says whether it is the current version; DeleteMarker that it is a delete
	// marker (it holds no data).
	Latest, DeleteMarker bool
	Time                 time.Time
}

// Store is where shipped objects go. Implementations are safe for concurrent use.
type Store interface {
	// Put stores body under key with the retention asked for.
	Put(ctx context.Context, key string, body []byte, r Retention) error
	// Get returns the object's data: the given version, or the current one when version is
	// "". An absent object is ErrNotFound.
	Get(ctx context.Context, key, version string) ([]byte, error)
	// Versions lists every version (and delete marker) of the objects under prefix, in key
	// order, oldest version first within a key. A store without versions lists each
	// object once, as its latest.
	Versions(ctx context.Context, prefix string) ([]Version, error)
	// String names the store for messages ("s3://bucket", "/path").
	String() string
}

// DirStore keeps objects as files under a directory (keys are slash-separated relative
// paths). It keeps no versions and enforces no retention: the directory's file system and
// its permissions decide what may be changed.
type DirStore struct {
	Root string
}

var _ Store = DirStore{}

func (d DirStore) path(key string) (string, error) {
	clean := filepath.Clean("/" + key)
	if clean == "/" || strings.Contains(key, "..") {
		return "", fmt.Errorf("object key %q is not a relative path inside %s", key, d.Root)
	}
	return filepath.Join(d.Root, clean), nil
}

// Put writes body to a temporary file and renames it into place, so that a reader never
// sees half an object.
func (d DirStore) Put(_ context.Context, key string, body []byte, _ Retention) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, body, 0o640); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	return nil
}

// Get reads the file of key; version must be "".
func (d DirStore) Get(_ context.Context, key, version string) ([]byte, error) {
	p, err := d.path(key)
	if err != nil {
		return nil, err
	}
	if version != "" {
		return nil, fmt.Errorf("get %s version %s: %s keeps no versions", key, version, d)
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("get %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	return b, nil
}

// Versions lists the files under prefix, each as its latest version.
func (d DirStore) Versions(_ context.Context, prefix string) ([]Version, error) {
	var out []Version
	err := filepath.WalkDir(d.Root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() || strings.HasSuffix(p, ".tmp") {
			return nil
		}
		rel, err := filepath.Rel(d.Root, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if strings.HasPrefix(key, prefix) {
			info, err := e.Info()
			if err != nil {
				return err
			}
			out = append(out, Version{Key: key, Latest: true, Time: info.ModTime()})
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("list %s: %w", d.Root, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

func (d DirStore) String() string { return d.Root }
