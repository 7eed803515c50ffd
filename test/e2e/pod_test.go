//go:build linux

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/ebpf"
	"github.com/airlock-dev/airlock/test/privtest"
	"github.com/airlock-dev/airlock/test/testnet"
)

// podCgroups stands in for a Kubernetes pod: a pod cgroup with the sidecar's container
// cgroup and an app container's beside it.
type podCgroups struct {
	pod, sidecar, app *testnet.Cgroup
}

// podSetup builds a world and a pod, and starts `airlock run --pod-cgroup --cgroup-root
// <cgroup2 root>` inside the pod's sidecar cgroup, in a private cgroup namespace rooted there
// when privateNS (as a container's), with the DNS filter on 127.0.0.1:5353, the LLM endpoint
// off, and args after that.
func podSetup(t *testing.T, privateNS bool, args ...string) (*testnet.World, podCgroups, *testnet.Airlock) {
	t.Helper()
	privtest.Require(t, "curl", "nsenter", "unshare")
	if err := ebpf.Probe(); err != nil {
		t.Fatalf("kernel lacks what the enforcement needs: %v", err)
	}
	root, err := testnet.Cgroup2Root()
	if err != nil {
		t.Fatal(err)
	}
	w := testnet.NewWorld(t)
	pod := testnet.NewCgroup(t)
	cgs := podCgroups{pod: pod, sidecar: pod.Child(t, "sidecar"), app: pod.Child(t, "app")}
	sandbox := fmt.Sprintf("e2e-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-"))
	t.Cleanup(func() {
		if err := ebpf.Remove("", sandbox); err != nil {
			t.Errorf("remove pins: %v", err)
		}
	})
	a := w.StartAirlock(t, testnet.AirlockConfig{
		Binary: airlockBinary(t), Policy: kernelPolicy, Sandbox: sandbox,
		Args:       append([]string{"--pod-cgroup", "--cgroup-root", root, "--dns-addr", "127.0.0.1:5353", "--llm-addr", "off"}, args...),
		HostMounts: true, Cgroup: cgs.sidecar, CgroupNS: privateNS,
	})
	a.WaitLog(t, 0, "pod mode", func(line string) bool {
		return strings.Contains(line, "pod mode") && strings.Contains(line, filepath.Base(pod.Path)+"/sidecar")
	})
	return w, cgs, a
}

func TestPodModeEnforcesAppExemptsSidecar(t *testing.T) {
	w, cgs, a := podSetup(t, true)
	appProbe := testnet.StartSandboxProbe(t, cgs.app, w.Sidecar)
	grandchild := testnet.StartSandboxProbe(t, cgs.app.Child(t, "worker"), w.Sidecar)
	sidecarChild := testnet.StartSandboxProbe(t, cgs.sidecar.Child(t, "helper"), w.Sidecar)

	// The app container, and a cgroup its runtime made below it, are enforced. (Port 8080
	// is not redirected to the transparent listener; nothing listens there upstream.)
	for _, p := range []*testnet.SandboxProbe{appProbe, grandchild} {
		for _, s := range []struct{ cmd, want string }{
			{"connect 4 tcp 198.18.0.10:8080", "EPERM"},
			{"connect 4 tcp 198.18.0.20:8080", "EPERM"},
			{"sendto 4 198.18.0.53:53", "EPERM"},
			{"connect 4 tcp 127.0.0.1:9090", "EPERM"}, // the admin listener
		} {
			if got := p.Do(t, s.cmd); got != s.want {
				t.Fatalf("app (pid %d): %s: got %q, want %q", p.Pid(), s.cmd, got, s.want)
			}
		}
	}
	// A cgroup below the sidecar's is exempt like the sidecar itself: its connects reach
	// the upstream (refused there, by the host, not by the kernel hooks), none redirected.
	for _, s := range []struct{ cmd, want string }{
		{"connect 4 tcp 198.18.0.20:8080", "ECONNREFUSED"},
		{"sendto 4 198.18.0.53:53", "OK"},
	} {
		if got := sidecarChild.Do(t, s.cmd); got != s.want {
			t.Fatalf("below the sidecar's cgroup: %s: got %q, want %q (exempt)", s.cmd, got, s.want)
		}
	}

	// The explicit proxy: the sidecar's own connection to the upstream must pass the
	// programs on the pod's cgroup.
	r := w.CurlIn(t, func(ctx context.Context, name string, args ...string) *exec.Cmd {
		return cgs.app.Command(ctx, w.Sidecar, name, args...)
	}, "-x", a.ProxyURL.String(), "-o", "/dev/null", "-w", "%{http_code}", "http://allowed.test/pod-proxy")
	if r.ExitCode != 0 || strings.TrimSpace(r.Stdout) != "200" {
		t.Fatalf("app through the proxy: exit %d, %q %s", r.ExitCode, r.Stdout, r.Stderr)
	}
	// The DNS path: the sidecar's own query to the upstream resolver passes (and the
	// transparent listener checks original destinations against the filter's answers).
	if got := grandchild.Do(t, "resolve allowed.test 127.0.0.1:5353"); got != "OK 198.18.0.10" {
		t.Fatalf("app resolve through the DNS filter: got %q", got)
	}
	if n := w.DNS.Queries(testnet.NameAllowed); n == 0 {
		t.Fatal("the upstream resolver got no query from the sidecar")
	}
	// The transparent path: no proxy variables, the kernel redirects the app's connect.
	r = sandboxCurl(t, w, cgs.app, "--resolve", "allowed.test:80:198.18.0.10", "-o", "/dev/null", "-w", "%{http_code}", "http://allowed.test/pod-transparent")
	if r.ExitCode != 0 || strings.TrimSpace(r.Stdout) != "200" {
		t.Fatalf("app through the transparent proxy: exit %d, %q %s", r.ExitCode, r.Stdout, r.Stderr)
	}

	paths := []string{}
	for _, req := range w.Allowed.Requests() {
		paths = append(paths, req.Path)
	}
	if strings.Join(paths, ",") != "/pod-proxy,/pod-transparent" {
		t.Fatalf("allowed upstream saw %v, want the proxied and the transparent request", paths)
	}
	if n := len(w.Denied.Requests()); n != 0 {
		t.Fatalf("denied upstream saw %d requests", n)
	}
	a.WaitEvent(t, "kernel deny of the app's direct connect", func(e testnet.AuditEvent) bool {
		return e.Kind == "connect" && e.Decision == "deny" && e.Destination == "198.18.0.20:8080" && strings.HasPrefix(e.Reason, "kernel_")
	})
}

