//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/test/privtest"
	"github.com/airlock-dev/airlock/test/testnet"
)

// sbGitSSHAddr is the SSH git server's address, reachable as raw TCP on port 22 only.
const sbGitSSHAddr = "198.18.0.47"

// sbIdentityGitPolicy is issue 34's acceptance: in one sandbox, reviewer may read the git
// host's API and fetch over HTTPS (GET, and the POST of git-upload-pack that a fetch makes)
// but not POST to the API, push over HTTPS (git-receive-pack) or reach the SSH host at all;
// author may do all of it, its raw TCP rule its own, inside the sandbox's.
const sbIdentityGitPolicy = `apiVersion: airlock/v1
kind: EgressPolicy
metadata:
  name: git-identities
spec:
  egress:
    - name: git
      hosts: ["git.test"]
      ports: [8443]
      http:
        - methods: [GET, POST]
    - name: git-ssh
      cidrs: ["` + sbGitSSHAddr + `/32"]
      ports: [22]
      protocol: tcp
  identities:
    reviewer:
      egress:
        - name: git-read
          hosts: ["git.test"]
          ports: [8443]
          http:
            - methods: [GET]
            - methods: [POST]
              paths: ["/repo.git/git-upload-pack"]
    author:
      egress:
        - name: git-write
          hosts: ["git.test"]
          ports: [8443]
          http:
            - methods: [GET, POST]
        - name: git-ssh
          cidrs: ["` + sbGitSSHAddr + `/32"]
          ports: [22]
          protocol: tcp
`

// gitSSH is how git reaches the SSH server: OpenSSH's client, no host key check (the server's
// key is made per test run), never a prompt.
const gitSSH = `GIT_SSH_COMMAND='ssh -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR -o ConnectTimeout=20'`

// TestSandboxIdentitiesGit runs real git and curl as reviewer and author in one sandbox, on
// runc and crun, against a real git server (smart HTTP through the proxy, SSH as raw TCP).
func TestSandboxIdentitiesGit(t *testing.T) {
	privtest.Require(t, "ssh")
	var (
		once sync.Once
		ssh  *testnet.GitSSHServer
	)
	outer := t
	runHostile(t, func(t *testing.T, h *hostile) {
		once.Do(func() {
			ssh = h.w.StartGitSSHServer(outer, h.git, netip.MustParseAddr(sbGitSSHAddr))
			routeRawTCP(outer, h.sbEnv)
		})
		pol := h.w.WriteFile(t, "identity-git-policy-"+h.rt+".yaml", []byte(sbIdentityGitPolicy))
		name, _ := h.create(t, "idgit", "--policy", pol)
		g := &gitIdentities{h: h, name: name, ssh: ssh}
		t.Run("API", g.testAPI)
		t.Run("Reviewer", g.testReviewer)
		t.Run("Author", g.testAuthor)
	})
}

// routeRawTCP lets raw TCP out of the fixture's sandboxes: the test's host namespace forwards
// for them (a real host would route or masquerade their subnet), and the outside routes the
// sandbox subnet back to it.
func routeRawTCP(t *testing.T, e *sbEnv) {
	t.Helper()
	if err := e.w.Sidecar.WriteSysctl("net/ipv4/conf/all/forwarding", "1"); err != nil {
		t.Fatal(err)
	}
	e.w.Upstream.IP(t, "route", "add", sbSubnet, "via", "198.19.255.254", "dev", "up0", "onlink")
}

// gitIdentities is one sandbox of sbIdentityGitPolicy.
type gitIdentities struct {
	h    *hostile
	name string
	ssh  *testnet.GitSSHServer
}

// testAPI: reviewer may GET the git host's API but not POST to it; author may do both. The
// refusal names reviewer, and no refused request reaches the server.
func (g *gitIdentities) testAPI(t *testing.T) {
	api := "https://" + g.h.git.Name + ":8443/api/repos/acme/app"
	for _, tc := range []struct {
		identity, method string
		want             int
	}{
		{"reviewer", "GET", 200}, {"reviewer", "POST", 403},
		{"author", "GET", 200}, {"author", "POST", 201},
	} {
		before := len(g.h.git.Requests())
		r := g.h.asSh(t, g.name, tc.identity, curlScript("-X "+tc.method+" "+api+"/issues"))
		body, code, _ := parseCurl(t, r)
		if code != tc.want {
			t.Errorf("%s %s the API: status %d, want %d: %s", tc.identity, tc.method, code, tc.want, r)
			continue
		}
		reached := len(g.h.git.Requests()) - before
		if tc.want == 403 {
			var d identityDenial
			// reviewer's rule allows POST on git-upload-pack's path only.
			if err := json.Unmarshal([]byte(body), &d); err != nil || d.Identity != tc.identity || d.Reason != "path_not_allowed" {
				t.Errorf("%s %s: refusal %q, want path_not_allowed naming %s", tc.identity, tc.method, body, tc.identity)
			}
			if reached != 0 {
				t.Errorf("%s %s: refused, yet %d requests reached the git server", tc.identity, tc.method, reached)
			}
		} else if reached != 1 {
			t.Errorf("%s %s: %d requests reached the git server, want 1", tc.identity, tc.method, reached)
		}
	}
}

