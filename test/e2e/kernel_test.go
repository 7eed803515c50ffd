//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/ebpf"
	"github.com/airlock-dev/airlock/test/privtest"
	"github.com/airlock-dev/airlock/test/testnet"
)

// kernelPolicy allows allowed.test on ports 80 and 443.
const kernelPolicy = `apiVersion: airlock/v1
kind: EgressPolicy
metadata:
  name: kernel
spec:
  egress:
    - name: allowed
      hosts: ["allowed.test"]
      ports: [80, 443]
`

// kernelSetup builds a world, a sandbox cgroup, and starts airlock with --cgroup on it
// (transparent mode on, DNS filter and LLM endpoint off).
func kernelSetup(t *testing.T) (*testnet.World, *testnet.Cgroup, string, *testnet.Airlock) {
	t.Helper()
	return kernelSetupArgs(t, "--dns-addr", "off", "--llm-addr", "off")
}

// kernelSetupArgs is kernelSetup with other flags after --cgroup.
func kernelSetupArgs(t *testing.T, args ...string) (*testnet.World, *testnet.Cgroup, string, *testnet.Airlock) {
	t.Helper()
	return kernelSetupPolicy(t, kernelPolicy, nil, args...)
}

// kernelSetupPolicy is kernelSetupArgs with another policy; prepare, when not nil, runs on
// the world before the sidecar starts (to add hosts and names). The test is a parallel world
// test (parallelWorld): its world, cgroup and pins are its own.
func kernelSetupPolicy(t *testing.T, policy string, prepare func(*testnet.World), args ...string) (*testnet.World, *testnet.Cgroup, string, *testnet.Airlock) {
	t.Helper()
	privtest.Require(t, "curl", "nsenter")
	parallelWorld(t)
	if err := ebpf.Probe(); err != nil {
		t.Fatalf("kernel lacks what the enforcement needs: %v", err)
	}
	w := testnet.NewWorld(t)
	if prepare != nil {
		prepare(w)
	}
	cg := testnet.NewCgroup(t)
	sandbox := fmt.Sprintf("e2e-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-"))
	t.Cleanup(func() {
		if err := ebpf.Remove("", sandbox); err != nil {
			t.Errorf("remove pins: %v", err)
		}
	})
	a := w.StartAirlock(t, testnet.AirlockConfig{
		Binary: airlockBinary(t), Policy: policy, Sandbox: sandbox,
		Args:       append([]string{"--cgroup", cg.Path}, args...),
		HostMounts: true,
	})
	return w, cg, sandbox, a
}

func TestKernelDNSAnswerOpensAddress(t *testing.T) {
	w, cg, _, a := kernelSetupArgs(t, "--transparent-addr", "off", "--llm-addr", "off", "--dns-addr", "127.0.0.1:5353")
	p := testnet.StartSandboxProbe(t, cg, w.Sidecar)
	steps := []struct{ cmd, want string }{
		{"uid", "OK 0"},
		{"connect 4 tcp 198.18.0.10:80", "EPERM"},
		// The answer's address is in the kernel map before the answer leaves the filter:
		// 1000 connects right after it, not one refused.
		{"resolveloop allowed.test 127.0.0.1:5353 80 1000", "OK 198.18.0.10"},
		{"connect 6 tcp 198.18.0.10:80", "OK"},      // the IPv4-mapped form too
		{"connect 4 tcp 198.18.0.10:8080", "EPERM"}, // the rule allows ports 80 and 443 only
		{"resolve denied.test 127.0.0.1:5353", "ERR RCODE REFUSED"},
		{"connect 4 tcp 198.18.0.20:80", "EPERM"},
		{"sendto 4 198.18.0.53:53", "EPERM"},      // straight to the outside resolver
		{"udpconnsend 4 198.18.0.53:53", "EPERM"}, // the same, connected
		{"connect 4 tcp 198.18.0.53:53", "EPERM"}, // DNS over TCP to it
		{"connect 4 tcp 127.0.0.1:9090", "EPERM"}, // the admin listener
	}
	for _, s := range steps {
		if got := p.Do(t, s.cmd); got != s.want {
			t.Fatalf("%s: got %q, want %q", s.cmd, got, s.want)
		}
	}
	if n := w.DNS.Queries(testnet.NameDenied); n != 0 {
		t.Fatalf("the outside resolver got %d queries for %s, want 0", n, testnet.NameDenied)
	}
	a.WaitEvent(t, "kernel deny of the direct resolver query", func(e testnet.AuditEvent) bool {
		return e.Kind == "connect" && e.Decision == "deny" && e.Destination == "198.18.0.53:53"
	})
}

