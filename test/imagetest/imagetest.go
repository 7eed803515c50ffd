// Package imagetest builds the container images the sandbox image tests use, offline: a tiny
// busybox-static image (two layers, with owners other than root and a whiteout), and a real
// Debian root filesystem made by mmdebstrap from the Debian archive, cached in the
// repository's git-ignored .cache keyed on its inputs. It writes them as OCI layouts, OCI and
// docker-archive tarballs, and pushes them to an in-process registry. Nothing is pulled from a
// registry on the internet.
//
// It is for tests only; production code never imports it.
package imagetest

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// BusyboxPath is where Debian's busybox-static installs the binary.
const BusyboxPath = "/bin/busybox"

// busyboxApplets lists the applets of this machine's busybox (`busybox --list`).
func busyboxApplets(t TB) []string {
	t.Helper()
	out, err := exec.Command(BusyboxPath, "--list").Output()
	if err != nil {
		t.Fatalf("busybox --list: %v", err)
	}
	var applets []string
	for _, a := range strings.Fields(string(out)) {
		if a != "busybox" && !strings.Contains(a, "/") {
			applets = append(applets, a)
		}
	}
	return applets
}

// Busybox is the tiny test image: layer 1 holds busybox and links to every applet in /bin,
// /etc/passwd and /etc/group (root, app 1000:1000), /home/app owned by 1000:1000, /opt/old
// and /opt/setuid (mode 4755), empty /mnt and /usr/local/bin; layer 2 whites /opt/old out and adds /opt/new. Its config: Env
// PATH=/bin and IMAGE_VAR=from-image, Cmd [echo, from-cmd], WorkingDir /home/app.
func Busybox(t TB) v1.Image {
	t.Helper()
	bin, err := os.ReadFile(BusyboxPath)
	if err != nil {
		t.Fatalf("busybox-static (apt-get install busybox-static): %v", err)
	}
	l1 := []tarEntry{
		{name: "bin/", mode: 0o755, typ: tar.TypeDir}, {name: "bin/busybox", mode: 0o755, body: bin},
		{name: "etc/", mode: 0o755, typ: tar.TypeDir},
		{name: "etc/passwd", mode: 0o644, body: []byte("root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\n")},
		{name: "etc/group", mode: 0o644, body: []byte("root:x:0:\napp:x:1000:\n")},
		{name: "home/", mode: 0o755, typ: tar.TypeDir}, {name: "home/app/", mode: 0o750, typ: tar.TypeDir, uid: 1000, gid: 1000},
		{name: "root/", mode: 0o700, typ: tar.TypeDir},
		{name: "opt/", mode: 0o755, typ: tar.TypeDir}, {name: "opt/old", mode: 0o644, body: []byte("old\n")},
		{name: "opt/setuid", mode: 0o4755, body: []byte("#!/bin/sh\n")},
		{name: "mnt/", mode: 0o755, typ: tar.TypeDir}, {name: "usr/", mode: 0o755, typ: tar.TypeDir},
		{name: "usr/local/", mode: 0o755, typ: tar.TypeDir}, {name: "usr/local/bin/", mode: 0o755, typ: tar.TypeDir},
	}
	for _, a := range busyboxApplets(t) {
		l1 = append(l1, tarEntry{name: "bin/" + a, typ: tar.TypeSymlink, link: "busybox"})
	}
	l2 := []tarEntry{
		{name: "opt/", mode: 0o755, typ: tar.TypeDir}, {name: "opt/.wh.old", mode: 0o644},
		{name: "opt/new", mode: 0o644, body: []byte("new\n"), uid: 1000, gid: 1000},
	}
	img, err := mutate.AppendLayers(empty.Image, layerOf(t, l1), layerOf(t, l2))
	if err != nil {
		t.Fatal(err)
	}
	return withConfig(t, img, v1.Config{
		Env: []string{"PATH=/bin", "IMAGE_VAR=from-image"}, Cmd: []string{"echo", "from-cmd"}, WorkingDir: "/home/app",
	})
}

