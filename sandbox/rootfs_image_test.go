package sandbox

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// imageRoot makes a bundle whose rootfs holds the given /etc files (a link when the content
// starts with "->").
func imageRoot(t *testing.T, etc map[string]string) *ContainerState {
	t.Helper()
	c := &ContainerState{Bundle: t.TempDir(), Image: &Image{}}
	dir := filepath.Join(imageRootfs(c), "etc")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range etc {
		p := filepath.Join(dir, name)
		var err error
		if target, ok := cutLink(content); ok {
			err = os.Symlink(target, p)
		} else {
			err = os.WriteFile(p, []byte(content), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func cutLink(s string) (string, bool) {
	if len(s) > 2 && s[:2] == "->" {
		return s[2:], true
	}
	return "", false
}

// TestResolveImageUser: the image's USER by name or number, with a group, from the image's
// own /etc/passwd and /etc/group, and HOME from passwd unless the image's Env sets it.
func TestResolveImageUser(t *testing.T) {
	files := map[string]string{
		"passwd": "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1001:app:/home/app:/bin/sh\n",
		"group":  "root:x:0:\nstaff:x:50:\n",
	}
	cases := []struct {
		name, user string
		env        []string
		want       IDs
		home       string
		bad        bool
	}{
		{"none: root", "", nil, IDs{0, 0}, "/root", false},
		{"name", "app", nil, IDs{1000, 1001}, "/home/app", false},
		{"name and group", "app:staff", nil, IDs{1000, 50}, "/home/app", false},
		{"number in passwd", "1000", nil, IDs{1000, 1001}, "/home/app", false},
		{"number not in passwd", "4242:4343", nil, IDs{4242, 4343}, "/", false},
		{"image HOME wins", "app", []string{"HOME=/data"}, IDs{1000, 1001}, "/data", false},
		{"unknown name", "nobody-here", nil, IDs{}, "", true},
		{"outside the range", "70000", nil, IDs{}, "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := imageRoot(t, files)
			c.Image.Config = ImageConfig{User: tc.user, Env: tc.env}
			err := resolveImageUser(c)
			if tc.bad {
				if err == nil {
					t.Fatalf("USER %q: got %+v, want an error", tc.user, c.User)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if *c.User != tc.want || c.Home != tc.home {
				t.Errorf("USER %q: got %+v home %q, want %+v home %q", tc.user, *c.User, c.Home, tc.want, tc.home)
			}
		})
	}
}

// TestImageUserLookupStaysInside: an image's /etc/passwd that links out of the image (to the
// host's) is read inside the image's root, where it does not exist: the host's file is never
// read.
func TestImageUserLookupStaysInside(t *testing.T) {
	host := filepath.Join(t.TempDir(), "host-passwd")
	if err := os.WriteFile(host, []byte("hostuser:x:777:777::/host:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := imageRoot(t, map[string]string{"passwd": "->" + host})
	c.Image.Config.User = "hostuser"
	if err := resolveImageUser(c); err == nil {
		t.Fatalf("USER hostuser resolved to %+v through a link out of the image", *c.User)
	}
}

// TestImageArgv: as `docker run IMAGE [CMD]`: Entrypoint, then the command or Cmd.
func TestImageArgv(t *testing.T) {
	img := &Image{Config: ImageConfig{Entrypoint: []string{"/entry", "-x"}, Cmd: []string{"default"}}}
	for _, tc := range []struct {
		cmd, want []string
	}{
		{nil, []string{"/entry", "-x", "default"}},
		{[]string{"mine", "arg"}, []string{"/entry", "-x", "mine", "arg"}},
	} {
		if got := img.Argv(tc.cmd); !slices.Equal(got, tc.want) {
			t.Errorf("Argv(%q) = %q, want %q", tc.cmd, got, tc.want)
		}
	}
	if got := (&Image{Config: ImageConfig{Cmd: []string{"sh"}}}).Argv(nil); !slices.Equal(got, []string{"sh"}) {
		t.Errorf("Argv of an image with Cmd only = %q", got)
	}
}