// sandboxCurl runs curl inside the sandbox cgroup and the sidecar's network namespace, with
// no proxy variables: only the kernel can send it to the proxy.
func sandboxCurl(t *testing.T, w *testnet.World, cg *testnet.Cgroup, args ...string) testnet.CurlResult {
	t.Helper()
	return w.CurlIn(t, func(ctx context.Context, name string, args ...string) *exec.Cmd {
		return cg.Command(ctx, w.Sidecar, name, args...)
	}, args...)
}

// curl's exit codes: connect() failed (EPERM from the kernel); the TLS handshake failed
// (the transparent proxy closed a refused connection).
const (
	curlCouldNotConnect = 7
	curlTLSFailed       = 35
)

func TestKernelTransparentMode(t *testing.T) {
	w, cg, _, a := kernelSetup(t)
	allowedURL := "http://allowed.test/kernel"
	tests := []struct {
		name   string
		args   []string
		exit   int
		status string // expected HTTP status (with -w), "" when curl cannot connect
		reason string
	}{
		{name: "allowed host through the transparent proxy",
			args: []string{"--resolve", "allowed.test:80:198.18.0.10", "-o", "/dev/null", "-w", "%{http_code}", allowedURL}, status: "200"},
		{name: "host the policy does not name",
			args: []string{"--resolve", "denied.test:80:198.18.0.20", "-w", "\n%{http_code}", "http://denied.test/"}, status: "403", reason: "no_rule"},
		{name: "allowed name, another host's address",
			args: []string{"--resolve", "allowed.test:80:198.18.0.20", "-w", "\n%{http_code}", allowedURL}, status: "403", reason: "original_destination_mismatch"},
		{name: "allowed host over TLS, SNI checked against the original address",
			args: []string{"--cacert", w.CA.File, "--resolve", "allowed.test:443:198.18.0.10", "-o", "/dev/null", "-w", "%{http_code}", "https://allowed.test/tls"}, status: "200"},
		{name: "allowed name in SNI, another host's address",
			args: []string{"--cacert", w.CA.File, "--resolve", "allowed.test:443:198.18.0.20", "https://allowed.test/"}, exit: curlTLSFailed},
		{name: "SNI the policy does not name",
			args: []string{"--cacert", w.CA.File, "--resolve", "denied.test:443:198.18.0.20", "https://denied.test/"}, exit: curlTLSFailed},
		{name: "port not redirected, address not allowed",
			args: []string{"http://198.18.0.10:8080/"}, exit: curlCouldNotConnect},
		{name: "the admin listener",
			args: []string{"http://127.0.0.1:9090/healthz"}, exit: curlCouldNotConnect},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := sandboxCurl(t, w, cg, tc.args...)
			if r.ExitCode != tc.exit {
				t.Fatalf("curl exit %d, want %d: %s %s", r.ExitCode, tc.exit, r.Stdout, r.Stderr)
			}
			if tc.status != "" && !strings.HasSuffix(strings.TrimSpace(r.Stdout), tc.status) {
				t.Fatalf("curl output %q, want status %s", r.Stdout, tc.status)
			}
			if tc.reason != "" && !strings.Contains(r.Stdout, tc.reason) {
				t.Fatalf("curl output %q, want reason %s", r.Stdout, tc.reason)
			}
		})
	}
	got := w.Allowed.Requests()
	if len(got) != 2 || got[0].Path != "/kernel" || got[1].Path != "/tls" || got[1].SNI != "allowed.test" {
		t.Fatalf("allowed upstream saw %+v, want exactly the two allowed requests", got)
	}
	a.WaitEvent(t, "SNI/original destination mismatch", isDeny("original_destination_mismatch"))
	if n := len(w.Denied.Requests()); n != 0 {
		t.Fatalf("denied upstream saw %d requests, want 0", n)
	}
	a.WaitEvent(t, "kernel deny audit event", func(e testnet.AuditEvent) bool {
		return e.Kind == "connect" && e.Decision == "deny" && e.Destination == "198.18.0.10:8080" && strings.HasPrefix(e.Reason, "kernel_")
	})
	if v, ok := a.MetricSum(t, "airlock_kernel_denies_total"); !ok || v < 2 {
		t.Fatalf("airlock_kernel_denies_total = %v (present %v), want >= 2", v, ok)
	}
}

