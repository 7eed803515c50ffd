//go:build linux

package e2e

import (
	"crypto/tls"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/test/imagetest"
	"github.com/airlock-dev/airlock/test/privtest"
)

// Sandboxes of images (`sandbox create --image`, `exec --ephemeral --image`): the tiny
// busybox image from every kind of source, and a real Debian root filesystem
// (sandbox_image_debian_test.go).

// sbRegistryAddr serves the in-process registry in the world (TLS with the world's CA).
const sbRegistryAddr = "198.18.0.42"

// idBaseOf reads the sandbox's first host uid from create's container line.
func idBaseOf(t *testing.T, createOut string) int {
	t.Helper()
	m := regexp.MustCompile(`uid/gid 0-65535 -> (\d+)-`).FindStringSubmatch(createOut)
	if m == nil {
		t.Fatalf("create printed no uid range: %q", createOut)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// createImage creates sandbox name of image ref and returns create's stdout.
func (e *sbEnv) createImage(t *testing.T, name, ref string, extra ...string) string {
	t.Helper()
	e.cleanupSandbox(t, name)
	r := e.run(t, nil, createEnv(), append([]string{"sandbox", "create", name}, e.createArgs(append([]string{"--image", ref}, extra...)...)...)...)
	if r.Code != 0 {
		t.Fatalf("sandbox create %s --image %s: %s\nsidecar log:\n%s", name, ref, r, e.sidecarLog(name))
	}
	return r.Stdout + r.Stderr
}

// serveRegistry serves the busybox image in the world at sbRegistryAddr:443 and returns its
// reference.
func (e *sbEnv) serveRegistry(t *testing.T) string {
	t.Helper()
	e.serveTLS(t, sbRegistryAddr, imagetest.Registry(t, imagetest.Busybox(t), "busybox"))
	return sbRegistryAddr + "/busybox:latest"
}

// serveTLS serves h at addr:443 in the world, with a certificate of the world's CA.
func (e *sbEnv) serveTLS(t *testing.T, addr string, h http.Handler) {
	t.Helper()
	e.w.AddUpstreamAddr(t, netip.MustParseAddr(addr))
	ln, err := e.w.Upstream.Listen("tcp", addr+":443")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(tls.NewListener(ln, e.w.CA.ServerConfig(addr))) }()
	t.Cleanup(func() { srv.Close() })
}

// TestSandboxImageBusybox: a sandbox of the busybox image sees the image's files with the
// image's owners (idmapped layers), its whiteouts, its config (working directory, env under
// airlock's env file), airlock's resolv.conf and env file read-only over the image's; it
// writes its own upper layer, which another sandbox of the image does not see; files it
// writes to an rw mount are its mapped uid's on the host; the layers stay cached after the
// last sandbox of the image is deleted (the next one unpacks nothing), and reap removes them
// once unused for --older-than.
func TestSandboxImageBusybox(t *testing.T) {
	e := newSandboxEnv(t)
	ref := imagetest.WriteLayout(t, imagetest.Busybox(t), filepath.Join(t.TempDir(), "busybox"))
	a, b := e.name("img"), e.name("img")
	out := e.createImage(t, a, ref)
	base := idBaseOf(t, out)
	e.createImage(t, b, ref)

	r := e.sh(t, a, `ls -lnd / /bin /etc /home/app /opt/new | while read m l u g rest; do echo "$u:$g ${rest##* }"; done; `+
		`test -e /opt/old && echo old-visible; stat -c '%a' /opt/setuid; pwd; echo "img=$IMAGE_VAR proxy=${HTTPS_PROXY:+set}"; `+
		`cat /etc/resolv.conf; echo x > /etc/resolv.conf 2>/dev/null && echo resolv-writable; `+
		`echo mine > /upper-file && cat /upper-file; touch /e2e/owned-`+a)
	if r.Code != 0 {
		t.Fatalf("inspect: %s", r)
	}
	for _, want := range []string{"0:0 /\n", "0:0 /bin\n", "0:0 /etc\n", "1000:1000 /home/app\n", "1000:1000 /opt/new\n",
		"755\n", "/home/app\n", "img=from-image proxy=set\n", "nameserver ", "mine\n"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("inside the image's sandbox: no %q in\n%s", want, r.Stdout)
		}
	}
	for _, bad := range []string{"old-visible", "resolv-writable", "65534"} {
		if strings.Contains(r.Stdout, bad) {
			t.Errorf("inside the image's sandbox: %q in\n%s", bad, r.Stdout)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(e.out, "owned-"+a), &st); err != nil || int(st.Uid) != base || int(st.Gid) != base {
		t.Errorf("file written to the rw mount: owner %d:%d (%v), want the sandbox's mapped root %d", st.Uid, st.Gid, err, base)
	}
	if r := e.sh(t, b, `cat /upper-file 2>/dev/null || echo absent`); !strings.Contains(r.Stdout, "absent") {
		t.Errorf("sandbox %s sees %s's upper layer: %s", b, a, r)
	}
	layers := filepath.Join(e.stateDir, "images", "layers")
	if n := countEntries(t, layers); n != 2 {
		t.Fatalf("layer cache holds %d layers after two sandboxes of a 2-layer image, want 2", n)
	}
	for _, n := range []string{a, b} {
		if r := e.run(t, nil, nil, "sandbox", "delete", "--state-dir", e.stateDir, n); r.Code != 0 {
			t.Fatalf("delete %s: %s", n, r)
		}
		if left := e.fsLeftovers(t, n); len(left) > 0 {
			t.Errorf("after delete %s: %v left", n, left)
		}
	}
	if n := countEntries(t, layers); n != 2 {
		t.Errorf("layer cache holds %d layers after the last sandbox of the image is gone, want 2 (cached for the next)", n)
	}
	if out := e.createImage(t, a, ref); !strings.Contains(out, "0 unpacked now") {
		t.Errorf("a new sandbox of the image after the last one was deleted: want its layers from the cache (0 unpacked now):\n%s", out)
	}
	if r := e.run(t, nil, nil, "sandbox", "delete", "--state-dir", e.stateDir, a); r.Code != 0 {
		t.Fatalf("delete %s: %s", a, r)
	}
	if r := e.run(t, nil, nil, "sandbox", "reap", "--state-dir", e.stateDir, "--older-than", "1h"); r.Code != 0 || countEntries(t, layers) != 2 {
		t.Errorf("reap --older-than 1h: %s; %d layers left, want 2 (used minutes ago)", r, countEntries(t, layers))
	}
	if r := e.run(t, nil, nil, "sandbox", "reap", "--state-dir", e.stateDir, "--older-than", "0s"); r.Code != 0 || !strings.Contains(r.Stdout, "image layers") {
		t.Errorf("reap --older-than 0s: %s, want the image layers reaped", r)
	}
	if n := countEntries(t, layers); n != 0 {
		t.Errorf("layer cache holds %d layers after reap --older-than 0s with no sandbox of the image, want 0", n)
	}
}

// TestSandboxImageEphemeral: `exec --ephemeral --image` from an OCI archive, a docker archive
// and a registry in the world runs the image's Entrypoint/Cmd when given no command, and the
// command given otherwise, as the image's user and in its working directory.
func TestSandboxImageEphemeral(t *testing.T) {
	e := newSandboxEnv(t)
	dir := t.TempDir()
	img := imagetest.Busybox(t)
	cases := []struct {
		name, ref, runtime string
		cmd                []string
		want               string
	}{
		{"oci archive, image's Cmd", imagetest.WriteOCIArchive(t, img, filepath.Join(dir, "oci.tar")), "runc", nil, "from-cmd\n"},
		{"docker archive, a command", imagetest.WriteDockerArchive(t, img, filepath.Join(dir, "docker.tar")), "runc", []string{"sh", "-c", "cat /opt/new; pwd; id -u"}, "new\n/home/app\n0\n"},
		{"registry", e.serveRegistry(t), "runc", []string{"cat", "/opt/new"}, "new\n"},
		{"layout, crun", imagetest.WriteLayout(t, img, filepath.Join(dir, "layout")), "crun", []string{"sh", "-c", "stat -c %u:%g /home/app; cat /opt/new"}, "1000:1000\nnew\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			privtest.Require(t, tc.runtime)
			name := e.name("eph")
			args := append([]string{"sandbox", "exec", "--ephemeral", "--image", tc.ref, "--runtime", tc.runtime}, e.createArgs()...)
			args = append(append(args, name), tc.cmd...)
			if len(tc.cmd) > 0 {
				args = append(append(args[:len(args)-len(tc.cmd)], "--"), tc.cmd...)
			}
			r := e.run(t, nil, createEnv(), args...)
			if r.Code != 0 || r.Stdout != tc.want {
				t.Errorf("exec --ephemeral --image %s: %s, want stdout %q", tc.ref, r, tc.want)
			}
			if left := e.fsLeftovers(t, name); len(left) > 0 {
				t.Errorf("after the ephemeral sandbox: %v left", left)
			}
		})
	}
}

