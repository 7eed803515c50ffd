package node

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/airlock-dev/airlock/test/privtest"
	"github.com/airlock-dev/airlock/test/testnet"
)

// testPinRoot keeps the agent tests' pins apart from anything real.
const testPinRoot = "/sys/fs/bpf/airlock-test-nodeagent"

const (
	allowedIP = "198.18.0.10" // let through by an allow from the sidecar
	deniedIP  = "198.18.0.20" // never allowed
	rawIP     = "198.18.0.30" // a protocol tcp range of the identities sidecar's policy
)

// helper is a running container process of the fake pod.
type helper struct {
	t     *testing.T
	in    io.WriteCloser
	lines chan string
	denyC chan string
	origC chan string
	peerC chan string
	pid   int
}

func startHelper(t *testing.T, ctx context.Context, cg *testnet.Cgroup, ns *testnet.Netns, role, sock string) *helper {
	t.Helper()
	cmd := cg.Command(ctx, ns, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envHelper+"="+role, envSocket+"="+sock)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{t: t, in: in, lines: make(chan string, 16), denyC: make(chan string, 64), origC: make(chan string, 16),
		peerC: make(chan string, 16), pid: cmd.Process.Pid}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "D "); ok {
				h.denyC <- d
			} else if o, ok := strings.CutPrefix(sc.Text(), "O "); ok {
				h.origC <- o
			} else if p, ok := strings.CutPrefix(sc.Text(), "P "); ok {
				h.peerC <- p
			} else {
				h.lines <- strings.TrimPrefix(sc.Text(), "R ")
			}
		}
		close(h.lines)
	}()
	t.Cleanup(func() { in.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if got := h.next(); got != "started" { // in its cgroup and network namespace
		t.Fatalf("helper: %s", got)
	}
	return h
}

// next returns the helper's next answer line.
func (h *helper) next() string {
	h.t.Helper()
	select {
	case l, ok := <-h.lines:
		if !ok {
			h.t.Fatal("helper exited")
		}
		return l
	case <-time.After(30 * time.Second):
		h.t.Fatal("helper: no answer in 30s")
	}
	return ""
}

func (h *helper) do(cmd string) string {
	h.t.Helper()
	if _, err := io.WriteString(h.in, cmd+"\n"); err != nil {
		h.t.Fatal(err)
	}
	return h.next()
}

// pod is a fake pod: cgroups laid out as kubelet's cgroupfs driver does, a network
// namespace with upstream hosts, and the agent.
type pod struct {
	t     *testing.T
	tp    *testnet.Topology
	root  *testnet.Cgroup
	podCg *testnet.Cgroup
	p     Pod
	sock  string
}

func newPod(t *testing.T) *pod {
	privtest.Require(t, "nsenter")
	tp := testnet.NewTopology(t)
	for _, a := range []string{allowedIP, deniedIP, rawIP} {
		tp.AddUpstreamAddr(t, netip.MustParseAddr(a))
		l, err := tp.Upstream.Listen("tcp", a+":80")
		if err != nil {
			t.Fatal(err)
		}
		go acceptAll(l)
		t.Cleanup(func() { l.Close() })
	}
	id := make([]byte, 6)
	_, _ = rand.Read(id)
	uid := "00000000-0000-4000-8000-" + hex.EncodeToString(id)
	root := testnet.NewCgroup(t)
	podCg := root.Child(t, "kubepods").Child(t, "besteffort").Child(t, "pod"+uid)
	p := Pod{Namespace: "na-test", Name: "na-" + hex.EncodeToString(id), UID: uid}
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Join(testPinRoot, p.Namespace+"~"+p.Name)) })
	return &pod{t: t, tp: tp, root: root, podCg: podCg, p: p, sock: "@na-test-" + hex.EncodeToString(id)}
}

func acceptAll(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

func (p *pod) agent() *Agent {
	log := logrus.New()
	log.SetOutput(testWriter{p.t})
	a, err := NewAgent(AgentConfig{CgroupRoot: p.root.Path, PinRoot: testPinRoot, SocketName: p.sock, Logger: log})
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { a.Close() })
	return a
}

