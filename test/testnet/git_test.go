//go:build linux

package testnet_test

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/test/privtest"
	"github.com/airlock-dev/airlock/test/testnet"
)

// The real git client clones the test repository over HTTPS from inside the sidecar
// namespace, trusting the world's CA, and the server records the requests.
func TestGitServerClone(t *testing.T) {
	privtest.Require(t, "git")
	t.Parallel()
	w := testnet.NewWorld(t)
	g := w.StartGitServer(t, netip.MustParseAddr("198.18.0.41"), "git.test")
	dst := filepath.Join(w.Dir, "clone")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := w.Sidecar.Command(ctx, "git",
		"-c", "http.sslCAInfo="+w.CA.File,
		"-c", "http.curloptResolve=git.test:443:198.18.0.41",
		"-c", "http.extraHeader=X-Test: seen",
		"clone", "--quiet", g.URL, dst)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + w.Dir, "GIT_CONFIG_NOSYSTEM=1"}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v: %s", err, out)
	}
	data, err := os.ReadFile(filepath.Join(dst, testnet.GitFile))
	if err != nil || string(data) != testnet.GitFileContent {
		t.Fatalf("cloned %s: %q, %v", testnet.GitFile, data, err)
	}
	reqs := g.Requests()
	if len(reqs) == 0 {
		t.Fatal("the git server recorded no request")
	}
	for _, r := range reqs {
		if !strings.HasPrefix(r.Path, testnet.GitRepoPath+"/") || r.Header.Get("X-Test") != "seen" || r.SNI != "git.test" {
			t.Errorf("recorded request %+v", r)
		}
	}
}

// The real git client pushes a commit over SSH and over HTTPS from the sidecar namespace; the
// server's refs then hold it, and a command other than git's two is refused.
func TestGitServerPush(t *testing.T) {
	privtest.Require(t, "git", "ssh")
	t.Parallel()
	w := testnet.NewWorld(t)
	g := w.StartGitServer(t, netip.MustParseAddr("198.18.0.41"), "git.test")
	s := w.StartGitSSHServer(t, g, netip.MustParseAddr("198.18.0.47"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dst := filepath.Join(w.Dir, "clone")
	git := func(args ...string) string {
		t.Helper()
		cmd := w.Sidecar.Command(ctx, "git", append([]string{
			"-c", "http.sslCAInfo=" + w.CA.File, "-c", "http.curloptResolve=git.test:443:198.18.0.41",
			"-c", "user.name=t", "-c", "user.email=t@airlock.test"}, args...)...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + w.Dir, "GIT_CONFIG_NOSYSTEM=1",
			"GIT_SSH_COMMAND=ssh -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("clone", "--quiet", s.URL, dst)
	git("-C", dst, "commit", "--quiet", "--allow-empty", "-m", "pushed")
	commit := git("-C", dst, "rev-parse", "HEAD")
	git("-C", dst, "push", "--quiet", s.URL, "HEAD:refs/heads/over-ssh")
	git("-C", dst, "push", "--quiet", g.URL, "HEAD:refs/heads/over-https")
	for _, ref := range []string{"refs/heads/over-ssh", "refs/heads/over-https"} {
		if got, err := g.Ref(ref); err != nil || got != commit {
			t.Errorf("server's %s = %q, %v; want %s", ref, got, err, commit)
		}
	}
	if _, err := g.Ref("refs/heads/absent"); err == nil {
		t.Error("Ref of a missing ref: no error")
	}
	want := []string{"git-upload-pack '/repo.git'", "git-receive-pack '/repo.git'"}
	if got := s.Execs(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("SSH commands run: %q, want %q", got, want)
	}
	cmd := w.Sidecar.Command(ctx, "ssh", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-o", "BatchMode=yes", "-o", "LogLevel=ERROR", "git@198.18.0.47", "cat /etc/passwd")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "only git-upload-pack or git-receive-pack") {
		t.Errorf("ssh cat /etc/passwd: %v: %s; want it refused", err, out)
	}
}