func countEntries(t *testing.T, dir string) int {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// TestSandboxImageEtcLinks: an image whose /etc/resolv.conf, hosts, hostname and airlock are
// links out of it (to the kernel's core_pattern, the host's shadow) still gets airlock's files
// there, and the host's files and the kernel setting stay as they were.
func TestSandboxImageEtcLinks(t *testing.T) {
	e := newSandboxEnv(t)
	ref := imagetest.WriteLayout(t, imagetest.BusyboxEtcLinks(t), filepath.Join(t.TempDir(), "etclinks"))
	before := map[string][]byte{}
	for _, p := range []string{"/proc/sys/kernel/core_pattern", "/etc/shadow", "/etc/passwd"} {
		before[p], _ = os.ReadFile(p)
	}
	name := e.name("etcl")
	e.createImage(t, name, ref)
	r := e.sh(t, name, `for f in resolv.conf hosts hostname; do [ -L /etc/$f ] && echo "link $f"; done; `+
		`cat /etc/resolv.conf /etc/hostname; test -f /etc/airlock/env && echo env-file`)
	if r.Code != 0 {
		t.Fatalf("inside: %s", r)
	}
	for _, want := range []string{"nameserver ", name + "\n", "env-file\n"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("inside the sandbox of an image with links in /etc: no %q in\n%s", want, r.Stdout)
		}
	}
	if strings.Contains(r.Stdout, "link ") {
		t.Errorf("the image's links are still there, under airlock's files:\n%s", r.Stdout)
	}
	for p, b := range before {
		if now, _ := os.ReadFile(p); string(now) != string(b) {
			t.Errorf("the host's %s changed while a sandbox of an image linking to it was created", p)
		}
	}
}

