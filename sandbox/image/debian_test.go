package image

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/airlock-dev/airlock/test/imagetest"
	"github.com/airlock-dev/airlock/test/privtest"
)

// TestDebianUnpacks: the real Debian root filesystem (mmdebstrap, cached) unpacks from its
// OCI layout and its OCI archive into one cached layer, apt's files in place, owners kept
// (/var/mail is group mail, 8), device nodes left out.
func TestDebianUnpacks(t *testing.T) {
	privtest.Require(t, "mmdebstrap")
	layoutDir, archive := imagetest.Debian(t)
	s := &Store{Dir: filepath.Join(t.TempDir(), "images")}
	a, err := s.Get(context.Background(), layoutDir, owner(t, "a"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Get(context.Background(), archive, owner(t, "b"))
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Layers) != 1 || a.Unpacked != 1 || b.Unpacked != 0 || b.Layers[0] != a.Layers[0] {
		t.Fatalf("layout: %d layers, %d unpacked; archive: %d unpacked, %v; want one shared layer unpacked once", len(a.Layers), a.Unpacked, b.Unpacked, b.Layers)
	}
	root := a.Layers[0]
	for _, p := range []string{"usr/bin/apt", "usr/bin/apt-get", "var/lib/dpkg/status", "etc/apt/apt.conf.d", "var/lib/apt"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	fi, err := os.Stat(filepath.Join(root, "var", "mail"))
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Gid != 8 || fi.Mode()&os.ModeSetgid == 0 {
		t.Errorf("var/mail: gid %d, mode %v; want the image's mail (8), setgid", st.Gid, fi.Mode())
	}
	entries, _ := os.ReadDir(filepath.Join(root, "dev"))
	for _, e := range entries {
		if e.Type()&os.ModeDevice != 0 {
			t.Errorf("dev/%s: a device node in the cache", e.Name())
		}
	}
}
