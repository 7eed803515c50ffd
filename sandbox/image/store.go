package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/sandbox"
)

// Store is the layer cache of one state directory. Its directory holds
//
//	layers/sha256-HEX/  one unpacked layer per uncompressed digest (diff id), read-only use
//	pins/OWNER.json     which layers a sandbox (its state file) holds
//	tmp/                layers being unpacked, renamed into layers/ once verified
//	lock, locks/        the cache lock (pins, pruning) and one lock per layer (unpacking)
//
// A layer is unpacked once, under its lock, into tmp/ and renamed into place only once its
// content matched its digest, so a crash never leaves half a layer where a sandbox would use
// it. Layers no pin holds are removed by Release and Prune.
type Store struct {
	// Dir is the cache directory (created mode 0700 on first use).
	Dir string
	// Transport carries registry pulls: the operator's dial path (egress.Operator), never a
	// sandbox's. Nil refuses registry references.
	Transport http.RoundTripper
	// Credential authenticates registry pulls to the registry of the reference and to no
	// other host (not a redirect's, not another registry's). Nil pulls anonymously.
	Credential *Credential
}

var _ sandbox.ImageSource = (*Store)(nil)

// pin is a pins/ file: what one sandbox holds.
type pin struct {
	Owner  string   `json:"owner"`
	Ref    string   `json:"ref"`
	Layers []string `json:"layers"` // sha256-HEX names
}

// Get reads ref, pins its layers for owner, and unpacks those the cache lacks, each verified
// against its digest; see sandbox.ImageSource.
func (s *Store) Get(ctx context.Context, ref, owner string) (*sandbox.Image, error) {
	if err := s.init(); err != nil {
		return nil, err
	}
	img, cleanup, err := openImage(ctx, ref, filepath.Join(s.Dir, "tmp"), s.Transport, s.Credential)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	cfg, diffIDs, err := readConfig(img)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", ref, err)
	}
	names := make([]string, len(diffIDs))
	for i, d := range diffIDs {
		names[i] = d.Algorithm + "-" + d.Hex
	}
	if err := s.writePin(pin{Owner: owner, Ref: ref, Layers: names}); err != nil {
		return nil, err
	}
	out := &sandbox.Image{Ref: ref, Config: cfg}
	if digest, err := img.ConfigName(); err == nil {
		out.Digest = digest.String()
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("image %s: layers: %w", ref, err), s.Release(owner))
	}
	for i, l := range layers {
		unpacked, err := s.ensureLayer(diffIDs[i], l)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("image %s: layer %d (%s): %w", ref, i+1, diffIDs[i], err), s.Release(owner))
		}
		if unpacked {
			out.Unpacked++
		}
		out.Layers = append(out.Layers, s.layerDir(names[i]))
	}
	return out, nil
}

// readConfig checks the image's config against its digest and platform and returns what a
// sandbox honours of it, and the layers' uncompressed digests.
func readConfig(img v1.Image) (sandbox.ImageConfig, []v1.Hash, error) {
	raw, err := img.RawConfigFile()
	if err != nil {
		return sandbox.ImageConfig{}, nil, fmt.Errorf("config: %w", err)
	}
	want, err := img.ConfigName()
	if err != nil {
		return sandbox.ImageConfig{}, nil, fmt.Errorf("config digest: %w", err)
	}
	if got := sha256.Sum256(raw); want.Algorithm != "sha256" || want.Hex != hex.EncodeToString(got[:]) {
		return sandbox.ImageConfig{}, nil, fmt.Errorf("config does not match its digest %s", want)
	}
	cf, err := v1.ParseConfigFile(strings.NewReader(string(raw)))
	if err != nil {
		return sandbox.ImageConfig{}, nil, fmt.Errorf("config: %w", err)
	}
	if p := platform(); (cf.OS != "" && cf.OS != p.OS) || (cf.Architecture != "" && cf.Architecture != p.Architecture) {
		return sandbox.ImageConfig{}, nil, fmt.Errorf("the image is for %s/%s, this machine runs %s/%s", cf.OS, cf.Architecture, p.OS, p.Architecture)
	}
	for _, d := range cf.RootFS.DiffIDs {
		if d.Algorithm != "sha256" || len(d.Hex) != 64 || strings.Trim(d.Hex, "0123456789abcdef") != "" {
			return sandbox.ImageConfig{}, nil, fmt.Errorf("layer digest %q: want sha256:<64 hex>", d)
		}
	}
	c := cf.Config
	return sandbox.ImageConfig{Entrypoint: c.Entrypoint, Cmd: c.Cmd, Env: c.Env, User: c.User, WorkingDir: c.WorkingDir}, cf.RootFS.DiffIDs, nil
}

// init creates the cache's directories.
func (s *Store) init() error {
	if s.Dir == "" {
		return errors.New("image cache: no directory")
	}
	for _, d := range []string{s.Dir, filepath.Join(s.Dir, "layers"), filepath.Join(s.Dir, "pins"), filepath.Join(s.Dir, "tmp"), filepath.Join(s.Dir, "locks")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("image cache: %w", err)
		}
	}
	return nil
}

func (s *Store) layerDir(name string) string { return filepath.Join(s.Dir, "layers", name) }

// pinFile is owner's pins/ file.
func (s *Store) pinFile(owner string) string {
	sum := sha256.Sum256([]byte(owner))
	return filepath.Join(s.Dir, "pins", hex.EncodeToString(sum[:12])+".json")
}

