//go:build linux

package e2e

import (
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-dev/airlock/ebpf"
)

// The adversarial tests of issue 27, by class: from inside a sandbox created with no
// isolation flag, try what a hostile agent would, in several spellings each, and check that
// nothing of the host, of another sandbox or of airlock itself is reached. Every attempt is
// harmless where it works (files are opened for writing but never written, signals are 0 and
// SIGCONT, what gets created is removed), so the tests can run against code that does not
// isolate. They run on runc and on crun.

// hostSecrets are files and a process the host-file tests plant outside any sandbox.
type hostSecrets struct {
	dir     string // a host directory under the host's /tmp
	secret  string // dir/secret: mode 0600, root's, holds secretMark
	public  string // dir/public: mode 0644, holds publicMark (the host's /tmp, not private)
	holder  int    // pid of a host process whose working directory is dir
	secMark string
	pubMark string
}

func plantHostSecrets(t *testing.T, name string) hostSecrets {
	t.Helper()
	s := hostSecrets{dir: t.TempDir(), secMark: "hostile-secret-" + name, pubMark: "hostile-public-" + name}
	if err := os.Chmod(s.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s.secret, s.public = filepath.Join(s.dir, "secret"), filepath.Join(s.dir, "public")
	if err := os.WriteFile(s.secret, []byte(s.secMark+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.public, []byte(s.pubMark+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	holder := exec.Command("cat") // blocks on its stdin until the test ends
	holder.Dir = s.dir
	in, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); _ = holder.Wait() })
	s.holder = holder.Process.Pid
	return s
}

// hostShadowLine is the first line of the host's /etc/shadow (what a read would leak).
func hostShadowLine(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/etc/shadow")
	if err != nil {
		t.Fatalf("read the host's /etc/shadow: %v", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return line
}

// TestSandboxHostileHostFiles: the host's files. Root-only files (/etc/shadow, a 0600 file,
// /root) cannot be read, root-owned directories (/usr/local/bin, /etc, /) cannot be written,
// the host's /tmp is neither seen nor written — directly, through /proc/PID/root and
// /proc/PID/cwd, through every mount point mountinfo lists, symlinks, hard links, "..", and
// open_by_handle_at.
func TestSandboxHostileHostFiles(t *testing.T) {
	runHostileVariants(t, hostileRuntimes, true, func(t *testing.T, h *hostile) {
		name, _ := h.create(t, "files")
		s := plantHostSecrets(t, name)
		shadow := hostShadowLine(t)
		written := []string{"/usr/local/bin/" + name, "/etc/" + name, "/" + name, "/" + name + ".d",
			"/usr/local/bin/" + name + "-p", "/usr/local/bin/" + name + "-d", "/usr/local/bin/" + name + "-s",
			"/tmp/" + name}
		for _, l := range []string{"l1", "l2", "l3", "l4", "h1", "h2"} {
			written = append(written, "/tmp/"+name+"-"+l)
		}
		removeOnCleanup(t, append(written, filepath.Join(h.probeDir, name))...)

		hp := fmt.Sprintf("/proc/%d", s.holder)
		script := scriptPrelude + strings.NewReplacer("$N", name, "$SECRET", s.secret, "$PUBLIC", s.public,
			"$HP", hp, "$PROBE", h.probe).Replace(`
rd r.shadow /etc/shadow
rd r.gshadow /etc/gshadow
rd r.shadow_dotdot /tmp/../../../etc/shadow
rd r.shadow_proc1 /proc/1/root/etc/shadow
rd r.shadow_self /proc/self/root/etc/shadow
for f in /etc/ssl/private/* /etc/sudoers /etc/ssh/ssh_host_*_key /etc/krb5.keytab; do [ -e "$f" ] && rd r.etc_secret "$f"; done
rd r.secret $SECRET
rd r.secret_proc1 /proc/1/root$SECRET
rd r.secret_cwd $HP/cwd/secret
rd r.secret_root $HP/root$SECRET
rd r.public $PUBLIC
for d in /proc/[0-9]*; do cat $d/cwd/secret $d/root$SECRET 2>/dev/null; done | head -c 200 | sed 's/^/scan=ok:/'; echo
awk '{print $5}' /proc/self/mountinfo | while read mp; do cat "$mp$SECRET" 2>/dev/null | sed "s|^|mountinfo=ok:$mp:|"; done
ln -s $SECRET /tmp/$N-l1 2>/dev/null; rd r.symlink_secret /tmp/$N-l1
ln -s $HP/cwd /tmp/$N-l2 2>/dev/null; rd r.symlink_cwd /tmp/$N-l2/secret
ln -s / /tmp/$N-l3 2>/dev/null; rd r.symlink_dotdot /tmp/$N-l3/../../etc/shadow
ln /etc/shadow /tmp/$N-h1 2>/dev/null; rd r.hardlink_shadow /tmp/$N-h1
ln $SECRET /tmp/$N-h2 2>/dev/null; rd r.hardlink_secret /tmp/$N-h2
echo "ls.root=entries:$(ls -A /root 2>/dev/null | tr '\n' ',')"
echo "ls.home=entries:$(ls -A /home 2>/dev/null | tr '\n' ',')"
$PROBE handle /usr
for f in /proc/[0-9]*/fd/* /proc/[0-9]*/cwd; do [ -d "$f" ] && cat "$f/../../../../../../../../../etc/shadow" "$f/../../../../../../../../..$SECRET" 2>/dev/null; done | head -c 200 | sed 's/^/fd_dotdot=ok:/'; echo
try w.usr_local_bin sh -c ': >> /usr/local/bin/$N'
try w.etc sh -c ': >> /etc/$N'
try w.root_file sh -c ': >> /$N'
try w.root_dir mkdir /$N.d
try w.proc1root sh -c ': >> /proc/1/root/usr/local/bin/$N-p'
try w.dotdot sh -c ': >> /tmp/../usr/local/bin/$N-d'
ln -s /usr/local/bin /tmp/$N-l4 2>/dev/null; try w.symlink sh -c ': >> /tmp/$N-l4/$N-s'
wr w.usr_bin_env /usr/bin/env
wr w.secret $SECRET
wr w.secret_cwd $HP/cwd/secret
try w.ro_mount sh -c ': >> $(dirname $PROBE)/$N'
wr w.ro_mount_file $PROBE
: >> /tmp/$N 2>/dev/null
echo done=1
`)
		r := h.ownRoot(t, h.sh(t, name, script), "w.usr_local_bin", "w.etc", "w.root_file", "w.root_dir",
			"w.proc1root", "w.dotdot", "w.symlink", "w.usr_bin_env")
		const class = "host files"
		wantNoneSucceeded(t, class, r, "r.shadow", "r.secret", "r.secret_cwd", "r.public", "r.symlink_cwd",
			"r.hardlink_shadow", "w.usr_local_bin", "w.etc", "w.root_file", "w.root_dir", "w.proc1root",
			"w.symlink", "w.usr_bin_env", "w.secret", "w.ro_mount", "w.ro_mount_file", "done")
		wantNoSecret(t, class, r.Stdout, shadow, s.secMark, s.pubMark, "PRIVATE KEY")
		wantAbsentOnHost(t, class, append(written, filepath.Join(h.probeDir, name))...)
		wantNoHostEntries(t, class, r.Stdout, "ls.root", "/root")
		wantNoHostEntries(t, class, r.Stdout, "ls.home", "/home")
	})
}

// wantNoHostEntries fails t when the sandbox's listing (the line key=entries:a,b,) names an
// entry of the host's dir.
func wantNoHostEntries(t *testing.T, class, out, key, dir string) {
	t.Helper()
	host, err := os.ReadDir(dir)
	if err != nil {
		return // nothing to leak
	}
	var listed string
	for _, a := range attempts(out) {
		if a.name == key {
			listed = strings.TrimPrefix(a.result, "entries:")
		}
	}
	inside := map[string]bool{}
	for _, n := range strings.Split(listed, ",") {
		inside[n] = true
	}
	for _, e := range host {
		if inside[e.Name()] {
			t.Errorf("%s: the sandbox lists the host's %s/%s (it sees %s)", class, dir, e.Name(), listed)
		}
	}
}

// TestSandboxHostileOtherSandboxes: another sandbox. From sandbox A, B's private /tmp file,
// its processes (found by command line or by their host pid), their /proc/PID/root, cwd and
// environ are out of reach; A cannot signal or ptrace them.
func TestSandboxHostileOtherSandboxes(t *testing.T) {
	runHostileVariants(t, hostileRuntimes, true, func(t *testing.T, h *hostile) {
		a, _ := h.create(t, "sba")
		b, _ := h.create(t, "sbb")
		bMark := "hostile-b-secret-" + b
		marker := "hostile-held-" + b
		removeOnCleanup(t, "/dev/shm/"+b) // where B's write lands when /dev/shm is the host's
		bsh := h.hold(t, b, "echo "+bMark+" > /tmp/bfile; echo "+bMark+" > /dev/shm/"+b+"; cd /tmp", marker)
		bPid := bsh.hostPid(t)
		aUids, bUids := hostUids(t, h.hold(t, a, "", "hostile-held-"+a).hostPid(t)), hostUids(t, bPid)
		if aUids[0] == bUids[0] {
			t.Errorf("other sandboxes: A's and B's root are the same uid %s on the host, want disjoint ranges", aUids[0])
		}

		script := scriptPrelude + strings.NewReplacer("$BPID", fmt.Sprint(bPid), "$PROBE", h.probe,
			"$MARK", splitMarker(marker), "$STATE", h.stateDir, "$B", b).Replace(`
rd r.btmp /tmp/bfile
rd r.bshm /dev/shm/$B
rd r.broot /proc/$BPID/root/tmp/bfile
rd r.bcwd /proc/$BPID/cwd/bfile
rd r.benviron /proc/$BPID/environ
for d in /proc/[0-9]*; do cat $d/root/tmp/bfile $d/cwd/bfile 2>/dev/null; done | head -c 200 | sed 's/^/scan=ok:/'; echo
echo "ls.state=entries:$(ls -A $STATE/sandboxes/$B 2>/dev/null | tr '\n' ',')"
$PROBE find $MARK
for p in $($PROBE find $MARK | sed -n 's/^found=ok://p'); do $PROBE peek $p found; try kill.found kill -TERM $p; done
$PROBE peek $BPID bhost
try kill.bhost kill -TERM $BPID
echo done=1
`)
		r := h.sh(t, a, script)
		const class = "other sandboxes"
		wantNoneSucceeded(t, class, r, "r.btmp", "r.bshm", "r.broot", "r.bcwd", "bhost.signal0", "bhost.sigcont",
			"bhost.environ", "bhost.ptrace", "kill.bhost", "find", "done")
		wantNoSecret(t, class, r.Stdout, bMark)
		if !bsh.alive() {
			t.Errorf("%s: sandbox B's shell no longer answers after sandbox A's attempts:\n%s", class, r.Stdout)
		}
		h.wantHandOffHolds(t)
	})
}

// wantHandOffHolds hands a workspace one sandbox wrote to the next (issue 27, "Mounts"): the
// first plants symbolic links where the next one's --mount destinations land (to a host
// directory, and to /etc); creating the next one may fail or mount inside its own view, but
// must not create or mount anything on the host.
func (h *hostile) wantHandOffHolds(t *testing.T) {
	t.Helper()
	const class = "other sandboxes (a handed-over workspace)"
	ws, target := t.TempDir(), t.TempDir()
	for _, d := range []string{ws, target} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	first, _ := h.create(t, "ws", "--mount", ws+":/ws:rw")
	r := h.sh(t, first, "ln -s "+target+"/x /ws/cache && ln -s /etc /ws/etc && echo planted")
	if r.Code != 0 || !strings.Contains(r.Stdout, "planted") {
		t.Fatalf("%s: plant the links: %s", class, r)
	}
	for _, dest := range []string{"/ws/cache", "/ws/etc/" + first + "-next"} {
		next := h.name("wsnext")
		h.cleanupSandbox(t, next)
		args := h.createArgs(h.flags("--mount", ws+":/ws:rw", "--mount", h.probeDir+":"+dest+":ro")...)
		r := h.run(t, nil, createEnv(), append([]string{"sandbox", "create", next}, args...)...)
		t.Logf("%s: create with --mount at %s, a link the first sandbox planted: exit %d %s", class, dest, r.Code, lastLine(r.Stderr))
	}
	removeOnCleanup(t, "/etc/"+first+"-next")
	wantAbsentOnHost(t, class, filepath.Join(target, "x"), "/etc/"+first+"-next")
	for _, mi := range []string{"/proc/1/mountinfo", "/proc/self/mountinfo"} {
		b, err := os.ReadFile(mi)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{target, "/etc/" + first} {
			if strings.Contains(string(b), " "+p) {
				t.Errorf("%s: the host's %s shows a mount at %s", class, mi, p)
			}
		}
	}
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestSandboxHostileAirlock: airlock's own processes and files. The sidecar and supervisor are
// invisible (by command line and by host pid), cannot be signalled, read (cmdline, environ with
// the upstream token) or traced; the state directory and the sidecar's CA key cannot be read,
// also through /proc/PID/root; the airlock binary a supervisor re-runs cannot be replaced.
func TestSandboxHostileAirlock(t *testing.T) {
	runHostile(t, func(t *testing.T, h *hostile) {
		name, info := h.create(t, "airlock")
		if info.SidecarPid <= 0 || info.SupervisorPid <= 0 {
			t.Fatalf("list shows no sidecar or supervisor pid: %+v", info)
		}
		binBefore := fileSum(t, h.bin)
		binDirFile := filepath.Join(filepath.Dir(h.bin), name)
		removeOnCleanup(t, binDirFile)
		caKey := filepath.Join(h.stateDir, "sandboxes", name, "sidecar", "ca.key")

		script := scriptPrelude + loopbackPrelude + strings.NewReplacer("$SC", fmt.Sprint(info.SidecarPid),
			"$ADMIN", info.AdminAddr, "$PY", h.python,
			"$SV", fmt.Sprint(info.SupervisorPid), "$PROBE", h.probe, "$STATEMARK", splitMarker(h.stateDir),
			"$BINMARK", splitMarker(h.bin), "$STATE", h.stateDir, "$CAKEY", caKey, "$BINDIRFILE", binDirFile,
			"$BIN", h.bin).Replace(`
$PROBE find $STATEMARK
$PROBE find $BINMARK
$PROBE peek $SC sidecar
$PROBE peek $SV supervisor
rd r.sidecar_cmdline /proc/$SC/cmdline
rd r.sidecar_environ /proc/$SC/environ
echo "environ.init=$(tr '\0' ' ' < /proc/1/environ 2>/dev/null)"
echo "environ.self=$(tr '\0' ' ' < /proc/$$/environ 2>/dev/null)"
rd r.cakey $CAKEY
rd r.cakey_sidecar_root /proc/$SC/root$CAKEY
rd r.cakey_proc1 /proc/1/root$CAKEY
for d in /proc/[0-9]*; do cat $d/root$CAKEY 2>/dev/null; done | head -c 100 | sed 's/^/scan=ok:/'; echo
echo "ls.state=entries:$(ls -A $STATE $STATE/sandboxes 2>/dev/null | tr '\n' ',')"
try kill.sidecar kill -CONT $SC
try kill.supervisor kill -CONT $SV
wr w.bin $BIN
wr w.supervisor_exe /proc/$SV/exe
wr w.sidecar_root_bin /proc/$SC/root$BIN
try w.bindir sh -c ': >> $BINDIRFILE'
wr w.runc /usr/sbin/runc
wr w.crun /usr/bin/crun
for e in /proc/[0-9]*/exe; do wr w.proc_exe "$e"; done | grep '=ok' | head -n 5
echo "ls.run=entries:$(ls -A /run/airlock /run/netns 2>/dev/null | tr '\n' ',')"
try admin.loopback curl -sS --max-time 5 -o /dev/null http://$ADMIN/healthz
loopback_probe $PY
echo done=1
`)
		r := h.sh(t, name, script)
		const class = "airlock processes and files"
		wantNoneSucceeded(t, class, r, "sidecar.signal0", "sidecar.environ", "sidecar.ptrace", "supervisor.signal0",
			"supervisor.ptrace", "r.sidecar_environ", "r.cakey_sidecar_root", "kill.sidecar", "w.bin",
			"w.supervisor_exe", "w.bindir", "find", "admin.loopback", "done")
		// The sandbox's loopback is its own: it works, and the sidecar's admin listener (on
		// the host's loopback) is not on it.
		wantLoopbackWorks(t, class, r)
		wantNoSecret(t, class, r.Stdout, sbToken, sbOpenAIKey, "PRIVATE KEY", h.stateDir+"/sandboxes/"+name+"/sidecar",
			"E2E_SANDBOX_TOKEN", "E2E_OPENAI_KEY")
		if strings.Contains(attemptResult(r.Stdout, "ls.state"), name) {
			t.Errorf("%s: the sandbox lists the state directory: %s", class, attemptResult(r.Stdout, "ls.state"))
		}
		if run := attemptResult(r.Stdout, "ls.run"); run != "entries:" {
			t.Errorf("%s: the sandbox lists airlock's /run/airlock or the host's /run/netns: %s", class, run)
		}
		if got := fileSum(t, h.bin); got != binBefore {
			t.Errorf("%s: the airlock binary %s changed", class, h.bin)
		}
		wantAbsentOnHost(t, class, binDirFile)
		if after, ok := h.info(t, name); !ok || after.Health != "ok" || after.SidecarPid != info.SidecarPid {
			t.Errorf("%s: after the attempts the sandbox is %+v, want health ok and the same sidecar", class, after)
		}

		// A process the sandbox detaches (setsid, blocked on a fifo nobody opens) must not
		// outlive delete.
		daemon := "hostile-daemon-" + name
		// It says "up" through a second fifo before it blocks, so it runs when exec returns.
		f, up := "/tmp/"+daemon, "/tmp/"+daemon+"-up"
		removeOnCleanup(t, f, up) // where they land if /tmp is the host's
		r = h.sh(t, name, "mkfifo "+f+" "+up+" && (setsid sh -c 'echo up > "+up+"; read x < "+f+"' "+daemon+
			" </dev/null >/dev/null 2>&1 &) && read x < "+up+" && echo started")
		if r.Code != 0 || len(hostShells(t, daemon)) == 0 {
			t.Fatalf("%s: start a detached process: %s; on the host: %v", class, r, hostShells(t, daemon))
		}
		if r := h.run(t, nil, nil, "sandbox", "delete", "--state-dir", h.stateDir, name); r.Code != 0 {
			t.Fatalf("sandbox delete %s: %s", name, r)
		}
		if left := hostShells(t, daemon); len(left) > 0 {
			t.Errorf("%s: the sandbox's detached process %v outlived delete", class, left)
			for _, pid := range left {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
}

// attemptResult is the result of the last line named key ("" when there is none).
func attemptResult(out, key string) string {
	var res string
	for _, a := range attempts(out) {
		if a.name == key {
			res = a.result
		}
	}
	return res
}

func fileSum(t *testing.T, path string) [sha256.Size]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// hostNamespaces are the namespaces a sandbox must not share with the host, read from this
// test process (which runs in the host's).
var hostNamespaces = []string{"user", "pid", "ipc", "uts", "mnt"}

// TestSandboxHostilePrivilege: privilege. Root inside is an unprivileged uid outside (the
// sandbox's process on the host, its uid_map, the owner of a file it writes into an rw
// mount); the sandbox has its own user, PID, IPC, UTS and mount namespaces; no capability,
// no_new_privs and a seccomp filter; `unshare -Ur` inside gains nothing of the host; no host
// device node, kernel setting (/proc/sys, /sys/kernel/mm, sysrq), cgroup or bpffs entry can
// be opened for writing; mknod, mount and raw sockets fail.
func TestSandboxHostilePrivilege(t *testing.T) {
	runHostileVariants(t, hostileRuntimes, true, func(t *testing.T, h *hostile) {
		work := t.TempDir()
		if err := os.Chmod(work, 0o777); err != nil { // any uid may write: the test is who owns what it writes
			t.Fatal(err)
		}
		name, _ := h.create(t, "priv", "--mount", work+":/work:rw")
		shadow := hostShadowLine(t)
		created := []string{"/usr/local/bin/" + name + "-u", "/sys/fs/cgroup/memory/" + name,
			"/sys/fs/cgroup/pids/" + name, "/sys/fs/cgroup/unified/" + name, "/sys/fs/bpf/" + name}
		removeOnCleanup(t, created...)

		// The uid outside: the sandbox's shell, seen from the host.
		sh := h.hold(t, name, "", "hostile-held-"+name)
		if uids := hostUids(t, sh.hostPid(t)); len(uids) == 0 || uids[0] == "0" || uids[1] == "0" {
			t.Errorf("privilege: the sandbox's root is uid %v on the host, want an unprivileged uid", uids)
		}
		hostNS := map[string]string{}
		for _, ns := range hostNamespaces {
			hostNS[ns], _ = os.Readlink("/proc/self/ns/" + ns)
		}

		script := scriptPrelude + strings.NewReplacer("$N", name, "$PROBE", h.probe).Replace(privilegeScript)
		r := h.ownRoot(t, h.sh(t, name, script), "unshare.w")
		const class = "privilege"
		wantNoneSucceeded(t, class, r, "uidmap", "unshare.shadow", "unshare.w", "mknod.char", "mknod.block",
			"mount.bind", "socket.raw_icmp", "dev.kmsg_w", "sys.core_pattern", "sys.drop_caches", "sysrq",
			"mm.thp", "cg.mkdir_unified", "cg.procs_root", "bpf.mkdir", "done")
		wantNoSecret(t, class, r.Stdout, shadow)
		wantAbsentOnHost(t, class, created...)
		out := r.Stdout
		for _, want := range []string{"CapEff:\t0000000000000000", "CapBnd:\t0000000000000000",
			"CapPrm:\t0000000000000000", "CapAmb:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: want %q in the sandbox's /proc/self/status:\n%s", class, want, out)
			}
		}
		for _, ns := range hostNamespaces {
			if inside := attemptResult(out, "ns."+ns); inside == "" || inside == hostNS[ns] {
				t.Errorf("%s: the sandbox's %s namespace is %q, the host's %q: want its own", class, ns, inside, hostNS[ns])
			}
		}
		if pins := attemptResult(out, "ls.bpf"); strings.Contains(pins, filepath.Base(ebpf.DefaultPinRoot)) {
			t.Errorf("%s: the sandbox sees airlock's eBPF pins in /sys/fs/bpf: %s", class, pins)
		}
		var extra []string
		devs := strings.Split(attemptResult(out, "devs"), ",")
		if !slices.Contains(devs, "null") {
			t.Errorf("%s: the sandbox's device listing has no /dev/null, so it proves nothing: %q", class, devs)
		}
		for _, dev := range devs {
			if dev != "" && !containerDevice(dev) {
				extra = append(extra, dev)
			}
		}
		if len(extra) > 0 {
			t.Errorf("%s: the sandbox has device nodes beyond a container's usual ones: /dev/{%s}", class, strings.Join(extra, ","))
		}
		// A file written into an rw mount belongs to the sandbox's mapped uid, not to root.
		for _, f := range []string{"owned", "owned.d"} {
			fi, err := os.Lstat(filepath.Join(work, f))
			if err != nil {
				t.Errorf("%s: the sandbox could not write %s into its rw mount: %v", class, f, err)
				continue
			}
			if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid == 0 {
				t.Errorf("%s: %s written by the sandbox into its rw mount is owned by root on the host", class, f)
			}
		}
	})
}

// privilegeScript is the privilege class's script; $N is the sandbox's name, $PROBE the probe.
const privilegeScript = `
echo "uidmap=$(awk 'NR==1 && $2==0 {print "ok:" $0}' /proc/self/uid_map)"
grep -E '^(CapEff|CapBnd|CapPrm|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status
for ns in user pid ipc uts mnt; do echo "ns.$ns=$(readlink /proc/self/ns/$ns)"; done
touch /work/owned; mkdir /work/owned.d
unshare -Ur sh -c 'cat /etc/shadow; cat /proc/1/root/etc/shadow' 2>/dev/null | head -c 200 | sed 's/^/unshare.shadow=ok:/'; echo
echo "unshare.shadow=checked"
unshare -Ur sh -c ': >> /usr/local/bin/$N-u' 2>/dev/null && echo unshare.w=ok || echo unshare.w=denied
unshare -Urm sh -c 'mount --bind /proc/1/root /mnt && cat /mnt/etc/shadow' 2>/dev/null | head -c 200 | sed 's/^/unshare.mount_shadow=ok:/'; echo
$PROBE mknod /tmp
$PROBE mount /mnt
$PROBE sockets
echo "devs=$(for d in /dev/* /dev/*/* /dev/*/*/*; do [ ! -L "$d" ] && { [ -c "$d" ] || [ -b "$d" ]; } && echo "${d#/dev/}"; done | tr '\n' ',')"
for d in /dev/* /dev/*/*; do [ -b "$d" ] && try blk.read head -c 512 "$d"; done
try dev.kmsg_w sh -c '[ -c /dev/kmsg ] && : >> /dev/kmsg'
try dev.kmsg_r sh -c '[ -c /dev/kmsg ] && : < /dev/kmsg'
try dev.mem sh -c '[ -c /dev/mem ] && : < /dev/mem'
wr sys.core_pattern /proc/sys/kernel/core_pattern
wr sys.modprobe /proc/sys/kernel/modprobe
wr sys.drop_caches /proc/sys/vm/drop_caches
wr sys.overcommit /proc/sys/vm/overcommit_memory
wr sysrq /proc/sysrq-trigger
wr mm.thp /sys/kernel/mm/transparent_hugepage/enabled
wr mm.ksm /sys/kernel/mm/ksm/run
wr sys.uevent_helper /sys/kernel/uevent_helper
try cg.mkdir_memory mkdir /sys/fs/cgroup/memory/$N
try cg.mkdir_pids mkdir /sys/fs/cgroup/pids/$N
try cg.mkdir_unified mkdir /sys/fs/cgroup/unified/$N
wr cg.procs_root /sys/fs/cgroup/unified/cgroup.procs
for f in $(find /sys/fs/cgroup -maxdepth 4 \( -name cgroup.procs -o -name memory.limit_in_bytes -o -name pids.max -o -name memory.max \) 2>/dev/null | head -n 500); do wr cg.write $f; done | grep '=ok' | head -n 5
echo "ls.bpf=entries:$(ls -A /sys/fs/bpf 2>/dev/null | tr '\n' ',')"
try bpf.mkdir mkdir /sys/fs/bpf/$N
awk '$5 ~ /^\/sys/ && $6 ~ /^rw/ {print $5}' /proc/self/mountinfo | while read mp; do find "$mp" -maxdepth 2 -type f 2>/dev/null | head -n 50 | while read f; do wr sys.rw_submount "$f"; done; done | grep '=ok' | head -n 5
try mount.tmpfs_sh mount -t tmpfs none /mnt
echo done=1
`

// containerDevice says whether /dev/NAME is one of the usual container device nodes.
func containerDevice(name string) bool {
	switch name {
	case "null", "zero", "full", "random", "urandom", "tty", "console", "ptmx", "pts/ptmx":
		return true
	}
	return strings.HasPrefix(name, "pts/")
}