func TestKernelSidecarCrashFailsClosed(t *testing.T) {
	w, cg, sandbox, a := kernelSetup(t)
	a.Kill(t)
	// No sidecar: everything stays denied, redirected connections find no listener.
	for _, args := range [][]string{
		{"http://198.18.0.10:8080/"},
		{"--resolve", "allowed.test:80:198.18.0.10", "http://allowed.test/"},
	} {
		if r := sandboxCurl(t, w, cg, args...); r.ExitCode != curlCouldNotConnect {
			t.Fatalf("sidecar dead: curl %v exit %d, want %d (%s)", args, r.ExitCode, curlCouldNotConnect, r.Stderr)
		}
	}
	if n := len(w.Allowed.Requests()); n != 0 {
		t.Fatalf("upstream saw %d requests while the sidecar was dead", n)
	}
	// A new sidecar adopts the pins and the sandbox works again.
	a2 := w.StartAirlock(t, testnet.AirlockConfig{
		Binary: airlockBinary(t), Policy: kernelPolicy, Sandbox: sandbox,
		Args:       []string{"--cgroup", cg.Path, "--dns-addr", "off", "--llm-addr", "off"},
		HostMounts: true,
	})
	a2.WaitLog(t, 0, "adopted pins", func(l string) bool {
		return strings.Contains(l, "kernel enforcement attached") && strings.Contains(l, `"adopted":true`)
	})
	r := sandboxCurl(t, w, cg, "--resolve", "allowed.test:80:198.18.0.10", "-o", "/dev/null", "-w", "%{http_code}", "http://allowed.test/again")
	if r.ExitCode != 0 || r.Stdout != "200" {
		t.Fatalf("after restart: curl exit %d output %q, want 200 (%s)", r.ExitCode, r.Stdout, r.Stderr)
	}
	if r := sandboxCurl(t, w, cg, "http://198.18.0.10:8080/"); r.ExitCode != curlCouldNotConnect {
		t.Fatalf("after restart: direct connect exit %d, want %d", r.ExitCode, curlCouldNotConnect)
	}
}

func TestKernelProductionRefusesWithoutEnforcement(t *testing.T) {
	privtest.Require(t)
	bin := airlockBinary(t)
	dir := t.TempDir()
	pol := dir + "/policy.yaml"
	if err := os.WriteFile(pol, []byte(kernelPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, want string
		args       []string
	}{
		{"no cgroup", "requires kernel enforcement", nil},
		{"cgroup that does not exist", "kernel enforcement on", []string{"--cgroup", dir + "/no-such-cgroup"}},
		{"not a cgroup v2 directory", "kernel enforcement on", []string{"--cgroup", dir}},
		// A pod on a node without the agent: the sidecar exits, its startup probe never passes.
		{"no node agent", "kernel enforcement on the pod's cgroup (node agent) unavailable", []string{"--node-agent", "--node-agent-wait", "1s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"run", "--policy", pol, "--environment", "production", "--state-dir", dir + "/state",
				"--proxy-addr", "127.0.0.1:0", "--admin-addr", "off", "--transparent-addr", "off", "--dns-addr", "off", "--llm-addr", "off"}, tc.args...)
			cmd := exec.Command(bin, args...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() == 0 {
				t.Fatalf("airlock run exited %v, want a non-zero exit", err)
			}
			lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			last := lines[len(lines)-1]
			if !strings.Contains(last, tc.want) {
				t.Fatalf("last stderr line %q, want it to contain %q", last, tc.want)
			}
		})
	}
}

// Production with --packet-guard best-effort starts even where the BPF LSM is not active
// (the operator vouches the sandbox has no CAP_NET_RAW), and still enforces every other hook.
func TestKernelProductionPacketGuardBestEffort(t *testing.T) {
	w, cg, _, a := kernelSetupArgs(t, "--environment", "production", "--packet-guard", "best-effort", "--dns-addr", "off", "--llm-addr", "off")
	if r := sandboxCurl(t, w, cg, "http://198.18.0.10:8080/"); r.ExitCode != curlCouldNotConnect {
		t.Fatalf("production: direct connect exit %d, want %d (%s)", r.ExitCode, curlCouldNotConnect, r.Stderr)
	}
	r := sandboxCurl(t, w, cg, "--resolve", "allowed.test:80:198.18.0.10", "-o", "/dev/null", "-w", "%{http_code}", "http://allowed.test/prod")
	if r.ExitCode != 0 || r.Stdout != "200" {
		t.Fatalf("production: transparent curl exit %d output %q, want 200 (%s)", r.ExitCode, r.Stdout, r.Stderr)
	}
	a.WaitLog(t, 0, "kernel enforcement attached", func(l string) bool { return strings.Contains(l, "kernel enforcement attached") })
}

// expiryPolicy allows raw TCP to expiry.test:7000 with the shortest DNS lifetimes: an answer
// opens its address in the kernel for max(TTL, minTTL) + grace = 4s (long enough that a loaded
// machine still opens the held connection in time, short enough for a test).
const expiryPolicy = `apiVersion: airlock/v1
kind: EgressPolicy
metadata:
  name: kernel-expiry
spec:
  dns:
    minTTL: 3s
    grace: 1s
  egress:
    - name: expiry
      hosts: ["expiry.test"]
      ports: [7000]
      protocol: tcp
`