// container creates a container cgroup of the pod and starts a helper in it.
func (p *pod) container(ctx context.Context, id, role string) *helper {
	cg := p.podCg.Child(p.t, id)
	return startHelper(p.t, ctx, cg, p.tp.Sidecar, role, p.sock)
}

// testWriter sends the agent's log lines to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func pinDir(p Pod) string { return filepath.Join(testPinRoot, p.Namespace+"~"+p.Name) }

func TestAgentEnforcesAPod(t *testing.T) {
	p := newPod(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a := p.agent()
	side := p.container(ctx, "side1", "sidecar")
	app := p.container(ctx, "app1", "app")
	p.p.SidecarID = "side1"
	if err := a.Upsert(p.p); err != nil {
		t.Fatal(err)
	}
	if got := side.next(); got != "attached" {
		t.Fatalf("sidecar: %s, want attached", got)
	}
	if _, err := os.Stat(filepath.Join(pinDir(p.p), "link_connect4")); err != nil {
		t.Errorf("no pinned connect4 link: %v", err)
	}
	if got := app.do("dial " + deniedIP + ":80"); got != "EPERM" {
		t.Errorf("app to a denied address: %s, want EPERM", got)
	}
	if got := side.do("dial " + deniedIP + ":80"); got != "OK" {
		t.Errorf("sidecar (exempt) to the upstream: %s, want OK", got)
	}
	select {
	case d := <-side.denyC:
		if d != deniedIP+":80" {
			t.Errorf("deny event for %s, want %s:80", d, deniedIP)
		}
	case <-time.After(10 * time.Second):
		t.Error("the sidecar got no deny event")
	}
	if got := side.do("allow " + allowedIP); got != "OK" {
		t.Fatalf("allow: %s", got)
	}
	if got := app.do("dial " + allowedIP + ":80"); got != "OK" {
		t.Errorf("app to an address the sidecar allowed: %s, want OK", got)
	}
	if got := side.do("counters"); !strings.HasPrefix(got, "OK denies=") || got == "OK denies=0" {
		t.Errorf("counters: %s, want a deny counted", got)
	}
	if got := app.do("agent"); !strings.HasPrefix(got, "REFUSED") || !strings.Contains(got, "not the pod's sidecar") {
		t.Errorf("app talking to the agent: %s, want REFUSED (not the pod's sidecar)", got)
	}
	if got := app.do("dial " + deniedIP + ":80"); got != "EPERM" {
		t.Errorf("after the app's hello attempt, app to a denied address: %s, want EPERM", got)
	}

	t.Run("sidecar restart", func(t *testing.T) { side = p.restartSidecar(ctx, t, a, side, app) })
	t.Run("agent restart adopts the pins", func(t *testing.T) { p.restartAgent(ctx, t, a, side, app) })
}

// restartSidecar kills the sidecar and starts a new container for it (a new cgroup, as a
// restarted container has): the pod stays closed meanwhile, and the new container is the
// one exempt and accepted.
func (p *pod) restartSidecar(ctx context.Context, t *testing.T, a *Agent, old, app *helper) *helper {
	old.in.Close() // the helper exits at the end of its input
	if got := app.do("dial " + deniedIP + ":80"); got != "EPERM" {
		t.Errorf("without a sidecar, app to a denied address: %s, want EPERM", got)
	}
	side := p.container(ctx, "side2", "sidecar")
	p.p.SidecarID = "side2"
	if err := a.Upsert(p.p); err != nil {
		t.Fatal(err)
	}
	if got := side.next(); got != "attached" {
		t.Fatalf("new sidecar: %s, want attached", got)
	}
	if got := side.do("dial " + deniedIP + ":80"); got != "OK" {
		t.Errorf("new sidecar (exempt) to the upstream: %s, want OK", got)
	}
	if got := app.do("dial " + deniedIP + ":80"); got != "EPERM" {
		t.Errorf("after the sidecar restart, app to a denied address: %s, want EPERM", got)
	}
	return side
}

// restartAgent stops the agent (the pod stays enforced), starts another, and checks that the
// sidecar's redial is adopted: the allow entries survive.
func (p *pod) restartAgent(ctx context.Context, t *testing.T, a *Agent, side, app *helper) {
	a.Close()
	if got := app.do("dial " + deniedIP + ":80"); got != "EPERM" {
		t.Errorf("without an agent, app to a denied address: %s, want EPERM", got)
	}
	if got := side.do("allow " + deniedIP); !strings.HasPrefix(got, "ERR") {
		t.Errorf("allow without an agent: %s, want an error (fail closed)", got)
	}
	b := p.agent()
	if err := b.Resync([]Pod{p.p}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for { // the sidecar redials with a backoff: observe, bounded
		if got := side.do("counters"); strings.HasPrefix(got, "OK") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the sidecar did not reconnect to the new agent")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := app.do("dial " + allowedIP + ":80"); got != "OK" {
		t.Errorf("after the restart, app to the address allowed before: %s, want OK (allow map adopted)", got)
	}
	if got := app.do("dial " + deniedIP + ":80"); got != "EPERM" {
		t.Errorf("after the restart, app to a denied address: %s, want EPERM", got)
	}
	if err := b.Delete(p.p.Sandbox()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(pinDir(p.p)); !os.IsNotExist(err) {
		t.Errorf("pins after Delete: %v, want none", err)
	}
	if got := app.do("dial " + deniedIP + ":80"); got != "OK" {
		t.Errorf("after Delete, app to the formerly denied address: %s, want OK (enforcement removed)", got)
	}
}

// TestAgentNewPodOfTheSameNameStartsClosed: a pod deleted and made again under the same name
// (another UID) must not inherit the old one's allow entries from its pins.
func TestAgentNewPodOfTheSameNameStartsClosed(t *testing.T) {
	p := newPod(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := p.agent()
	side := p.container(ctx, "side1", "sidecar")
	p.p.SidecarID = "side1"
	if err := a.Upsert(p.p); err != nil {
		t.Fatal(err)
	}
	if got := side.next(); got != "attached" {
		t.Fatalf("sidecar: %s, want attached", got)
	}
	if got := side.do("allow " + allowedIP); got != "OK" {
		t.Fatalf("allow: %s", got)
	}
	side.in.Close()

	uid2 := p.p.UID[:len(p.p.UID)-1] + map[bool]string{true: "e", false: "f"}[strings.HasSuffix(p.p.UID, "f")]
	p.podCg = p.root.Child(t, "kubepods-second").Child(t, "pod"+uid2)
	side2 := p.container(ctx, "side2", "sidecar")
	app2 := p.container(ctx, "app2", "app")
	p.p.UID, p.p.SidecarID = uid2, "side2"
	if err := a.Upsert(p.p); err != nil {
		t.Fatal(err)
	}
	if got := side2.next(); got != "attached" {
		t.Fatalf("second pod's sidecar: %s, want attached", got)
	}
	if got := app2.do("dial " + allowedIP + ":80"); got != "EPERM" {
		t.Errorf("second pod's app to the address the first pod's sidecar allowed: %s, want EPERM", got)
	}
}

// TestAgentTransparentMode: the programs redirect the app's connections to a transparent
// port to the sidecar's listener, and the sidecar learns the original destination from the
// agent.
func TestAgentTransparentMode(t *testing.T) {
	p := newPod(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := p.agent()
	side := p.container(ctx, "side1", "sidecar-transparent")
	app := p.container(ctx, "app1", "app")
	p.p.SidecarID = "side1"
	if err := a.Upsert(p.p); err != nil {
		t.Fatal(err)
	}
	if got := side.next(); got != "attached" {
		t.Fatalf("sidecar: %s, want attached", got)
	}
	// Nothing listens on the upstream's 8080: only the redirection makes this connect work.
	target := deniedIP + ":" + strconv.Itoa(transparentPort)
	if got := app.do("dial " + target); got != "OK" {
		t.Fatalf("app to a transparent port: %s, want OK (redirected to the sidecar)", got)
	}
	select {
	case o := <-side.origC:
		if o != target {
			t.Errorf("original destination %s, want %s", o, target)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the transparent listener got no connection")
	}
	if got := app.do("dial " + deniedIP + ":80"); got != "EPERM" {
		t.Errorf("app to a port that is not redirected: %s, want EPERM", got)
	}
}

// TestAgentFollowsANewPodSandbox: when the pod's sandbox is recreated (every container
// restarts in a new network namespace), the agent binds its socket in the new namespace.
func TestAgentFollowsANewPodSandbox(t *testing.T) {
	p := newPod(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := p.agent()
	side := p.container(ctx, "side1", "sidecar")
	p.p.SidecarID = "side1"
	if err := a.Upsert(p.p); err != nil {
		t.Fatal(err)
	}
	if got := side.next(); got != "attached" {
		t.Fatalf("sidecar: %s, want attached", got)
	}
	side.in.Close()

	p.tp = testnet.NewTopology(t) // the new sandbox's network namespace
	side2 := p.container(ctx, "side2", "sidecar")
	app2 := p.container(ctx, "app2", "app")
	p.p.SidecarID = "side2"
	if err := a.Upsert(p.p); err != nil {
		t.Fatal(err)
	}
	if got := side2.next(); got != "attached" {
		t.Fatalf("sidecar in the new sandbox: %s, want attached", got)
	}
	if got := app2.do("dial 198.18.0.99:80"); got != "EPERM" {
		t.Errorf("app in the new sandbox to an address never allowed: %s, want EPERM", got)
	}
}

// peer returns the next "which container connected" answer of an identities sidecar.
func (h *helper) peer() string {
	h.t.Helper()
	select {
	case p := <-h.peerC:
		return p
	case <-time.After(30 * time.Second):
		h.t.Fatal("the sidecar accepted no connection in 30s")
	}
	return ""
}

// TestAgentIdentities: the agent tells the sidecar which container connected each accepted
// connection, by the container's name, also after a container restart (a new cgroup id,
// possibly before the API server reports it); a cgroup of the pod that is no reported
// container's is refused; with identities the app containers reach out only through the
// sidecar (the kernel's identity rule, on the pod's cgroup); and each identity has only its
// own raw TCP (a container of no identity the pod's), also after a restart (none until the
// API server reports the new container) and a policy reload.
func TestAgentIdentities(t *testing.T) {
	p := newPod(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a := p.agent()
	side := p.container(ctx, "side1", "sidecar-identities")
	reviewer := p.container(ctx, "r1", "app")
	author := p.container(ctx, "a1", "app")
	tools := p.container(ctx, "t1", "app") // a container of no identity: the pod's own
	p.p.SidecarID, p.p.Containers = "side1", map[string]string{"reviewer": "r1", "author": "a1", "tools": "t1"}
	if err := a.Upsert(p.p); err != nil {
		t.Fatal(err)
	}
	if got := side.next(); got != "attached" {
		t.Fatalf("sidecar: %s, want attached", got)
	}
	for name, h := range map[string]*helper{"reviewer": reviewer, "author": author} {
		if got := h.do("dial " + proxyAddr); got != "OK" {
			t.Fatalf("%s to the proxy listener: %s, want OK", name, got)
		}
		if got := side.peer(); got != name {
			t.Errorf("the connection of container %s: agent says %q", name, got)
		}
		if got := h.do("query " + dnsAddr); got != "OK" {
			t.Fatalf("%s to the DNS listener: %s, want OK", name, got)
		}
		if got := side.peer(); got != name {
			t.Errorf("the DNS query of container %s: agent says %q", name, got)
		}
	}
	if got := side.do("allow " + allowedIP); got != "OK" {
		t.Fatalf("allow: %s", got)
	}
	if got := author.do("dial " + allowedIP + ":80"); got != "EPERM" {
		t.Errorf("an app container straight to an allowed address with identities: %s, want EPERM (only through the sidecar)", got)
	}
	// Raw TCP: the sandbox allows rawIP:80; of the identities only author has it.
	rawTCP := func(t *testing.T, want map[string]string, hs map[string]*helper) {
		t.Helper()
		for name, h := range hs {
			if got := h.do("dial " + rawIP + ":80"); got != want[name] {
				t.Errorf("%s to the raw TCP address: %s, want %s", name, got, want[name])
			}
		}
	}
	authorOnly := map[string]string{"author": "OK", "reviewer": "EPERM", "tools": "OK"}
	rawTCP(t, authorOnly, map[string]*helper{"author": author, "reviewer": reviewer, "tools": tools})
	// A container of no identity is the pod's own: the sandbox's rules, direct connects too.
	if got := tools.do("dial " + allowedIP + ":80"); got != "OK" {
		t.Errorf("a container of no identity straight to an allowed address: %s, want OK (the pod's own identity)", got)
	}

	t.Run("restarted container", func(t *testing.T) {
		reviewer.in.Close()
		reviewer2 := p.container(ctx, "r2", "app")
		// The new container connects before the agent hears of it: the lookup waits for
		// the pod's update (or, had the update come first, finds it at once).
		if got := reviewer2.do("dial " + proxyAddr); got != "OK" {
			t.Fatalf("restarted reviewer to the proxy listener: %s", got)
		}
		p.p.Containers = map[string]string{"reviewer": "r2", "author": "a1"}
		if err := a.Upsert(p.p); err != nil {
			t.Fatal(err)
		}
		if got := side.peer(); got != "reviewer" {
			t.Errorf("the restarted reviewer's connection: agent says %q, want reviewer", got)
		}
		if got := reviewer2.do("dial " + allowedIP + ":80"); got != "EPERM" {
			t.Errorf("restarted reviewer straight to an allowed address: %s, want EPERM", got)
		}
	})
	t.Run("restarted containers and raw TCP", func(t *testing.T) {
		author.in.Close()
		author = p.container(ctx, "a2", "app")
		// Not reported yet: its cgroup is no identity's, so no raw TCP (fail closed).
		if got := author.do("dial " + rawIP + ":80"); got != "EPERM" {
			t.Errorf("restarted author before the API server reports it, to the raw TCP address: %s, want EPERM", got)
		}
		reviewer3 := p.container(ctx, "r3", "app")
		p.p.Containers = map[string]string{"reviewer": "r3", "author": "a2", "tools": "t1"}
		if err := a.Upsert(p.p); err != nil {
			t.Fatal(err)
		}
		rawTCP(t, authorOnly, map[string]*helper{"author": author, "reviewer": reviewer3, "tools": tools})
		t.Run("reload", func(t *testing.T) {
			if got := side.do("idtcp reviewer"); got != "OK" {
				t.Fatalf("idtcp reviewer: %s", got)
			}
			rawTCP(t, map[string]string{"author": "EPERM", "reviewer": "OK", "tools": "OK"},
				map[string]*helper{"author": author, "reviewer": reviewer3, "tools": tools})
			if got := side.do("idtcp off"); got != "OK" {
				t.Fatalf("idtcp off: %s", got)
			}
			rawTCP(t, map[string]string{"author": "OK", "reviewer": "OK", "tools": "OK"},
				map[string]*helper{"author": author, "reviewer": reviewer3, "tools": tools})
			if got := side.do("idtcp author"); got != "OK" {
				t.Fatalf("idtcp author: %s", got)
			}
			rawTCP(t, authorOnly, map[string]*helper{"author": author, "reviewer": reviewer3, "tools": tools})
		})
	})
	t.Run("a cgroup of no container", func(t *testing.T) {
		stray := p.container(ctx, "stray", "app")
		if got := stray.do("dial " + proxyAddr); got != "OK" {
			t.Fatalf("stray to the proxy listener: %s", got)
		}
		if got := side.peer(); !strings.HasPrefix(got, "ERR ") || !strings.Contains(got, "no running container the API server reported") {
			t.Errorf("a cgroup of the pod that is no container's: %q, want an error", got)
		}
	})
	t.Run("identities off", func(t *testing.T) {
		if got := side.do("identities off"); got != "OK" {
			t.Fatalf("identities off: %s", got)
		}
		if got := author.do("dial " + allowedIP + ":80"); got != "OK" {
			t.Errorf("without identities, an app container to an allowed address: %s, want OK", got)
		}
	})
}