// writePin records p under the cache lock, so a prune running now keeps its layers.
func (s *Store) writePin(p pin) error {
	unlock, err := lockFile(filepath.Join(s.Dir, "lock"), true)
	if err != nil {
		return err
	}
	defer unlock()
	data, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode pin: %w", err)
	}
	tmp := s.pinFile(p.Owner) + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("write pin: %w", err)
	}
	if err := os.Rename(tmp, s.pinFile(p.Owner)); err != nil {
		return fmt.Errorf("write pin: %w", err)
	}
	return nil
}

// ensureLayer unpacks layer l (uncompressed digest d) unless the cache has it, and reports
// whether it did. Concurrent callers (any process) wait on the layer's lock: one unpacks.
func (s *Store) ensureLayer(d v1.Hash, l v1.Layer) (bool, error) {
	name := d.Algorithm + "-" + d.Hex
	lock := filepath.Join(s.Dir, "locks", name)
	unlock, err := lockFile(lock, true)
	if err != nil {
		return false, err
	}
	defer unlock()
	// The lock file's modification time is the layer's last use, for Prune.
	now := time.Now()
	if err := os.Chtimes(lock, now, now); err != nil {
		return false, fmt.Errorf("mark layer %s used: %w", name, err)
	}
	if _, err := os.Stat(s.layerDir(name)); err == nil {
		return false, nil
	}
	if err := removeStale(filepath.Join(s.Dir, "tmp"), name+"-"); err != nil {
		return false, err
	}
	tmp, err := os.MkdirTemp(filepath.Join(s.Dir, "tmp"), name+"-")
	if err != nil {
		return false, fmt.Errorf("unpack: %w", err)
	}
	if err := unpackVerified(l, d, tmp); err != nil {
		return false, errors.Join(err, os.RemoveAll(tmp))
	}
	if err := os.Rename(tmp, s.layerDir(name)); err != nil {
		return false, errors.Join(fmt.Errorf("unpack: %w", err), os.RemoveAll(tmp))
	}
	return true, nil
}

// unpackVerified unpacks l's uncompressed stream into dir and checks it against d, to the
// stream's last byte.
func unpackVerified(l v1.Layer, d v1.Hash, dir string) error {
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	rc, err := l.Uncompressed()
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	defer rc.Close()
	h := sha256.New()
	r := io.TeeReader(rc, h)
	if err := unpackLayer(r, dir); err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != d.Hex {
		return fmt.Errorf("content is sha256:%s, not the image's %s: refused", got, d)
	}
	return nil
}

// removeStale removes what a crashed unpack left in tmp under prefix (its lock is held).
func removeStale(tmp, prefix string) error {
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return fmt.Errorf("read %s: %w", tmp, err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			if err := os.RemoveAll(filepath.Join(tmp, e.Name())); err != nil {
				return fmt.Errorf("remove a half-unpacked layer: %w", err)
			}
		}
	}
	return nil
}

// Release drops owner's pin; see sandbox.ImageSource. The layers stay for the next sandbox of
// the image (an `exec --ephemeral --image` per tool call unpacks it once, not every time) until
// a Prune finds them unused.
func (s *Store) Release(owner string) error {
	if s.Dir == "" {
		return nil
	}
	if err := os.Remove(s.pinFile(owner)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("release image pin: %w", err)
	}
	return nil
}

// Prune removes the layers no pin holds that no sandbox was created with for unusedFor (their
// last use is their lock file's modification time, set by every Get), and pins whose owner (a
// state file) is gone, under the cache lock; a layer being unpacked (its lock held) is left
// alone. It returns how many layers it removed.
func (s *Store) Prune(unusedFor time.Duration) (int, error) {
	if _, err := os.Stat(s.Dir); errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err := s.init(); err != nil {
		return 0, err
	}
	unlock, err := lockFile(filepath.Join(s.Dir, "lock"), true)
	if err != nil {
		return 0, err
	}
	defer unlock()
	held, err := s.heldLayers()
	if err != nil {
		return 0, err
	}
	entries, err := os.ReadDir(filepath.Join(s.Dir, "layers"))
	if err != nil {
		return 0, fmt.Errorf("prune: %w", err)
	}
	removed := 0
	for _, e := range entries {
		if slices.Contains(held, e.Name()) {
			continue
		}
		lock := filepath.Join(s.Dir, "locks", e.Name())
		if fi, err := os.Stat(lock); err == nil && time.Since(fi.ModTime()) < unusedFor {
			continue // used lately: kept for the next sandbox of its image
		}
		unlockLayer, err := lockFile(lock, false)
		if err != nil {
			continue // being unpacked or read: a later prune
		}
		err = os.RemoveAll(s.layerDir(e.Name()))
		unlockLayer()
		if err != nil {
			return removed, fmt.Errorf("prune %s: %w", e.Name(), err)
		}
		removed++
	}
	return removed, nil
}

// heldLayers reads every pin and removes those whose owner is gone.
func (s *Store) heldLayers() ([]string, error) {
	dir := filepath.Join(s.Dir, "pins")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read pins: %w", err)
	}
	var held []string
	for _, e := range entries {
		file := filepath.Join(dir, e.Name())
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("read pin: %w", err)
		}
		var p pin
		if err := json.Unmarshal(data, &p); err != nil || !strings.HasSuffix(e.Name(), ".json") {
			continue // a pin being written (.tmp), or garbage: it holds nothing
		}
		if _, err := os.Stat(p.Owner); errors.Is(err, fs.ErrNotExist) {
			_ = os.Remove(file)
			continue
		}
		held = append(held, p.Layers...)
	}
	return held, nil
}

// lockFile takes an exclusive flock on path (created), waiting when wait; the function
// releases it. flock locks belong to the open file, so goroutines and processes exclude
// each other alike.
func lockFile(path string, wait bool) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	how := unix.LOCK_EX
	if !wait {
		how |= unix.LOCK_NB
	}
	for {
		err = unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