// expiryAddr is expiry.test's address; a line echo listens on expiryAddr:7000.
var expiryAddr = netip.MustParseAddrPort("198.18.0.41:7000")

// A DNS answer's kernel allow entry expires by itself: after max(TTL, minTTL) + grace a new
// connect to the address is refused, a connection opened before keeps carrying data both
// ways, and looking the name up again through the filter opens the address at once.
func TestKernelDNSExpiry(t *testing.T) {
	const name = "expiry.test"
	w, cg, _, a := kernelSetupPolicy(t, expiryPolicy, func(w *testnet.World) {
		w.AddUpstreamAddr(t, expiryAddr.Addr())
		lineEcho(t, w.Upstream, expiryAddr)
		w.DNS.Set(name, 1, expiryAddr.Addr()) // TTL 1s from the outside resolver
	}, "--transparent-addr", "off", "--llm-addr", "off", "--dns-addr", dnsAddr)
	p := testnet.StartSandboxProbe(t, cg, w.Sidecar)
	connect := "connect 4 tcp " + expiryAddr.String()

	if got := p.Do(t, connect); got != "EPERM" {
		t.Fatalf("before any lookup: %s: got %q, want EPERM", connect, got)
	}
	resolved := time.Now()
	if got := p.Do(t, "resolve "+name+" "+dnsAddr); got != "OK "+expiryAddr.Addr().String() {
		t.Fatalf("resolve %s: got %q", name, got)
	}
	for _, cmd := range []string{"hold c1 4 " + expiryAddr.String(), "echo c1"} {
		if got := p.Do(t, cmd); got != "OK" {
			t.Fatalf("right after the answer: %s: got %q, want OK", cmd, got)
		}
	}

	// Poll new connects until the kernel refuses one; the entry must outlive minTTL and must
	// not outlive a generous bound.
	deadline := time.Now().Add(30 * time.Second)
	oks := 0
	for {
		got := p.Do(t, connect)
		if got == "EPERM" {
			break
		}
		if got != "OK" {
			t.Fatalf("%s while the answer is live: got %q, want OK", connect, got)
		}
		oks++
		if time.Now().After(deadline) {
			t.Fatalf("new connects still allowed %v after the answer (TTL 1s, minTTL 3s, grace 1s): expiry not enforced", time.Since(resolved))
		}
		time.Sleep(20 * time.Millisecond) // poll interval of a bounded wait on the kernel's clock
	}
	expired := time.Since(resolved)
	if oks == 0 || expired < 3500*time.Millisecond {
		t.Fatalf("refused %v after the answer (%d connects allowed), want no sooner than about minTTL + grace (4s)", expired, oks)
	}
	t.Logf("allow entry expired %v after the lookup (%d connects allowed before)", expired, oks)

	// The connection opened before expiry still carries data both ways.
	for range 3 {
		if got := p.Do(t, "echo c1"); got != "OK" {
			t.Fatalf("held connection after expiry: echo got %q, want OK", got)
		}
	}
	a.WaitEvent(t, "kernel deny for the expired entry", func(e testnet.AuditEvent) bool {
		return e.Kind == "connect" && e.Decision == "deny" && e.Destination == expiryAddr.String() && e.Reason == "kernel_allow_expired"
	})

	// Looking the name up again through the filter opens the address at once: the first
	// connect right after the answer succeeds.
	if got := p.Do(t, "resolveloop "+name+" "+dnsAddr+" 7000 1"); got != "OK "+expiryAddr.Addr().String() {
		t.Fatalf("re-resolve and connect: got %q", got)
	}
	if got := p.Do(t, "echo c1"); got != "OK" {
		t.Fatalf("held connection after the second lookup: echo got %q, want OK", got)
	}
	if n := w.DNS.Queries(name); n != 2 {
		t.Fatalf("the outside resolver got %d queries for %s, want 2 (one per lookup)", n, name)
	}
}

// lineEcho serves a line echo on addr inside ns until the test ends.
func lineEcho(t *testing.T, ns *testnet.Netns, addr netip.AddrPort) {
	t.Helper()
	l, err := ns.Listen("tcp", addr.String())
	if err != nil {
		t.Fatalf("echo listen %s: %v", addr, err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns = map[net.Conn]bool{}
	)
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() {
					mu.Lock()
					delete(conns, c)
					mu.Unlock()
					c.Close()
				}()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := io.WriteString(c, line); err != nil {
						return
					}
				}
			}()
		}
	}()
}
