//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/test/privtest"
	"github.com/airlock-dev/airlock/test/testnet"
)

// learnReportPolicy records everything: no rule, report mode, every connection intercepted.
const learnReportPolicy = `apiVersion: airlock/v1
kind: EgressPolicy
metadata:
  name: record
spec:
  mode: report
  report:
    interceptAll: true
  egress: []
`

// learnNarrowPolicy is narrower than what the clients did: git may fetch refs but not
// packs, intercept.test is gone, and api.allowed.test gets L7 rules although its tunnel
// was never intercepted (so replaying that tunnel is undecidable).
const learnNarrowPolicy = `apiVersion: airlock/v1
kind: EgressPolicy
metadata:
  name: narrow
spec:
  egress:
    - name: allowed
      hosts: ["allowed.test"]
      ports: [80, 443]
    - name: git
      hosts: ["git.test"]
      ports: [443]
      http:
        - methods: [GET]
          paths: ["/repo.git/info/refs"]
    - name: api
      hosts: ["api.allowed.test"]
      ports: [443]
      http:
        - methods: [GET]
`

const learnGitAddr = "198.18.0.61"

// learnWorld is the topology of the learn test: the world's hosts and a git server.
type learnWorld struct {
	w   *testnet.World
	bin string
	git *testnet.GitServer
}

// TestPolicyLearnReplay is the security team's loop with real clients: record in report
// mode (curl, git over HTTPS, Python urllib), learn a candidate, enforce it on the same
// traffic without a deny, see a new host denied with the policy named, and replay the
// recording against a narrower candidate.
func TestPolicyLearnReplay(t *testing.T) {
	privtest.Require(t, "curl", "git", "python3", "dig")
	parallelWorld(t)
	lw := &learnWorld{w: testnet.NewWorld(t), bin: airlockBinary(t)}
	lw.git = lw.w.StartGitServer(t, netip.MustParseAddr(learnGitAddr), "git.test")

	// Run 0: plain report mode. The HTTPS tunnel is not intercepted: only its destination
	// is recorded.
	a := lw.w.StartAirlock(t, testnet.AirlockConfig{Binary: lw.bin, Policy: strings.Replace(learnReportPolicy, "    interceptAll: true\n", "    interceptAll: false\n", 1)})
	lw.passthrough(t, a)
	a.Stop(t)
	trail0 := a.AuditFile

	// Run 1: report mode intercepting everything.
	a = lw.w.StartAirlock(t, testnet.AirlockConfig{Binary: lw.bin, Policy: learnReportPolicy})
	lw.clients(t, a, "1234", "5678")
	if r := curlProxy(t, lw.w, a, "http://metadata.test:8080/latest/meta-data/"); r.Code != 403 {
		t.Errorf("metadata in report mode: %v; want 403 (internal addresses are denied even in report mode)", r)
	}
	a.Stop(t)
	trail1 := a.AuditFile

	cand := filepath.Join(lw.w.Dir, "candidate.yaml")
	if out, code := lw.cli(t, "policy", "learn", trail0, trail1, "-o", cand); code != 0 {
		t.Fatalf("policy learn: exit %d: %s", code, out)
	}
	if out, code := lw.cli(t, "policy", "check", cand); code != 0 {
		t.Fatalf("policy check of the candidate: exit %d: %s", code, out)
	}
	learned, err := os.ReadFile(cand)
	if err != nil {
		t.Fatal(err)
	}
	checkLearned(t, string(learned))

	// Run 2: the candidate, enforced, on the same traffic (new ids in the paths): no deny.
	a = lw.w.StartAirlock(t, testnet.AirlockConfig{Binary: lw.bin, Policy: string(learned)})
	lw.passthrough(t, a)
	lw.clients(t, a, "9999", "4242")
	r := curlProxy(t, lw.w, a, "http://denied.test/new-host")
	checkDenial(t, r.Code, r.Header, r.Body, testnet.NameDenied, 80, "", "no_rule")
	var body struct{ Policy string }
	if json.Unmarshal([]byte(r.Body), &body); body.Policy != "learned" {
		t.Errorf("denial body: policy: got %q, want %q: %s", body.Policy, "learned", r.Body)
	}
	// The DNS filter says the same to a resolver that speaks EDNS: RFC 8914 Blocked, with
	// the policy, the reason and the remedy.
	d := dig(t, lw.w, testnet.NameDenied, "A")
	if d.status != "REFUSED" || !strings.Contains(grepLines(d.out, "EDE: 15 (Blocked)"), "airlock policy learned: no_rule") {
		t.Errorf("dig %s: want REFUSED with EDE 15 (Blocked) naming policy learned and no_rule:\n%s", testnet.NameDenied, d.out)
	}
	a.Stop(t)
	for _, e := range a.FileEvents(t) {
		if e.Decision == "deny" && !strings.HasPrefix(e.Destination, testnet.NameDenied) {
			t.Errorf("the learned policy denied recorded traffic: %s", e.Line)
		}
	}

	lw.checkReplay(t, trail0, trail1)
}

// passthrough makes an HTTPS request through a tunnel the client verifies end to end.
func (lw *learnWorld) passthrough(t *testing.T, a *testnet.Airlock) {
	t.Helper()
	if r := curlProxy(t, lw.w, a, "--cacert", lw.w.CA.File, "https://api.allowed.test/plain/1"); r.Code != 200 {
		t.Errorf("curl through a plain tunnel: %v; want 200", r)
	}
}

