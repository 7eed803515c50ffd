// Package cachedbuild builds a test server from a Go module of its own into the repository's
// git-ignored .cache directory, once per version of that module's sources (and of Go), under a
// file lock so that parallel test packages never build it twice. The Vault and S3 test servers
// use it; older builds of the same server are removed once a newer one is in place.
package cachedbuild

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Spec says what to build and where its module is.
type Spec struct {
	// Name prefixes the binary's file name in .cache (NAME-HASH) and names its lock file.
	Name string
	// Dir is the module directory (go.mod, go.sum and its Go files); .cache is three levels up
	// (test/PKG/server → the repository root).
	Dir string
	// Package is what `go build` builds in Dir: "." or an import path.
	Package string
	// BuildFlags are more `go build` flags (e.g. -trimpath, -ldflags); Env more environment.
	BuildFlags, Env []string
	// Timeout bounds the build (a cold one can take many minutes on 2 cores).
	Timeout time.Duration
}

// Binary returns the path of s's binary, building it when no binary for the current sources
// exists.
func Binary(s Spec) (string, error) {
	sum, err := SourceHash(s.Dir)
	if err != nil {
		return "", err
	}
	cacheDir := filepath.Join(s.Dir, "..", "..", "..", ".cache")
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("create %s: %w", cacheDir, err)
	}
	bin := filepath.Join(cacheDir, s.Name+"-"+sum[:16])
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	lock, err := os.OpenFile(filepath.Join(cacheDir, s.Name+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock: %w", err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := build(s, bin); err != nil {
		return "", err
	}
	// Binaries of older sources are dead weight (up to 150 MB each).
	old, _ := filepath.Glob(filepath.Join(cacheDir, s.Name+"-*"))
	for _, o := range old {
		if o != bin && !strings.HasSuffix(o, ".lock") {
			_ = os.Remove(o)
		}
	}
	return bin, nil
}

// build runs `go build` of s into bin, through a temporary file renamed into place, so that a
// crash never leaves a half binary under bin's name.
func build(s Spec, bin string) error {
	timeout := s.Timeout
	if timeout == 0 {
		timeout = 60 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tmp := bin + ".tmp"
	args := append(append([]string{"build"}, s.BuildFlags...), "-o", tmp, s.Package)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = s.Dir
	cmd.Env = append(append(os.Environ(), "GOFLAGS=-mod=readonly"), s.Env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build in %s: %w\n%s", s.Dir, err, out)
	}
	return os.Rename(tmp, bin)
}

// SourceHash hashes the module's go.mod, go.sum and Go files in dir, and the Go version, whose
// change also needs a rebuild.
func SourceHash(dir string) (string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return "", err
	}
	files = append(files, filepath.Join(dir, "go.mod"), filepath.Join(dir, "go.sum"))
	sort.Strings(files)
	h := sha256.New()
	h.Write([]byte(runtime.Version()))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", filepath.Base(f), len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
