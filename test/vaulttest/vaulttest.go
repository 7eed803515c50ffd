// Package vaulttest starts a real, in-process Vault test cluster for airlock's tests. The
// Vault server code (BUSL-1.1) lives in the separate module in ./server and is never linked
// into airlock: this package builds that module's binary once into the repository's .cache/
// directory (rebuilt only when its sources change) and runs it as a child process. It
// talks to Vault over plain HTTP, so it does not import vault/api either.
package vaulttest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/test/cachedbuild"
)

// Server is a running Vault test cluster (one core). Address, CACertFile and RootToken are
// what a client needs.
type Server struct {
	Address    string
	CACertFile string
	CACertPEM  []byte
	RootToken  string

	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *bytes.Buffer
	http   *http.Client
	once   sync.Once
	exited chan struct{}
}

type info struct {
	Addr       string `json:"addr"`
	CACertPEM  string `json:"ca_cert_pem"`
	CACertFile string `json:"ca_cert_file"`
	RootToken  string `json:"root_token"`
}

// Options says where the server runs. The zero value runs it in the test's own network
// namespace.
type Options struct {
	// Command makes the command that runs the binary (e.g. inside a network namespace with
	// testnet's Netns.Command). Nil means exec.Command.
	Command func(bin string) *exec.Cmd
	// DialContext dials the server for Do (e.g. Netns.DialContext). Nil means the default
	// dialer.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Start builds (once) and starts the Vault test server; it is stopped when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith is Start with Options.
func StartWith(t testing.TB, o Options) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatalf("build vault test server: %v", err)
	}
	transit, err := TransitPlugin()
	if err != nil {
		t.Fatalf("build vault transit plugin: %v", err)
	}
	cmd := exec.Command(bin)
	if o.Command != nil {
		cmd = o.Command(bin)
	}
	cmd.Args = append(cmd.Args, "-transit-plugin", transit)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{cmd: cmd, stdin: stdin, stderr: &bytes.Buffer{}, exited: make(chan struct{})}
	cmd.Stderr = &lockedWriter{w: s.stderr}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start vault test server: %v", err)
	}
	go func() { _ = cmd.Wait(); close(s.exited) }()
	t.Cleanup(s.Stop)
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(90 * time.Second):
	}
	var in info
	if err := json.Unmarshal([]byte(line), &in); err != nil || in.Addr == "" {
		s.Stop()
		t.Fatalf("vault test server did not start (%v); stderr:\n%s", err, s.Stderr())
	}
	s.Address, s.RootToken, s.CACertPEM = in.Addr, in.RootToken, []byte(in.CACertPEM)
	s.CACertFile = filepath.Join(t.TempDir(), "vault-ca.pem")
	if err := os.WriteFile(s.CACertFile, s.CACertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.CACertPEM)
	s.http = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DialContext: o.DialContext}}
	return s
}