// TestSandboxImageDisk: with --disk 32M a sandbox of an image writes its root's upper layer on
// its disk: a 100 MiB write to / stops with ENOSPC at the cap, the host paid for the disk at
// create and not again; delete unmounts the overlay before the disk and leaves neither.
func TestSandboxImageDisk(t *testing.T) {
	e := newSandboxEnv(t)
	ref := imagetest.WriteLayout(t, imagetest.Busybox(t), filepath.Join(t.TempDir(), "busybox"))
	name := e.name("imgdisk")
	e.createImage(t, name, ref, "--disk", "32M")
	disk := diskOf(t, e, name)
	before := allocatedBytes(t, disk.Image)
	r := e.sh(t, name, `dd if=/dev/zero of=/fill bs=1M count=100 2>&1; echo "root=$(wc -c < /fill)"`)
	root, _ := strconv.ParseInt(attemptResult(r.Stdout, "root"), 10, 64)
	if !strings.Contains(r.Stdout, "No space left on device") || root <= 0 || root > 32<<20 {
		t.Errorf("--disk 32M --image: wrote %d bytes to /; want ENOSPC at the cap:\n%s", root, r)
	}
	if after := allocatedBytes(t, disk.Image); after != before {
		t.Errorf("the disk image went from %d to %d bytes on the host", before, after)
	}
	if r := e.run(t, nil, nil, "sandbox", "delete", "--state-dir", e.stateDir, name); r.Code != 0 {
		t.Fatalf("delete: %s", r)
	}
	for _, p := range []string{disk.Image, disk.Mount} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("after delete %s is still there (%v)", p, err)
		}
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), disk.Mount) {
		t.Errorf("after delete something is still mounted under %s", disk.Mount)
	}
}