// withConfig sets img's run config, OS and architecture (this machine's).
func withConfig(t TB, img v1.Image, c v1.Config) v1.Image {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Config = "linux", goarch(), c
	out, err := mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// tarEntry is one entry of a crafted layer.
type tarEntry struct {
	name, link string
	typ        byte
	mode       int64
	uid, gid   int
	body       []byte
}

// layerOf makes an uncompressed layer of entries (regular files unless typ says otherwise).
func layerOf(t TB, entries []tarEntry) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		h := &tar.Header{Typeflag: typ, Name: e.name, Linkname: e.link, Mode: e.mode, Uid: e.uid, Gid: e.gid,
			Size: int64(len(e.body)), ModTime: time.Unix(1700000000, 0), Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// WriteLayout writes img as an OCI image layout directory at dir.
func WriteLayout(t TB, img v1.Image, dir string) string {
	t.Helper()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	return dir
}

// WriteOCIArchive writes img as a tarball of an OCI layout (`oci-archive:`) at file.
func WriteOCIArchive(t testing.TB, img v1.Image, file string) string {
	t.Helper()
	dir := WriteLayout(t, img, t.TempDir())
	if err := tarDir(dir, file); err != nil {
		t.Fatal(err)
	}
	return file
}

// WriteDockerArchive writes img as `docker save` does at file.
func WriteDockerArchive(t TB, img v1.Image, file string) string {
	t.Helper()
	tag, err := name.NewTag("airlock.test/busybox:latest")
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.WriteToFile(file, tag, img); err != nil {
		t.Fatal(err)
	}
	return file
}

// ServeRegistry starts an in-process registry on 127.0.0.1, pushes img as REPO:latest and
// returns its reference (127.0.0.1:PORT/REPO:latest, plain HTTP as for any loopback registry).
func ServeRegistry(t testing.TB, img v1.Image, repo string) string {
	t.Helper()
	srv := httptest.NewServer(Registry(t, img, repo))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://") + "/" + repo + ":latest"
}

// Registry returns an in-process registry's handler holding img as REPO:latest, for a test
// to serve where its clients are (a namespace of its own, behind TLS).
func Registry(t TB, img v1.Image, repo string) http.Handler {
	t.Helper()
	h := registry.New(registry.Logger(nilLogger()))
	srv := httptest.NewServer(h)
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/" + repo + ":latest"
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	return h
}

// tarDir writes the files of dir into a tar file (paths relative to dir).
func tarDir(dir, file string) error {
	out, err := os.Create(file)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(out)
	err = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if err := tw.WriteHeader(h); err != nil || !fi.Mode().IsRegular() {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if cerr := tw.Close(); err == nil {
		err = cerr
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("tar %s: %w", dir, err)
	}
	return nil
}

func goarch() string { return runtime.GOARCH }

func nilLogger() *log.Logger { return log.New(io.Discard, "", 0) }

// TB is what the builders need of a test: testing.TB has it, and so can a tool that builds
// the images outside a test (tools/bench: Fatal then ends its run).
type TB interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// BusyboxEtcLinks is Busybox with a third layer where the /etc files airlock binds its own
// over are links out of the image: resolv.conf -> /proc/sys/kernel/core_pattern, hosts ->
// ../../../../etc/shadow, hostname -> /etc/passwd, airlock -> /tmp. A hostile image: a
// runtime that followed them would mount airlock's files onto the host's or the kernel's.
func BusyboxEtcLinks(t TB) v1.Image {
	t.Helper()
	l3 := []tarEntry{
		{name: "etc/", mode: 0o755, typ: tar.TypeDir},
		{name: "etc/resolv.conf", typ: tar.TypeSymlink, link: "/proc/sys/kernel/core_pattern"},
		{name: "etc/hosts", typ: tar.TypeSymlink, link: "../../../../etc/shadow"},
		{name: "etc/hostname", typ: tar.TypeSymlink, link: "/etc/passwd"},
		{name: "etc/airlock", typ: tar.TypeSymlink, link: "/tmp"},
	}
	img, err := mutate.AppendLayers(Busybox(t), layerOf(t, l3))
	if err != nil {
		t.Fatal(err)
	}
	return img
}
