//go:build linux

package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Each identity given a uid has a passwd and group entry (OpenSSH's ssh refuses to run as a
// uid without one), and `exec --as` rewrites a running sandbox's files with it.
func TestIdentityUsers(t *testing.T) {
	bundle := t.TempDir()
	etc := filepath.Join(bundle, "rootfs", "etc")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	st := &State{Container: &ContainerState{Bundle: bundle, Workdir: "/work"},
		IdentityUIDs: map[string]int{"reviewer": 20001, "author": 20000}}
	if err := writeIdentityUsers(st); err != nil {
		t.Fatal(err)
	}
	passwd, err := os.ReadFile(filepath.Join(etc, "passwd"))
	if err != nil {
		t.Fatal(err)
	}
	want := "root:x:0:0:root:/work:/bin/sh\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n" +
		"author:x:20000:20000:airlock identity author:/work:/bin/sh\n" +
		"reviewer:x:20001:20001:airlock identity reviewer:/work:/bin/sh\n"
	if string(passwd) != want {
		t.Errorf("passwd:\n%s\nwant:\n%s", passwd, want)
	}
	group, err := os.ReadFile(filepath.Join(etc, "group"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(group), "author:x:20000:\nreviewer:x:20001:\n") {
		t.Errorf("group:\n%s\nwant the identities' groups last, by uid", group)
	}
	// An image's users are the image's: nothing is written.
	img := &State{Container: &ContainerState{Bundle: t.TempDir(), Image: &Image{}}, IdentityUIDs: st.IdentityUIDs}
	if err := writeIdentityUsers(img); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(img.Container.Bundle, "rootfs", "etc", "passwd")); !os.IsNotExist(err) {
		t.Errorf("an image sandbox's passwd was written: %v", err)
	}
}
