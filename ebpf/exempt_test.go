//go:build linux

package ebpf

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

	"github.com/airlock-dev/airlock/test/privtest"
	"github.com/airlock-dev/airlock/test/testnet"
)

func TestExemptCgroupIsLeftAlone(t *testing.T) {
	f := newFixture(t, nil)
	sidecar := f.cg.Child(t, "sidecar")
	app := f.cg.Child(t, "app")
	sidecarSub := sidecar.Child(t, "init")
	appSub := app.Child(t, "worker")
	f.enf.Close()
	f.cfg.ExemptCgroup = sidecar.Path
	f.open()

	before, err := f.enf.Counters()
	if err != nil {
		t.Fatal(err)
	}
	for _, cg := range []*testnet.Cgroup{sidecar, sidecarSub} {
		p := f.probe(cg)
		for _, s := range []struct{ cmd, want string }{
			{"connect 4 tcp 198.18.0.10:80", "OK"},
			{"connect 6 tcp [2001:db8::10]:80", "OK"},
			{"sendto 4 198.18.0.53:53", "OK"},
			{"socket 2 3 1", "OK"}, // a raw ICMP socket: sock_create passes it too
			{"hold c 4 198.18.0.10:8080", "OK"},
			{"echo c", "OK"}, // the egress program lets its packets through
		} {
			if got := p.Do(t, s.cmd); got != s.want {
				t.Fatalf("exempt %s: %s: got %s, want %s", filepath.Base(cg.Path), s.cmd, got, s.want)
			}
		}
	}
	after, err := f.enf.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("exempt traffic touched the counters: before %+v, after %+v", before, after)
	}
	if n, err := f.enf.allowEntries(); err != nil || n != 0 {
		t.Fatalf("allow map: %d entries (%v), want 0", n, err)
	}

	for _, cg := range []*testnet.Cgroup{app, appSub, f.cg} {
		p := f.probe(cg)
		for _, s := range []struct{ cmd, want string }{
			{"connect 4 tcp 198.18.0.10:80", "EPERM"},
			{"sendto 4 198.18.0.53:53", "EPERM"},
			{"socket 2 3 1", "EPERM"},
			{"connect 4 tcp 127.0.0.1:3128", "OK"},
		} {
			if got := p.Do(t, s.cmd); got != s.want {
				t.Fatalf("enforced %s: %s: got %s, want %s", cg.Path, s.cmd, got, s.want)
			}
		}
	}

	// A sidecar started without the exemption takes it away.
	f.enf.Close()
	f.cfg.ExemptCgroup = ""
	f.open()
	if got := f.probe(sidecar).Do(t, "connect 4 tcp 198.18.0.10:80"); got != "EPERM" {
		t.Fatalf("after a restart without the exemption: got %s, want EPERM", got)
	}
}

func TestExemptCgroupMustLieBelow(t *testing.T) {
	privtest.Require(t)
	cg := testnet.NewCgroup(t)
	other := testnet.NewCgroup(t)
	for _, exempt := range []string{cg.Path, other.Path, filepath.Dir(cg.Path)} {
		_, err := Open(Config{Sandbox: "exempt-invalid", Cgroup: cg.Path, ExemptCgroup: exempt, PinRoot: testPinRoot})
		if !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("exempt %s for cgroup %s: got %v, want ErrInvalidConfig", exempt, cg.Path, err)
		}
	}
	root, err := testnet.Cgroup2Root()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Config{Sandbox: "exempt-invalid", Cgroup: root, ExemptCgroup: cg.Path, PinRoot: testPinRoot}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("the root cgroup: got %v, want ErrInvalidConfig", err)
	}
	if err := Remove(testPinRoot, "exempt-invalid"); err != nil {
		t.Fatal(err)
	}
}

func TestCgroupLevel(t *testing.T) {
	privtest.Require(t)
	root, err := testnet.Cgroup2Root()
	if err != nil {
		t.Fatal(err)
	}
	cg := testnet.NewCgroup(t)
	sub := cg.Child(t, "a").Child(t, "b")
	for dir, want := range map[string]uint32{root: 0, cg.Path: 1, sub.Path: 3} {
		if got, err := cgroupLevel(dir); err != nil || got != want {
			t.Errorf("cgroupLevel(%s) = %d, %v; want %d", dir, got, err, want)
		}
	}
	if _, err := cgroupLevel(t.TempDir()); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("a directory off the cgroup filesystem: got %v, want ErrInvalidConfig", err)
	}
}

// envFindPod makes the test binary print FindPodCgroup's answer for the cgroup root in
// envFindPodRoot and exit.
const (
	envFindPod     = "AIRLOCK_EBPF_TEST_FIND_POD"
	envFindPodRoot = "AIRLOCK_EBPF_TEST_FIND_POD_ROOT"
)

func runFindPodIfRequested() {
	if os.Getenv(envFindPod) != "1" {
		return
	}
	pc, err := FindPodCgroup(os.Getenv(envFindPodRoot))
	if err != nil {
		fmt.Printf("ERR %v\n", err)
	} else {
		fmt.Printf("OK %s %s\n", pc.Pod, pc.Self)
	}
	os.Exit(0)
}

