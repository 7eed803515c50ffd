//go:build linux

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-dev/airlock/test/privtest"
)

// TestSandboxRunsc runs the network tests of TestSandbox on a sandbox whose container gVisor's
// runsc runs (--runtime runsc): the proxy with the env file, the transparent redirect and
// the DNS filter without it, the kernel's denials, exec's exit codes and stdin. runsc runs
// with the host network of the sandbox's namespace, in the sandbox's cgroup, as the sandbox's
// own host uid: every host process of the container is there and runs as that uid, and what
// the sandbox writes to an rw mount is that uid's.
func TestSandboxRunsc(t *testing.T) {
	privtest.Require(t, "runsc")
	e := newLongSandboxEnv(t)
	name := e.name("runsc")
	info := e.create(t, name, "--runtime", "runsc")
	t.Run("Proxied", func(t *testing.T) { testSandboxProxied(t, e, name, info) })
	t.Run("Transparent", func(t *testing.T) { testSandboxTransparent(t, e, name) })
	t.Run("Exec", func(t *testing.T) { testRunscExec(t, e, name, info) })
}

// testRunscExec: exit codes and stdin pass through runsc; the container's host processes
// (runsc's Sentry and Gofer) are in the sandbox's cgroup and network namespace and run as the
// sandbox's uid, as do the files it writes; --user asks for an id runsc does not map.
func testRunscExec(t *testing.T, e *sbEnv, name string, info sandboxInfo) {
	if r := e.sh(t, name, "exit 7"); r.Code != 7 {
		t.Errorf("exit code: %s, want 7", r)
	}
	if r := e.sh(t, name, "kill -TERM $$"); r.Code != 128+int(syscall.SIGTERM) {
		t.Errorf("killed by SIGTERM: %s, want %d", r, 128+int(syscall.SIGTERM))
	}
	r := e.exec(t, nil, name, nil, strings.NewReader("line one\nline two\n"), "sh", "-c", "tr a-z A-Z")
	if r.Code != 0 || r.Stdout != "LINE ONE\nLINE TWO\n" {
		t.Errorf("stdin through exec: %s", r)
	}
	r = e.sh(t, name, "touch "+e.inside("runsc-owned-"+name)+" && chmod 4755 "+e.inside("runsc-owned-"+name))
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(e.out, "runsc-owned-"+name), &st); r.Code != 0 || err != nil {
		t.Fatalf("write to the rw mount: %s, %v", r, err)
	}
	uid := st.Uid
	if uid < 0x10000 || st.Gid != uid {
		t.Errorf("a file the sandbox's root wrote is owned by %d:%d on the host, want its own unprivileged uid", st.Uid, st.Gid)
	}
	procs, err := os.ReadFile(filepath.Join(info.Cgroup, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	netns := nsInode(t, "/run/netns/airlock-"+name)
	hostNetns, _ := os.Readlink("/proc/self/ns/net")
	seen := map[string]bool{}
	for _, pid := range strings.Fields(string(procs)) {
		status, _ := os.ReadFile("/proc/" + pid + "/status")
		cmdline, _ := os.ReadFile("/proc/" + pid + "/cmdline")
		what, _, _ := strings.Cut(string(cmdline), "\x00") // runsc-sandbox, runsc-gofer, "" for the Sentry's stubs
		seen[what] = true
		if !strings.Contains(string(status), fmt.Sprintf("\nUid:\t%d\t%d\t%d\t%d\n", uid, uid, uid, uid)) {
			t.Errorf("process %s (%q) in the sandbox's cgroup does not run as %d:\n%s", pid, what, uid, status)
		}
		// The Gofer, which serves files and has no network, gets an empty namespace of its own.
		ns, _ := os.Readlink("/proc/" + pid + "/ns/net")
		if (what != "runsc-gofer" && ns != netns) || ns == hostNetns {
			t.Errorf("process %s (%q) in the sandbox's cgroup is in %s; the sandbox's netns is %s", pid, what, ns, netns)
		}
	}
	if !seen["runsc-sandbox"] || !seen["runsc-gofer"] {
		t.Errorf("the sandbox's cgroup holds %v: want runsc's sandbox and gofer", seen)
	}
	r = e.exec(t, []string{"--user", "1000"}, name, nil, nil, "true")
	if r.Code != 1 || !strings.Contains(r.Stderr, "maps only the sandbox's root") {
		t.Errorf("exec --user 1000 under runsc: %s; want a refusal naming the one mapped uid", r)
	}
}

// nsInode is "net:[INODE]" of the network namespace bound at p.
func nsInode(t *testing.T, p string) string {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return "net:[" + strconv.FormatUint(st.Ino, 10) + "]"
}
