// Package s3test runs a real S3-compatible server for airlock's tests: versitygw (Apache-2.0,
// github.com/versity/versitygw) with its posix backend, which keeps buckets as directories,
// object versions in a versioning directory and Object Lock settings in extended attributes.
// Its code lives in the separate module ./server and is never linked into airlock: Binary
// builds that module's versitygw command once into the repository's .cache/ (keyed on the
// module's go.mod, go.sum and the Go version) and Start runs it as a child process on a
// loopback port. The tests talk to it with real S3 clients; nothing stands in for it.
package s3test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/test/cachedbuild"
)

// Version is the versitygw release ./server pins (its go.mod says the same).
const Version = "v1.8.0"

// Server is a running versitygw. Endpoint (http://127.0.0.1:PORT), AccessKey and SecretKey
// are what an S3 client needs; its region is Region.
type Server struct {
	Endpoint  string
	Addr      string
	AccessKey string
	SecretKey string
	// Root is the posix backend's directory (buckets are its subdirectories).
	Root string

	args   []string
	bin    string
	mk     func(string, ...string) *exec.Cmd
	http   *http.Client
	mu     sync.Mutex // guards cmd, out and exited
	cmd    *exec.Cmd
	out    *lockedWriter // the server's stdout and stderr
	exited chan struct{}
}

// Region is the region versitygw answers for (its default).
const Region = "us-east-1"

// Options says how the server runs. The zero value runs it in the test's own network
// namespace on a free loopback port.
type Options struct {
	// Command makes the command that runs the binary (e.g. inside a network namespace).
	// Nil means exec.Command.
	Command func(bin string, args ...string) *exec.Cmd
	// Addr is the listen address; empty means a free 127.0.0.1 port.
	Addr string
	// DialContext reaches the server (e.g. Netns.DialContext when Command runs it in a
	// network namespace); nil means the default dialer.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Start builds (once) and starts versitygw; it is stopped when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith is Start with Options.
func StartWith(t testing.TB, o Options) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatalf("build S3 test server: %v", err)
	}
	addr := o.Addr
	if addr == "" {
		addr = freePort(t)
	}
	dir := t.TempDir()
	s := &Server{Endpoint: "http://" + addr, Addr: addr, AccessKey: "airlock-test-" + randHex(4),
		SecretKey: randHex(20), Root: filepath.Join(dir, "data"), bin: bin}
	for _, d := range []string{s.Root, filepath.Join(dir, "versions")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	s.args = []string{"--access", s.AccessKey, "--secret", s.SecretKey, "--port", addr, "--health", "/health",
		"posix", "--versioning-dir", filepath.Join(dir, "versions"), s.Root}
	s.mk = o.Command
	if s.mk == nil {
		s.mk = exec.Command
	}
	s.http = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: o.DialContext}}
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// start runs the binary and waits until its health endpoint answers.
func (s *Server) start() error {
	cmd := s.mk(s.bin, s.args...)
	out := &lockedWriter{w: &bytes.Buffer{}}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start S3 test server: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.out, s.exited = cmd, out, exited
	s.mu.Unlock()
	// The server prints nothing machine-readable when it listens: ask its health endpoint
	// until it answers (or the process exits, or a minute passes).
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := s.http.Get(s.Endpoint + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("S3 test server exited at start:\n%s", s.Stderr())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("S3 test server did not answer on %s within a minute:\n%s", s.Endpoint, s.Stderr())
		}
	}
}

// Stop ends the server (SIGTERM, then SIGKILL after 10 s) and waits for it. Idempotent.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// Restart starts the server again after Stop, on the same address and data: S3 comes back.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
}

// Stderr returns what the server printed.
func (s *Server) Stderr() string {
	s.mu.Lock()
	out := s.out
	s.mu.Unlock()
	if out == nil {
		return ""
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	return out.w.String()
}

func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// lockedWriter serialises writes to a buffer.
type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Binary returns the path of the versitygw binary, building it into <repo>/.cache/ when no
// binary for the server module's sources and the Go version exists (package cachedbuild).
func Binary() (string, error) {
	dir, err := serverDir()
	if err != nil {
		return "", err
	}
	return cachedbuild.Binary(cachedbuild.Spec{
		Name: "s3test-versitygw", Dir: dir, Package: "github.com/versity/versitygw/cmd/versitygw",
		BuildFlags: []string{"-trimpath", "-ldflags", "-s -w"}, Env: []string{"CGO_ENABLED=0"},
		Timeout: 30 * time.Minute,
	})
}

// serverDir is this package's server/ directory.
func serverDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot locate the s3test package")
	}
	return filepath.Join(filepath.Dir(file), "server"), nil
}
