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