// cloneScript clones the repository over HTTPS into dir, prints its file and fetches again.
func (g *gitIdentities) cloneScript(dir string) string {
	return fmt.Sprintf(`set -e
rm -rf %[1]s
git clone --quiet %[2]s %[1]s
cat %[1]s/%[3]s
git -C %[1]s fetch --quiet origin
git -C %[1]s -c user.name=t -c user.email=t@airlock.test commit --quiet --allow-empty -m "from $(id -un)"
git -C %[1]s rev-parse HEAD
`, dir, g.h.git.URLAt(8443), testnet.GitFile)
}

// clone runs cloneScript as identity and returns the new commit's id.
func (g *gitIdentities) clone(t *testing.T, identity string) (dir, commit string) {
	t.Helper()
	dir = "/tmp/clone-" + identity
	r := g.h.asSh(t, g.name, identity, g.cloneScript(dir))
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if r.Code != 0 || len(lines) != 2 || lines[0]+"\n" != testnet.GitFileContent {
		t.Fatalf("%s: git clone, fetch and commit over HTTPS: %s", identity, r)
	}
	return dir, lines[1]
}

// push pushes dir's HEAD to ref of url as identity.
func (g *gitIdentities) push(t *testing.T, identity, dir, url, ref string) cliResult {
	t.Helper()
	return g.h.asSh(t, g.name, identity, fmt.Sprintf("%s git -C %s push --quiet %s HEAD:%s", gitSSH, dir, url, ref))
}

func (g *gitIdentities) refs(rt string) (https, ssh string) {
	return "refs/heads/" + rt + "-https", "refs/heads/" + rt + "-ssh"
}

// testReviewer: reviewer clones and fetches over HTTPS, and can push neither over HTTPS (the
// proxy refuses git-receive-pack, naming reviewer) nor over SSH (the kernel refuses the
// connection: reviewer's rules hold no raw TCP). Nothing reaches the server's refs.
func (g *gitIdentities) testReviewer(t *testing.T) {
	dir, _ := g.clone(t, "reviewer")
	httpsRef, sshRef := g.refs("reviewer-" + g.h.rt)
	r := g.push(t, "reviewer", dir, g.h.git.URLAt(8443), httpsRef)
	if r.Code == 0 || !strings.Contains(r.Stderr, "403") {
		t.Errorf("reviewer git push over HTTPS: %s, want it refused with 403", r)
	}
	execs := len(g.ssh.Execs())
	r = g.push(t, "reviewer", dir, g.ssh.URL, sshRef)
	if r.Code == 0 || !strings.Contains(r.Stderr, "Operation not permitted") {
		t.Errorf("reviewer git push over SSH: %s, want connect refused by the kernel (EPERM)", r)
	}
	if n := len(g.ssh.Execs()) - execs; n != 0 {
		t.Errorf("reviewer's SSH push ran %d commands on the server", n)
	}
	for _, ref := range []string{httpsRef, sshRef} {
		if c, err := g.h.git.Ref(ref); err == nil {
			t.Errorf("reviewer's push made %s (%s) on the server", ref, c)
		}
	}
	// The audit trail names reviewer for both refusals; the kernel's comes through its
	// deny event reader, so it is waited for (bounded).
	g.waitAudit(t, "reviewer's refused push over HTTPS", func(ev audit.Event) bool {
		return ev.Kind == audit.KindHTTP && ev.Identity == "reviewer" && ev.Decision == audit.DecisionDeny &&
			ev.Method == "POST" && strings.HasSuffix(ev.Path, "/git-receive-pack")
	})
	g.waitAudit(t, "the kernel's refusal of reviewer's SSH connection", func(ev audit.Event) bool {
		return ev.Identity == "reviewer" && ev.Reason == "kernel_identity_direct" && ev.Destination == sbGitSSHAddr+":22"
	})
}

// testAuthor: author clones, and pushes its commit over HTTPS and over SSH; both refs hold it.
func (g *gitIdentities) testAuthor(t *testing.T) {
	dir, commit := g.clone(t, "author")
	httpsRef, sshRef := g.refs("author-" + g.h.rt)
	if r := g.push(t, "author", dir, g.h.git.URLAt(8443), httpsRef); r.Code != 0 {
		t.Errorf("author git push over HTTPS: %s", r)
	}
	if r := g.push(t, "author", dir, g.ssh.URL, sshRef); r.Code != 0 {
		t.Errorf("author git push over SSH: %s", r)
	}
	for _, ref := range []string{httpsRef, sshRef} {
		if c, err := g.h.git.Ref(ref); err != nil || c != commit {
			t.Errorf("server's %s = %q, %v; want author's commit %s", ref, c, err, commit)
		}
	}
	want := "git-receive-pack '" + testnet.GitRepoPath + "'"
	found := false
	for _, e := range g.ssh.Execs() {
		found = found || e == want
	}
	if !found {
		t.Errorf("the SSH server ran %q, want %q among them", g.ssh.Execs(), want)
	}
}

// waitAudit polls the sandbox's audit log (bounded) for an event match accepts.
func (g *gitIdentities) waitAudit(t *testing.T, what string, match func(audit.Event) bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		for _, ev := range g.h.auditEvents(t, g.name) {
			if match(ev) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Errorf("no audit event for %s", what)
			return
		}
		time.Sleep(50 * time.Millisecond) // polling the audit log, bounded
	}
}
