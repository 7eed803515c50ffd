//go:build linux

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The programs the tests run (the airlock binary, the hostile probe, the MCP server, the demo)
// are linked into the repository's git-ignored .cache and kept there between runs: go build
// leaves an output whose build ID matches what it would link as it is, so a warm run links
// nothing (each link took 10-20 s of the critical path on the shared 2 cores). One directory
// per checkout: worktrees share .cache, not their sources. (test/cachedbuild keys a separate
// module's binary on a hash of its sources; for this module's packages go build's build ID
// does that.)

// builds memoizes cachedBinary per package and environment, within this test process.
var builds sync.Map // key string -> *cachedBuild

type cachedBuild struct {
	once sync.Once
	path string
	err  error
}

// cachedBinary returns the path in the cache of the module's main package pkg ("./cmd/airlock")
// built with env added to this process's environment ("CGO_ENABLED=0"), building or relinking
// it the first time this process asks when its sources changed. A caller that keeps the
// program for later links it out (linkBinary): a later run's build replaces the cached file,
// never the inode the link holds.
func cachedBinary(pkg string, env ...string) (string, error) {
	key := pkg + "\x00" + strings.Join(env, "\x00")
	v, _ := builds.LoadOrStore(key, &cachedBuild{})
	b := v.(*cachedBuild)
	b.once.Do(func() { b.path, b.err = buildInCache(pkg, env) })
	return b.path, b.err
}

// buildInCache runs go build for pkg into the checkout's cache directory, holding a lock on
// the output so parallel test processes of one checkout build it once.
func buildInCache(pkg string, env []string) (string, error) {
	root, err := filepath.Abs(filepath.Join("..", "..")) // the test runs in test/e2e
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(root + "\x00" + strings.Join(env, "\x00")))
	dir := filepath.Join(root, ".cache", "e2e-bin-"+hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(dir, filepath.Base(pkg))
	lock, err := os.OpenFile(out+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close() // releases the flock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return out, nil
}

// linkBinary makes dst the cached binary src: a hard link (go build replaces the cached file by
// a new one, so dst keeps this build), or a copy across filesystems. A dst already there is
// removed first, never written through: it may be a link to src.
func linkBinary(src, dst string) error {
	if err := os.Remove(dst); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// prefetch holds the background builds prefetchBinaries started; TestMain waits for them.
var prefetch struct {
	once sync.Once
	wg   sync.WaitGroup
}

// prefetchBinaries builds, in the background and once, the programs later tests link (the
// hostile probe, the MCP server, the demo), so that with a cold cache their links overlap the
// tests before them instead of lengthening the tests that need them. The parallel sandbox
// tests start it: not TestSandboxLoop, which counts this process's descriptors (a build's
// pipes would count).
func prefetchBinaries() {
	prefetch.once.Do(func() {
		for _, b := range [][]string{{"./test/hostileprobe", "CGO_ENABLED=0"}, {"./test/mcpserver", "CGO_ENABLED=0"}, {"./tools/demo"}} {
			prefetch.wg.Add(1)
			go func() {
				defer prefetch.wg.Done()
				_, _ = cachedBinary(b[0], b[1:]...) // an error is the caller's again, from the memo
			}()
		}
	})
}