// TestPodModeHostCgroupNamespace runs the sidecar in the host's cgroup namespace (its
// /proc/self/cgroup shows the full path), transparent mode off: an allowed DNS answer is
// what opens the address to the app.
func TestPodModeHostCgroupNamespace(t *testing.T) {
	w, cgs, a := podSetup(t, false, "--transparent-addr", "off")
	p := testnet.StartSandboxProbe(t, cgs.app.Child(t, "worker"), w.Sidecar)
	steps := []struct{ cmd, want string }{
		{"connect 4 tcp 198.18.0.10:80", "EPERM"},
		{"resolve allowed.test 127.0.0.1:5353", "OK 198.18.0.10"},
		{"connect 4 tcp 198.18.0.10:80", "OK"},
		{"connect 4 tcp 198.18.0.10:8080", "EPERM"}, // the rule allows ports 80 and 443 only
		{"connect 4 tcp 198.18.0.20:80", "EPERM"},
	}
	for _, s := range steps {
		if got := p.Do(t, s.cmd); got != s.want {
			t.Fatalf("app: %s: got %q, want %q", s.cmd, got, s.want)
		}
	}
	r := w.CurlIn(t, func(ctx context.Context, name string, args ...string) *exec.Cmd {
		return cgs.app.Command(ctx, w.Sidecar, name, args...)
	}, "-x", a.ProxyURL.String(), "-o", "/dev/null", "-w", "%{http_code}", "http://allowed.test/pod-host-ns")
	if r.ExitCode != 0 || strings.TrimSpace(r.Stdout) != "200" {
		t.Fatalf("app through the proxy: exit %d, %q %s", r.ExitCode, r.Stdout, r.Stderr)
	}
}

// TestPodModeRefusesWithoutPod starts the sidecar in a top-level cgroup: its parent is the
// root cgroup, which pod mode must never enforce. It exits 1 with one line.
func TestPodModeRefusesWithoutPod(t *testing.T) {
	privtest.Require(t, "nsenter", "unshare")
	root, err := testnet.Cgroup2Root()
	if err != nil {
		t.Fatal(err)
	}
	w := testnet.NewWorld(t)
	cg := testnet.NewCgroup(t)
	policy := w.WriteFile(t, "policy.yaml", []byte(kernelPolicy))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := w.Sidecar.CommandHostMounts(ctx, "unshare", "--cgroup", "--", airlockBinary(t), "run",
		"--policy", policy, "--state-dir", t.TempDir(), "--sandbox", "e2e-pod-refuse",
		"--pod-cgroup", "--cgroup-root", root, "--environment", "production")
	dir, err := os.Open(cg.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd()), Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("got %v, want exit 1: %s", err, out)
	}
	if !strings.Contains(string(out), "--pod-cgroup: cannot find this pod's cgroup") || !strings.Contains(string(out), "root cgroup") {
		t.Fatalf("output %q, want the refusal", out)
	}
	if _, err := os.Stat("/sys/fs/bpf/airlock/e2e-pod-refuse"); err == nil {
		t.Fatal("a refused start left pins")
	}
}
