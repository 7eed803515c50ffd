package imagetest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The Debian image's inputs: what mmdebstrap builds, and from where (the cache key).
const (
	debianSuite   = "bookworm"
	debianVariant = "minbase"
	debianMirror  = "http://deb.debian.org/debian"
	// debianFormat changes when what this file makes of the root filesystem changes.
	debianFormat = "1"
)

// Debian is a real Debian 12 (minbase) image, built with mmdebstrap from the Debian archive
// the first time and cached in the repository's .cache under a key of its inputs (suite,
// variant, mirror, architecture, mmdebstrap's version): its OCI layout directory and an OCI
// archive of it. A cold build takes about 100 s on 2 cores (network bound); later calls
// return at once. Its config: PATH and Cmd [bash]. BuildDebian without a test: `make
// debianimage` builds it before the tests.
func Debian(t testing.TB) (layoutDir, ociArchive string) {
	t.Helper()
	layoutDir, ociArchive, built, err := BuildDebian()
	if err != nil {
		t.Fatal(err)
	}
	if built > 0 {
		t.Logf("built the Debian image (mmdebstrap %s %s) in %s, cached in %s", debianVariant, debianSuite, built.Round(time.Second), filepath.Dir(layoutDir))
	}
	return layoutDir, ociArchive
}

// BuildDebian is Debian for a program: it returns the cached image's paths, and how long the
// build took when this call built it (0 when it was cached).
func BuildDebian() (layoutDir, ociArchive string, built time.Duration, err error) {
	version, err := exec.Command("mmdebstrap", "--version").Output()
	if err != nil {
		return "", "", 0, fmt.Errorf("mmdebstrap (apt-get install mmdebstrap): %w", err)
	}
	sum := sha256.Sum256([]byte(strings.Join([]string{debianSuite, debianVariant, debianMirror, runtime.GOARCH, strings.TrimSpace(string(version)), debianFormat}, "\n")))
	cache, err := cacheDir()
	if err != nil {
		return "", "", 0, fmt.Errorf("debian image: cache: %w", err)
	}
	dir := filepath.Join(cache, "debian-image-"+hex.EncodeToString(sum[:8]))
	layoutDir, ociArchive = filepath.Join(dir, "layout"), filepath.Join(dir, "oci.tar")
	unlock, err := lock(filepath.Join(cache, "debian-image.lock"))
	if err != nil {
		return "", "", 0, fmt.Errorf("debian image: %w", err)
	}
	defer unlock()
	if _, err := os.Stat(dir); err == nil {
		return layoutDir, ociArchive, 0, nil
	}
	began := time.Now()
	if err := buildDebian(cache, dir); err != nil {
		return "", "", 0, err
	}
	return layoutDir, ociArchive, time.Since(began), nil
}

// buildDebian runs mmdebstrap and writes the image's layout and archive into dir, by way of
// a temporary directory in cache renamed at the end.
func buildDebian(cache, dir string) error {
	tmp, err := os.MkdirTemp(cache, "debian-image-tmp-")
	if err != nil {
		return fmt.Errorf("debian image: %w", err)
	}
	defer os.RemoveAll(tmp)
	rootfs := filepath.Join(tmp, "rootfs.tar")
	cmd := exec.Command("mmdebstrap", "--quiet", "--variant="+debianVariant, "--mode=root", "--format=tar", debianSuite, rootfs, debianMirror)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mmdebstrap: %w\n%s", err, out)
	}
	layer, err := tarball.LayerFromFile(rootfs)
	if err != nil {
		return fmt.Errorf("debian image: the root filesystem as a layer: %w", err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return fmt.Errorf("debian image: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("debian image: config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", goarch()
	cf.Config = v1.Config{Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, Cmd: []string{"bash"}}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return fmt.Errorf("debian image: config: %w", err)
	}
	p, err := layout.Write(filepath.Join(tmp, "layout"), empty.Index)
	if err == nil {
		err = p.AppendImage(img)
	}
	if err != nil {
		return fmt.Errorf("debian image: OCI layout: %w", err)
	}
	if err := tarDir(filepath.Join(tmp, "layout"), filepath.Join(tmp, "oci.tar")); err != nil {
		return fmt.Errorf("debian image: OCI archive: %w", err)
	}
	if err := os.Remove(rootfs); err != nil {
		return fmt.Errorf("debian image: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("debian image: %w", err)
	}
	return nil
}

// cacheDir is the repository's git-ignored .cache.
func cacheDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("imagetest: no source path")
	}
	dir := filepath.Join(filepath.Dir(file), "..", "..", ".cache")
	return dir, os.MkdirAll(dir, 0o755)
}

// lock takes an exclusive flock on path: parallel test packages build the image once.
func lock(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
