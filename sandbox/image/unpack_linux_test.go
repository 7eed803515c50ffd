package image

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/test/privtest"
)

// entry is one crafted tar entry: a header and, for a regular file, its body.
type entry struct {
	hdr  tar.Header
	body string
}

func file(name, body string, mode int64) entry {
	return entry{tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(body))}, body}
}
func dir(name string, mode int64) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode}}
}
func symlink(name, target string) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target}}
}
func hardlink(name, target string) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: target}}
}

// tarOf writes entries as a tar stream, as an image build tool would (or a hostile one).
func tarOf(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.hdr
		h.ModTime = time.Unix(1700000000, 0)
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatalf("tar header %s: %v", h.Name, err)
		}
		if e.body != "" {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// hostileSetup is a directory holding the layer directory and, beside it, "outside" with a
// secret file a hostile layer must not reach.
func hostileSetup(t *testing.T) (layer, outside string) {
	t.Helper()
	privtest.Require(t)
	base := t.TempDir()
	layer, outside = filepath.Join(base, "layer"), filepath.Join(base, "outside")
	for _, d := range []string{layer, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	return layer, outside
}

// outsideUntouched fails unless outside still holds only the secret, unchanged, with one link.
func outsideUntouched(t *testing.T, outside string) {
	t.Helper()
	entries, err := os.ReadDir(outside)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"secret"}) {
		t.Errorf("outside the layer: %v, want only [secret]", names)
	}
	data, err := os.ReadFile(filepath.Join(outside, "secret"))
	if err != nil || string(data) != "host" {
		t.Errorf("outside secret = %q, %v; want \"host\"", data, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(outside, "secret"), &st); err != nil || st.Nlink != 1 {
		t.Errorf("outside secret has %d links (%v), want 1: a hard link reached it", st.Nlink, err)
	}
	if parent, err := os.ReadDir(filepath.Dir(outside)); err != nil || len(parent) != 2 {
		t.Errorf("beside the layer: %d entries (%v), want layer and outside only", len(parent), err)
	}
}

// TestUnpackRefusesEscapes: each crafted layer that would write outside its directory is
// refused with ErrUnsafeEntry, and nothing outside changes.
func TestUnpackRefusesEscapes(t *testing.T) {
	cases := []struct {
		name    string
		entries func(outside string) []entry
	}{
		{"dot-dot", func(string) []entry { return []entry{file("../escape", "x", 0o644)} }},
		{"dot-dot inside a path", func(string) []entry { return []entry{dir("a", 0o755), file("a/../../escape", "x", 0o644)} }},
		{"absolute path", func(o string) []entry { return []entry{file(filepath.Join(o, "escape"), "x", 0o644)} }},
		{"write through an absolute symlink", func(o string) []entry {
			return []entry{symlink("evil", o), file("evil/escape", "x", 0o644)}
		}},
		{"write through a relative symlink", func(string) []entry {
			return []entry{symlink("up", "../outside"), file("up/escape", "x", 0o644)}
		}},
		{"directory through a symlink", func(o string) []entry { return []entry{symlink("evil", o), dir("evil/sub", 0o755)} }},
		{"hard link with dot-dot", func(string) []entry { return []entry{hardlink("h", "../outside/secret")} }},
		{"hard link to an absolute path", func(o string) []entry { return []entry{hardlink("h", filepath.Join(o, "secret"))} }},
		{"hard link through a symlink", func(o string) []entry {
			return []entry{symlink("s", o), hardlink("h", "s/secret")}
		}},
		{"whiteout through a symlink", func(o string) []entry {
			return []entry{symlink("s", o), file("s/.wh.secret", "", 0o644)}
		}},
		{"whiteout of dot-dot", func(string) []entry { return []entry{dir("d", 0o755), file("d/.wh...", "", 0o644)} }},
		{"whiteout of dot", func(string) []entry { return []entry{file(".wh..", "", 0o644)} }},
		{"opaque marker through a symlink", func(o string) []entry {
			return []entry{symlink("s", o), file("s/.wh..wh..opq", "", 0o644)}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			layer, outside := hostileSetup(t)
			err := unpackLayer(bytes.NewReader(tarOf(t, tc.entries(outside)...)), layer)
			if !errors.Is(err, ErrUnsafeEntry) {
				t.Errorf("unpack: %v, want ErrUnsafeEntry", err)
			}
			outsideUntouched(t, outside)
			if _, err := unix.Getxattr(outside, "trusted.overlay.opaque", make([]byte, 8)); err == nil {
				t.Errorf("outside was marked opaque")
			}
		})
	}
}

// TestUnpackContains: what a layer may hold but must not bring to the host is contained:
// replacing a symlink never writes through it, a hard link to a symlink links the link, device
// nodes are skipped, setuid and setgid bits dropped, xattrs (file capabilities, overlay's
// own) ignored; owners and whiteouts are kept in overlayfs's form.
func TestUnpackContains(t *testing.T) {
	layer, outside := hostileSetup(t)
	secret := filepath.Join(outside, "secret")
	caps := entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "bin/capped", Mode: 0o755, PAXRecords: map[string]string{
		"SCHILY.xattr.security.capability":       "\x01\x00\x00\x02\xff\xff\xff\xff\x00\x00\x00\x00\xff\xff\xff\xff\x00\x00\x00\x00",
		"SCHILY.xattr.trusted.overlay.redirect":  "/etc",
		"SCHILY.xattr.trusted.overlay.metacopy":  "",
		"SCHILY.xattr.user.harmless-but-dropped": "1",
	}}}
	owned := file("home/u/f", "x", 0o640)
	owned.hdr.Uid, owned.hdr.Gid = 1000, 1001
	data := tarOf(t,
		symlink("f", secret), file("f", "image", 0o644), // replaced, not written through
		symlink("s2", secret), hardlink("h2", "s2"), // links the link
		entry{hdr: tar.Header{Typeflag: tar.TypeChar, Name: "dev/mem", Mode: 0o666, Devmajor: 1, Devminor: 1}},
		entry{hdr: tar.Header{Typeflag: tar.TypeBlock, Name: "dev/sda", Mode: 0o666, Devmajor: 8}},
		file("bin/su", "#!", 0o4755), file("bin/wall", "#!", 0o2755), dir("var/local", 0o2775),
		caps, owned,
		dir("d", 0o755), file("d/.wh..wh..opq", "", 0o644), file("d/.wh.gone", "", 0o644), file("d/.wh..wh.plnk", "", 0o644),
	)
	if err := unpackLayer(bytes.NewReader(data), layer); err != nil {
		t.Fatalf("unpack: %v", err)
	}
	outsideUntouched(t, outside)
	check := func(name string, want os.FileMode) {
		t.Helper()
		fi, err := os.Lstat(filepath.Join(layer, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			return
		}
		if got := fi.Mode() & (os.ModeType | os.ModePerm | os.ModeSetuid | os.ModeSetgid); got != want {
			t.Errorf("%s: mode %v, want %v", name, got, want)
		}
	}
	check("f", 0o644)
	check("h2", os.ModeSymlink|0o777)
	check("bin/su", 0o755)
	check("bin/wall", 0o755)
	check("var/local", os.ModeDir|os.ModeSetgid|0o775)
	check("d/gone", os.ModeDevice|os.ModeCharDevice)
	for _, gone := range []string{"dev/mem", "dev/sda", "d/.wh.gone", "d/.wh..wh..opq", "d/.wh..wh.plnk", "d/plnk"} {
		if _, err := os.Lstat(filepath.Join(layer, gone)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists in the layer (%v)", gone, err)
		}
	}
	if v := make([]byte, 4); true {
		n, err := unix.Getxattr(filepath.Join(layer, "d"), "trusted.overlay.opaque", v)
		if err != nil || string(v[:n]) != "y" {
			t.Errorf("d: trusted.overlay.opaque = %q, %v; want y", v[:n], err)
		}
	}
	if names, err := listXattrs(filepath.Join(layer, "bin/capped")); err != nil || len(names) > 0 {
		t.Errorf("bin/capped has xattrs %v (%v), want none", names, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(layer, "home/u/f"), &st); err != nil || st.Uid != 1000 || st.Gid != 1001 {
		t.Errorf("home/u/f owned by %d:%d (%v), want 1000:1001", st.Uid, st.Gid, err)
	}
	if data, err := os.ReadFile(filepath.Join(layer, "f")); err != nil || string(data) != "image" {
		t.Errorf("f = %q, %v; want the image's content", data, err)
	}
}

func listXattrs(p string) ([]string, error) {
	buf := make([]byte, 1024)
	n, err := unix.Llistxattr(p, buf)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, b := range bytes.Split(buf[:n], []byte{0}) {
		if len(b) > 0 {
			out = append(out, string(b))
		}
	}
	return out, nil
}
