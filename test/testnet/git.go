//go:build linux

package testnet

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/http/cgi"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The test git server's repository: one commit holding one file.
const (
	// GitRepoPath is the repository's path on the server (https://NAME/repo.git).
	GitRepoPath = "/repo.git"
	// GitFile and GitFileContent are the file the repository's only commit holds.
	GitFile        = "HELLO.txt"
	GitFileContent = "hello from the airlock test git server\n"
)

// GitServer is an HTTPS git server in the upstream namespace: a bare repository created with
// the real git, served by `git http-backend` (smart HTTP, fetch and push) through
// net/http/cgi, with a certificate from the world's test CA, and a small API under /api/ (GET
// answers 200, POST 201, both with a JSON body) playing a git host's. It records every
// request it receives.
type GitServer struct {
	// Addr is the server's address; Name resolves to it in the world's DNS.
	Addr netip.Addr
	Name string
	// URL is the repository's clone URL on port 443, https://Name/repo.git.
	URL string
	// Commit is the id of the repository's only commit (on branch main).
	Commit string

	gitBin string // the git binary
	bare   string // the bare repository's directory

	// mu guards reqs.
	mu   sync.Mutex
	reqs []UpstreamRequest
}

// StartGitServer creates the repository, gives the upstream namespace addr, makes name resolve
// to it and serves HTTPS on GitPorts until t ends. It needs the git binary.
func (w *World) StartGitServer(t testing.TB, addr netip.Addr, name string) *GitServer {
	t.Helper()
	gitBin, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("testnet: git server: %v", err)
	}
	dir, err := os.MkdirTemp(w.Dir, "git-")
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "srv")
	commit, err := makeGitRepo(gitBin, dir, filepath.Join(root, strings.TrimPrefix(GitRepoPath, "/")))
	if err != nil {
		t.Fatalf("testnet: git server: %v", err)
	}
	g := &GitServer{Addr: addr, Name: name, URL: "https://" + name + GitRepoPath, Commit: commit,
		gitBin: gitBin, bare: filepath.Join(root, strings.TrimPrefix(GitRepoPath, "/"))}

	backend := &cgi.Handler{
		Path: gitBin,
		Args: []string{"http-backend"},
		Dir:  root,
		Env: []string{
			"GIT_PROJECT_ROOT=" + root,
			"GIT_HTTP_EXPORT_ALL=1",
			"HOME=" + dir,
			"GIT_CONFIG_NOSYSTEM=1",
		},
	}
	w.AddUpstreamAddr(t, addr)
	w.DNS.Set(name, DefaultTTL, addr)
	for _, port := range GitPorts {
		g.serve(t, w, backend, port)
	}
	return g
}

// GitPorts are the ports the git server serves HTTPS on: 443, and 8443 for tests that must
// tell a client using the explicit proxy from one caught by a transparent redirect of 443.
var GitPorts = []uint16{443, 8443}

// URLAt is the clone URL on port.
func (g *GitServer) URLAt(port uint16) string {
	return fmt.Sprintf("https://%s:%d%s", g.Name, port, GitRepoPath)
}

func (g *GitServer) serve(t testing.TB, w *World, backend http.Handler, port uint16) {
	l, err := w.Upstream.Listen("tcp", netip.AddrPortFrom(g.Addr, port).String())
	if err != nil {
		t.Fatalf("testnet: git server: listen: %v", err)
	}
	l = tls.NewListener(l, w.CA.ServerConfig(g.Addr.String()))
	mux := http.NewServeMux()
	mux.Handle("/", backend)
	mux.HandleFunc("/api/", gitAPI)
	srv := &http.Server{Handler: g.record(int(port), mux), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("git server: serve: %v", err)
		}
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			srv.Close()
		}
		<-done
	})
}

// gitAPI plays a git host's API: GET answers 200, POST 201, anything else 405.
func gitAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch r.Method {
	case http.MethodGet:
		fmt.Fprintf(w, "{\"path\": %q}\n", r.URL.Path)
	case http.MethodPost:
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "{\"created\": %q}\n", r.URL.Path)
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

// Ref returns the commit the repository's ref name (e.g. refs/heads/main) points to, or an
// error when there is no such ref.
func (g *GitServer) Ref(name string) (string, error) {
	cmd := exec.Command(g.gitBin, "--git-dir", g.bare, "rev-parse", "--verify", "--quiet", name)
	cmd.Env = []string{"GIT_CONFIG_NOSYSTEM=1", "HOME=/nonexistent"}
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git server: ref %s: %w", name, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Requests returns the requests the server has received, oldest first.
func (g *GitServer) Requests() []UpstreamRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]UpstreamRequest(nil), g.reqs...)
}

func (g *GitServer) record(port int, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := UpstreamRequest{Port: port, TLS: r.TLS != nil, Host: r.Host, Method: r.Method,
			Path: r.URL.RequestURI(), Header: r.Header.Clone(), Remote: r.RemoteAddr}
		if r.TLS != nil {
			rec.SNI = r.TLS.ServerName
		}
		g.mu.Lock()
		g.reqs = append(g.reqs, rec)
		g.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

// makeGitRepo creates a work tree in dir/work with one commit holding GitFile, clones it bare
// to bare, and returns the commit id.
func makeGitRepo(gitBin, dir, bare string) (string, error) {
	work := filepath.Join(dir, "work")
	env := []string{
		"HOME=" + dir, "GIT_CONFIG_NOSYSTEM=1", "PATH=" + os.Getenv("PATH"),
		"GIT_AUTHOR_NAME=airlock tests", "GIT_AUTHOR_EMAIL=tests@airlock.test",
		"GIT_COMMITTER_NAME=airlock tests", "GIT_COMMITTER_EMAIL=tests@airlock.test",
		"GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z",
	}
	run := func(wd string, args ...string) (string, error) {
		cmd := exec.Command(gitBin, args...)
		cmd.Dir, cmd.Env = wd, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return strings.TrimSpace(string(out)), nil
	}
	if _, err := run(dir, "init", "--quiet", "--initial-branch=main", work); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(work, GitFile), []byte(GitFileContent), 0o644); err != nil {
		return "", err
	}
	if _, err := run(work, "add", GitFile); err != nil {
		return "", err
	}
	if _, err := run(work, "commit", "--quiet", "-m", "the test repository's only commit"); err != nil {
		return "", err
	}
	commit, err := run(work, "rev-parse", "HEAD")
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(bare), 0o755); err != nil {
		return "", err
	}
	if _, err := run(dir, "clone", "--quiet", "--bare", work, bare); err != nil {
		return "", err
	}
	// git http-backend refuses pushes from unauthenticated clients unless the repository
	// says otherwise: it is who may push through airlock that the tests decide.
	if _, err := run(dir, "--git-dir", bare, "config", "http.receivepack", "true"); err != nil {
		return "", err
	}
	return commit, nil
}