// findPodIn runs FindPodCgroup in a process started in cg, in a private cgroup namespace
// (rooted at cg, as a container's) when privateNS.
func findPodIn(t *testing.T, cg *testnet.Cgroup, root string, privateNS bool) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.Open(cg.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, self)
	if privateNS {
		// unshare runs in cg already, so the new namespace is rooted at cg ("0::/").
		cmd = exec.CommandContext(ctx, "unshare", "--cgroup", "--", self)
	}
	cmd.Env = []string{envFindPod + "=1", envFindPodRoot + "=" + root, "PATH=" + os.Getenv("PATH")}
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd()), Pdeathsig: syscall.SIGKILL}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("find pod cgroup: %v (%s)", err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestFindPodCgroup(t *testing.T) {
	privtest.Require(t, "unshare")
	root, err := testnet.Cgroup2Root()
	if err != nil {
		t.Fatal(err)
	}
	pod := testnet.NewCgroup(t)
	sidecar := pod.Child(t, "sidecar")
	want := "OK " + pod.Path + " " + sidecar.Path
	for _, privateNS := range []bool{false, true} {
		if got := findPodIn(t, sidecar, root, privateNS); got != want {
			t.Errorf("private cgroup namespace %v: got %q, want %q", privateNS, got, want)
		}
	}
	// A process in a top-level cgroup has no pod around it: the parent would be the root.
	if got := findPodIn(t, pod, root, true); !strings.HasPrefix(got, "ERR ") || !strings.Contains(got, "root cgroup") {
		t.Errorf("in a top-level cgroup: got %q, want a refusal", got)
	}
	// A cgroup root that is not the hierarchy's root.
	if got := findPodIn(t, sidecar, pod.Path, true); !strings.HasPrefix(got, "ERR ") || !strings.Contains(got, "not the root") {
		t.Errorf("cgroup root %s: got %q, want a refusal", pod.Path, got)
	}
}

func TestExemptRefusesAnotherPodsPins(t *testing.T) {
	f := newFixture(t, nil)
	sidecar := f.cg.Child(t, "sidecar")
	f.enf.Close()
	f.cfg.ExemptCgroup = sidecar.Path
	f.open()

	// Another pod on the node, its sidecar started with the same sandbox name.
	other := testnet.NewCgroup(t)
	cfg := f.cfg
	cfg.Cgroup, cfg.ExemptCgroup, cfg.OnDeny = other.Path, other.Child(t, "sidecar").Path, nil
	if enf, err := Open(cfg); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "another live cgroup") {
		if enf != nil {
			enf.Close()
		}
		t.Fatalf("Open with another pod's pins: got %v, want a refusal", err)
	}
	// The first pod is untouched: still enforced, its sidecar still exempt.
	if got := f.probe(nil).Do(t, "connect 4 tcp 198.18.0.10:80"); got != "EPERM" {
		t.Fatalf("first pod after the refused Open: got %s, want EPERM", got)
	}
	if got := f.probe(sidecar).Do(t, "connect 4 tcp 198.18.0.10:80"); got != "OK" {
		t.Fatalf("first pod's sidecar after the refused Open: got %s, want OK", got)
	}
}

func TestRemoveDefunct(t *testing.T) {
	privtest.Require(t)
	root := fmt.Sprintf("/sys/fs/bpf/airlock-gc-%d", os.Getpid())
	t.Cleanup(func() { os.RemoveAll(root) })
	live := testnet.NewCgroup(t)
	gone := testnet.NewCgroup(t)
	for name, cg := range map[string]*testnet.Cgroup{"team.live": live, "team.gone": gone} {
		enf, err := Open(Config{Sandbox: name, Cgroup: cg.Path, PinRoot: root})
		if err != nil {
			t.Fatal(err)
		}
		enf.Close()
	}
	// Pod sandboxes are named NAMESPACE.POD, and bpffs refuses names with a dot: the pin
	// directories are PinDirName's.
	// A sidecar starting: maps pinned, no link yet.
	if err := os.MkdirAll(filepath.Join(root, "starting"), 0o700); err != nil {
		t.Fatal(err)
	}
	if removed, err := RemoveDefunct(root); err != nil || len(removed) != 0 {
		t.Fatalf("with every cgroup alive: removed %v, %v; want nothing", removed, err)
	}
	if err := syscall.Rmdir(gone.Path); err != nil { // the pod is deleted
		t.Fatal(err)
	}
	// The kernel detaches the links of a removed cgroup asynchronously (when its last
	// reference drops): poll for it, bounded.
	deadline := time.Now().Add(10 * time.Second)
	for {
		removed, err := RemoveDefunct(root)
		if err != nil {
			t.Fatal(err)
		}
		if len(removed) == 1 && removed[0] == "team.gone" {
			break
		}
		if len(removed) != 0 || time.Now().After(deadline) {
			t.Fatalf("after the cgroup was removed: removed %v, want [team.gone]", removed)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for name, want := range map[string]bool{"team.live": true, "starting": true, "team.gone": false} {
		if _, err := os.Stat(filepath.Join(root, PinDirName(name))); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", name, err == nil, want)
		}
	}
	if err := Remove(root, "team.live"); err != nil {
		t.Fatal(err)
	}
}

func TestCheckNodePinRoot(t *testing.T) {
	privtest.Require(t)
	if err := ensureBPFFS(testPinRoot); err != nil {
		t.Fatal(err)
	}
	if err := CheckNodePinRoot(testPinRoot + "/not-yet"); err != nil {
		t.Errorf("under the node's bpffs: %v", err)
	}
	if err := CheckNodePinRoot(t.TempDir()); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("off bpffs: got %v, want ErrInvalidConfig", err)
	}
}

// TestBPFLSMActiveReadsSecurityfs checks that the active LSMs can be read whether or not
// securityfs is mounted (a detached instance otherwise), and that the guard probe gives an
// answer consistent with it: a kernel without the BPF LSM cannot load the guard.
func TestBPFLSMActiveReadsSecurityfs(t *testing.T) {
	privtest.Require(t)
	active, err := BPFLSMActive()
	if err != nil {
		t.Fatalf("BPFLSMActive: %v", err)
	}
	if perr := ProbePacketGuard(); !active && perr == nil {
		t.Errorf("the packet guard loaded although the BPF LSM is not active")
	}
}