// clients runs curl (https and http), git clone over HTTPS and Python urllib through the
// proxy, trusting the sidecar CA; id1 and id2 vary in the paths as ids do.
func (lw *learnWorld) clients(t *testing.T, a *testnet.Airlock, id1, id2 string) {
	t.Helper()
	ca := writePEM(t, lw.w, "airlock-ca-"+id1+".pem", a.CAPEM(t))
	for _, u := range []string{"https://allowed.test/items/" + id1, "https://allowed.test/items/" + id2, "http://allowed.test/plain/" + id1} {
		if r := curlProxy(t, lw.w, a, "--cacert", ca, u); r.Code != 200 {
			t.Errorf("curl %s: %v; want 200", u, r)
		}
	}
	dst := filepath.Join(lw.w.Dir, "clone-"+id1)
	if out, err := lw.run(t, nil, "git", "-c", "http.proxy="+a.ProxyURL.String(), "-c", "http.sslCAInfo="+ca,
		"clone", "--quiet", lw.git.URL, dst); err != nil {
		t.Errorf("git clone through the proxy: %v: %s", err, out)
	} else if got, err := os.ReadFile(filepath.Join(dst, testnet.GitFile)); err != nil || string(got) != testnet.GitFileContent {
		t.Errorf("git clone: %s: %q %v", testnet.GitFile, got, err)
	}
	py := `import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=20).status)`
	env := []string{"https_proxy=" + a.ProxyURL.String(), "SSL_CERT_FILE=" + ca}
	if out, err := lw.run(t, env, "python3", "-c", py, "https://intercept.test/py/v"+id1[:1]+".2.3/x"); err != nil || strings.TrimSpace(out) != "200" {
		t.Errorf("python urllib through the proxy: %v: %s", err, out)
	}
}

// run runs a client in the sidecar namespace with a clean environment plus env.
func (lw *learnWorld) run(t *testing.T, env []string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := lw.w.Sidecar.Command(ctx, name, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + lw.w.Dir, "GIT_CONFIG_NOSYSTEM=1"}, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// cli runs the airlock binary on this machine (no namespace: learn and replay read files).
func (lw *learnWorld) cli(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(lw.bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &ee):
		return out.String(), ee.ExitCode()
	}
	t.Fatalf("run airlock %v: %v", args, err)
	return "", 0
}

// checkLearned checks what the candidate learned from the two runs.
func checkLearned(t *testing.T, y string) {
	t.Helper()
	for _, want := range []string{
		`hosts: ["allowed.test"]`, `"/items/*"`, `"/plain/*"`,
		`hosts: ["git.test"]`, `"/repo.git/info/refs"`, `"/repo.git/git-upload-pack"`,
		`hosts: ["intercept.test"]`, `"/py/*/x"`,
		`hosts: ["api.allowed.test"]`, "tunnels not intercepted",
		"metadata.test:8080", // listed as left out
	} {
		if !strings.Contains(y, want) {
			t.Errorf("candidate lacks %s:\n%s", want, y)
		}
	}
	if strings.Contains(y, `hosts: ["metadata.test"]`) {
		t.Errorf("candidate has a rule for the metadata address:\n%s", y)
	}
}

// checkReplay replays both recordings against the narrower candidate and checks that
// exactly the git pack requests and the intercept.test traffic flip, and the plain tunnel to
// api.allowed.test is undecidable.
func (lw *learnWorld) checkReplay(t *testing.T, trails ...string) {
	t.Helper()
	narrow := lw.w.WriteFile(t, "narrow.yaml", []byte(learnNarrowPolicy))
	args := append([]string{"policy", "replay", "--policy", narrow, "--json"}, trails...)
	out, code := lw.cli(t, args...)
	if code != 1 {
		t.Errorf("policy replay: exit %d, want 1 (allowed requests would be denied): %s", code, out)
	}
	var rep struct {
		Changes []struct {
			Change, Kind, Destination, Method, Path string
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("policy replay --json: %v: %s", err, out)
	}
	// What must flip, from the recordings themselves.
	var want, got []string
	for _, trail := range trails {
		data, err := os.ReadFile(trail)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(data), "\n") {
			e, ok := testnet.ParseAuditEvent(l)
			switch {
			case !ok:
			case e.Destination == "intercept.test:443", e.Destination == "git.test:443" && e.Method == "POST":
				want = append(want, "allow-to-deny "+e.Kind+" "+e.Destination+" "+e.Method+" "+e.Path)
			case e.Destination == "api.allowed.test:443" && e.Kind == "connect" && trail == trails[0]:
				want = append(want, "undecidable connect api.allowed.test:443  ")
			}
		}
	}
	for _, c := range rep.Changes {
		got = append(got, c.Change+" "+c.Kind+" "+c.Destination+" "+c.Method+" "+c.Path)
	}
	slices.Sort(want)
	slices.Sort(got)
	if len(want) < 4 || !slices.Equal(got, want) {
		t.Errorf("replay changes:\n got %q\nwant %q", got, want)
	}
	text, _ := lw.cli(t, append([]string{"policy", "replay", "--policy", narrow}, trails...)...)
	for _, s := range []string{"allow → deny", "undecidable", "rule git", "intercept.test:443"} {
		if !strings.Contains(text, s) {
			t.Errorf("replay text lacks %q:\n%s", s, text)
		}
	}
}