// Stop ends the server gracefully (closes its stdin) and waits for it. Idempotent.
func (s *Server) Stop() {
	s.once.Do(func() {
		_ = s.stdin.Close()
		select {
		case <-s.exited:
		case <-time.After(20 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
	})
}

// Kill ends the server at once, as a crash or a network partition would look to a client.
func (s *Server) Kill() {
	s.once.Do(func() {
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
		<-s.exited
	})
}

// Stderr returns what the server logged.
func (s *Server) Stderr() string {
	return s.stderr.String()
}

// Do calls the Vault HTTP API with the root token and returns the decoded JSON answer (nil
// for 204). A status >= 400 is an error holding Vault's errors.
func (s *Server) Do(method, path string, body any) (map[string]any, error) {
	return s.DoToken(s.RootToken, method, path, body)
}

// DoToken is Do with another token.
func (s *Server) DoToken(token, method, path string, body any) (map[string]any, error) {
	var rb io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rb = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.Address+"/v1/"+strings.TrimPrefix(path, "/"), rb)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("X-Vault-Token", token)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 400 {
		return nil, fmt.Errorf("vault %s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if len(b) == 0 {
		return nil, nil
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("vault %s %s: decode: %w", method, path, err)
	}
	return out, nil
}

// Must is Do that fails the test on error.
func (s *Server) Must(t testing.TB, method, path string, body any) map[string]any {
	t.Helper()
	out, err := s.Do(method, path, body)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// PutKV writes data to the KV v2 mount "secret" at path (without "data/") and returns the
// new version.
func (s *Server) PutKV(t testing.TB, path string, data map[string]any) int {
	t.Helper()
	out := s.Must(t, "POST", "secret/data/"+path, map[string]any{"data": data})
	v, _ := out["data"].(map[string]any)["version"].(float64)
	return int(v)
}

// AppRole creates an AppRole role with the given token TTLs (seconds) and a policy, and
// returns its role_id and a fresh secret_id.
func (s *Server) AppRole(t testing.TB, role string, ttl, maxTTL int, policies ...string) (roleID, secretID string) {
	t.Helper()
	s.Must(t, "POST", "auth/approle/role/"+role, map[string]any{
		"token_ttl": ttl, "token_max_ttl": maxTTL, "token_policies": policies, "secret_id_ttl": 0,
	})
	out := s.Must(t, "GET", "auth/approle/role/"+role+"/role-id", nil)
	roleID, _ = out["data"].(map[string]any)["role_id"].(string)
	out = s.Must(t, "POST", "auth/approle/role/"+role+"/secret-id", map[string]any{})
	secretID, _ = out["data"].(map[string]any)["secret_id"].(string)
	if roleID == "" || secretID == "" {
		t.Fatalf("approle %s: no role_id/secret_id", role)
	}
	return roleID, secretID
}

// Policy writes a Vault ACL policy.
func (s *Server) Policy(t testing.TB, name, hcl string) {
	t.Helper()
	s.Must(t, "PUT", "sys/policies/acl/"+name, map[string]any{"policy": hcl})
}

// TransitMissing says why the server has no Transit engine at transit/, or "" when it has
// one. The server mounts Vault's Transit engine as an external plugin built from ./transit
// (server/README.md); tests that need Transit fail with this reason should it be missing.
func (s *Server) TransitMissing(t testing.TB) string {
	t.Helper()
	mounts, err := s.Do("GET", "sys/mounts", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := mounts["transit/"]; ok {
		return ""
	}
	return "the Vault test server has no Transit engine at transit/ (test/vaulttest/server/README.md)"
}

// LeaseStats returns how many leases the test engine at dyn/ issued, renewed and revoked.
func (s *Server) LeaseStats(t testing.TB) (issued, renewed, revoked int) {
	t.Helper()
	d := s.Must(t, "GET", "dyn/stats", nil)["data"].(map[string]any)
	return int(d["issued"].(float64)), int(d["renewed"].(float64)), int(d["revoked"].(float64))
}

// LeaseAlive reports whether Vault still knows the lease.
func (s *Server) LeaseAlive(t testing.TB, id string) bool {
	t.Helper()
	_, err := s.Do("PUT", "sys/leases/lookup", map[string]any{"lease_id": id})
	return err == nil
}

// Leases lists the lease IDs under prefix (e.g. "dyn/creds/").
func (s *Server) Leases(t testing.TB, prefix string) []string {
	t.Helper()
	out, err := s.Do("LIST", "sys/leases/lookup/"+prefix, nil)
	if err != nil {
		return nil // 404: none
	}
	keys, _ := out["data"].(map[string]any)["keys"].([]any)
	var ids []string
	for _, k := range keys {
		ids = append(ids, prefix+k.(string))
	}
	return ids
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

// Binary returns the path of the server binary, building it into <repo>/.cache/ when no
// binary for the server module's sources and the Go version exists (package cachedbuild).
func Binary() (string, error) {
	dir, err := serverDir()
	if err != nil {
		return "", err
	}
	return cachedbuild.Binary(cachedbuild.Spec{Name: "vaulttest-server", Dir: dir, Package: ".", Timeout: 60 * time.Minute})
}

// TransitPlugin returns the path of Vault's Transit engine built as an external plugin from
// the module in ./transit (Vault v1.21.4 with the sdk its Transit needs, which its core does
// not compile with), building it into <repo>/.cache/ as Binary does.
func TransitPlugin() (string, error) {
	dir, err := moduleDir("transit")
	if err != nil {
		return "", err
	}
	return cachedbuild.Binary(cachedbuild.Spec{Name: "vaulttest-transit", Dir: dir,
		Package: "github.com/hashicorp/vault/builtin/logical/transit/cmd/transit", Timeout: 60 * time.Minute})
}

// serverDir is this package's server/ directory.
func serverDir() (string, error) { return moduleDir("server") }

// moduleDir is a directory of this package's (a module of its own).
func moduleDir(name string) (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot locate the vaulttest package")
	}
	return filepath.Join(filepath.Dir(file), name), nil
}
