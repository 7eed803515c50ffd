package imagetest

import (
	"crypto/sha256"
	"encoding/hex"
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
// return at once. Its config: PATH and Cmd [bash].
func Debian(t testing.TB) (layoutDir, ociArchive string) {
	t.Helper()
	version, err := exec.Command("mmdebstrap", "--version").Output()
	if err != nil {
		t.Fatalf("mmdebstrap (apt-get install mmdebstrap): %v", err)
	}
	sum := sha256.Sum256([]byte(strings.Join([]string{debianSuite, debianVariant, debianMirror, runtime.GOARCH, strings.TrimSpace(string(version)), debianFormat}, "\n")))
	cache := cacheDir(t)
	dir := filepath.Join(cache, "debian-image-"+hex.EncodeToString(sum[:8]))
	layoutDir, ociArchive = filepath.Join(dir, "layout"), filepath.Join(dir, "oci.tar")
	unlock := lock(t, filepath.Join(cache, "debian-image.lock"))
	defer unlock()
	if _, err := os.Stat(dir); err == nil {
		return layoutDir, ociArchive
	}
	tmp, err := os.MkdirTemp(cache, "debian-image-tmp-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	began := time.Now()
	rootfs := filepath.Join(tmp, "rootfs.tar")
	cmd := exec.Command("mmdebstrap", "--quiet", "--variant="+debianVariant, "--mode=root", "--format=tar", debianSuite, rootfs, debianMirror)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mmdebstrap: %v\n%s", err, out)
	}
	layer, err := tarball.LayerFromFile(rootfs)
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	img = withConfig(t, img, v1.Config{Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, Cmd: []string{"bash"}})
	WriteLayout(t, img, filepath.Join(tmp, "layout"))
	if err := tarDir(filepath.Join(tmp, "layout"), filepath.Join(tmp, "oci.tar")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(rootfs); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		t.Fatal(err)
	}
	t.Logf("built the Debian image (mmdebstrap %s %s) in %s, cached in %s", debianVariant, debianSuite, time.Since(began).Round(time.Second), dir)
	return layoutDir, ociArchive
}

// cacheDir is the repository's git-ignored .cache.
func cacheDir(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("imagetest: no source path")
	}
	dir := filepath.Join(filepath.Dir(file), "..", "..", ".cache")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// lock takes an exclusive flock on path: parallel test packages build the image once.
func lock(t testing.TB, path string) func() {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(fmt.Errorf("lock %s: %w", path, err))
	}
	return func() { f.Close() }
}
