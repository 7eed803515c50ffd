package sandbox

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// etcCopies are the host's /etc entries copied into the sandbox's /etc (those that exist):
// name service, dynamic linker, protocol and time zone tables and shell start-up files.
var etcCopies = []string{
	"nsswitch.conf", "host.conf", "gai.conf", "ld.so.cache", "ld.so.conf", "protocols", "services",
	"networks", "rpc", "ethertypes", "os-release", "debian_version", "localtime", "timezone", "profile",
	"bash.bashrc", "inputrc", "mime.types", "shells", "ssl/openssl.cnf", "environment",
}

// etcBinds are the host's /etc directories bound read-only into the sandbox's /etc (those that
// exist): the CA certificates, the dynamic linker's and Debian's alternatives' directories.
var etcBinds = []string{"ssl/certs", "ca-certificates", "alternatives", "ld.so.conf.d", "profile.d"}

// rootView is what of the host a sandbox's root filesystem shows: which system directories
// and /etc directories are bound in (those that exist on this host).
type rootView struct {
	sys, etc []string
}

// writeBundle lays out st's bundle: rootfs/ (every mount point, /etc with the allowlisted and
// generated files, owned by the host's root and read-only inside) and config.json.
func writeBundle(st *State) error {
	c := st.Container
	rootfs := filepath.Join(c.Bundle, "rootfs")
	for _, d := range []string{filepath.Dir(filepath.Dir(c.Bundle)), filepath.Dir(c.Bundle), c.Bundle} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return fmt.Errorf("create bundle %s: %w", d, err)
		}
		if err := os.Chmod(d, 0o711); err != nil {
			return fmt.Errorf("bundle %s: %w", d, err)
		}
	}
	var view rootView
	var err error
	if c.Image != nil {
		err = writeImageBundle(st)
	} else if view, err = layoutRootfs(rootfs, c); err == nil {
		err = writeEtcUsers(st, filepath.Join(rootfs, "etc"))
		if err == nil && !c.etcAfterCreate() {
			err = writeEtcRest(st, filepath.Join(rootfs, "etc"))
		}
	}
	if err != nil {
		return err
	}
	spec, err := ociSpec(st, view)
	if err != nil {
		return err
	}
	if c.Waiting { // createContainer writes it with the command's process
		c.spec = spec
		return nil
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("encode config.json: %w", err)
	}
	return writeFileReplace(filepath.Join(c.Bundle, "config.json"), data, 0o600)
}

// layoutRootfs creates rootfs's mount points, and the links a merged-/usr host has in place of
// /bin, /lib... (the runtime cannot create them: rootfs belongs to the host's root, whom the
// sandbox's user namespace does not map).
func layoutRootfs(rootfs string, c *ContainerState) (rootView, error) {
	var view rootView
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		return view, fmt.Errorf("create %s: %w", rootfs, err)
	}
	dirs := []string{"proc", "dev", "sys", "tmp", "etc/airlock/ca", c.Workdir}
	for _, d := range sysDirs {
		fi, err := os.Lstat("/" + d)
		switch {
		case err != nil:
			continue
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink("/" + d)
			if err != nil {
				return view, fmt.Errorf("read link /%s: %w", d, err)
			}
			if err := replaceSymlink(target, filepath.Join(rootfs, d)); err != nil {
				return view, err
			}
		case fi.IsDir():
			view.sys = append(view.sys, d)
			dirs = append(dirs, d)
		}
	}
	for _, d := range etcBinds {
		if fi, err := os.Stat(filepath.Join("/etc", d)); err == nil && fi.IsDir() {
			view.etc = append(view.etc, d)
			dirs = append(dirs, filepath.Join("etc", d))
		}
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			return view, fmt.Errorf("create %s in the sandbox root: %w", d, err)
		}
	}
	for _, m := range c.Mounts {
		if err := mountPoint(rootfs, m); err != nil {
			return view, err
		}
	}
	return view, nil
}

// mountPoint creates the file or directory a --mount lands on.
func mountPoint(rootfs string, m Mount) error {
	dst := filepath.Join(rootfs, m.Dest)
	fi, err := os.Stat(m.Source)
	if err != nil {
		return fmt.Errorf("--mount %s: %w", m.Source, err)
	}
	if fi.IsDir() {
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return fmt.Errorf("--mount %s: %w", m.Dest, err)
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("--mount %s: %w", m.Dest, err)
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("--mount %s: %w", m.Dest, err)
	}
	return f.Close()
}

func replaceSymlink(target, link string) error {
	if err := os.Remove(link); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("replace %s: %w", link, err)
	}
	if err := os.Symlink(target, link); err != nil {
		return fmt.Errorf("link %s: %w", link, err)
	}
	return nil
}

// The sandbox's /etc (of the host's view) is written in two parts: writeEtcUsers, what the
// runtime's create reads (runc's init looks the process's user up in passwd and group), and
// writeEtcRest, what only the sandbox's processes read: the allowlisted host files, generated
// hosts, hostname and resolv.conf, and airlock's env file and CA bundle. A container made with
// its one command gets the rest while the runtime creates it (ContainerState.etcAfterCreate).

// writeEtcUsers writes the generated passwd and group, and the mtab link.
func writeEtcUsers(st *State, etc string) error {
	if err := os.MkdirAll(etc, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", etc, err)
	}
	passwd, group := etcUsers(st)
	for name, content := range map[string]string{"passwd": passwd, "group": group} {
		if err := writeFileReplace(filepath.Join(etc, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return replaceSymlink("/proc/self/mounts", filepath.Join(etc, "mtab"))
}

// writeEtcRest writes the rest of the sandbox's /etc: the allowlisted host files and
// writeAirlockEtc's.
func writeEtcRest(st *State, etc string) error {
	for _, name := range etcCopies {
		if err := copyEtcEntry(filepath.Join("/etc", name), filepath.Join(etc, name)); err != nil {
			return err
		}
	}
	return writeAirlockEtc(st, etc, nil)
}

// writeBundleEtc is writeEtcRest for a bundle that writeBundle left it to
// (ContainerState.etcAfterCreate); for any other bundle it does nothing.
func writeBundleEtc(st *State) error {
	c := st.Container
	if c == nil || !c.etcAfterCreate() {
		return nil
	}
	return writeEtcRest(st, filepath.Join(c.Bundle, "rootfs", "etc"))
}

// etcUsers are the sandbox's /etc/passwd and /etc/group: root, nobody, and each identity
// `exec --as` has given a uid (st.IdentityUIDs), named after it, with the working directory as
// its home (HOME is that for every process). Tools such as OpenSSH's ssh refuse to run as a
// uid that has no passwd entry.
func etcUsers(st *State) (passwd, group string) {
	passwd = "root:x:0:0:root:" + st.Container.Workdir + ":/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
	group = "root:x:0:\ntty:x:5:\nnogroup:x:65534:\n"
	for _, name := range slices.SortedFunc(maps.Keys(st.IdentityUIDs), func(a, b string) int {
		return cmp.Compare(st.IdentityUIDs[a], st.IdentityUIDs[b])
	}) {
		uid := st.IdentityUIDs[name]
		passwd += fmt.Sprintf("%s:x:%d:%d:airlock identity %s:%s:/bin/sh\n", name, uid, uid, name, st.Container.Workdir)
		group += fmt.Sprintf("%s:x:%d:\n", name, uid)
	}
	return passwd, group
}

// writeIdentityUsers rewrites the /etc/passwd and /etc/group of st's root (a sandbox of the
// host's system directories; an image's users are the image's) with its identities, for
// `exec --as` once it has given one a uid. The files are replaced whole (a rename in the
// bundle's /etc, which the running container sees).
func writeIdentityUsers(st *State) error {
	if st.Container == nil || st.Container.Image != nil || st.Container.Bundle == "" {
		return nil
	}
	etc := filepath.Join(st.Container.Bundle, "rootfs", "etc")
	passwd, group := etcUsers(st)
	if err := writeFileReplace(filepath.Join(etc, "passwd"), []byte(passwd), 0o644); err != nil {
		return err
	}
	return writeFileReplace(filepath.Join(etc, "group"), []byte(group), 0o644)
}

// writeAirlockEtc writes the /etc files airlock makes for every sandbox into etc: hostname,
// hosts and resolv.conf (none of the sidecar's with --network none), airlock/env and
// airlock/ca/ca-bundle.pem, and the extra files given.
func writeAirlockEtc(st *State, etc string, extra map[string]string) error {
	files := map[string]string{
		"hostname": st.Name + "\n",
		"hosts":    "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
	}
	for name, content := range extra {
		files[name] = content
	}
	if st.Network == NetworkNone {
		files["resolv.conf"] = "# airlock sandbox " + st.Name + ": --network none, no resolver\n"
	} else {
		files["hosts"] += st.SandboxAddr + "\t" + st.Name + "\n"
		files["resolv.conf"] = string(st.resolvConf())
		if err := copyFile(st.EnvFile(), filepath.Join(etc, "airlock", "env")); err != nil {
			return err
		}
		if err := copyFile(st.CABundle(), filepath.Join(etc, "airlock", "ca", "ca-bundle.pem")); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(etc, "airlock"), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", etc, err)
	}
	for name, content := range files {
		if err := writeFileReplace(filepath.Join(etc, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// copyEtcEntry copies a host /etc file (a link as a link) into the sandbox's /etc; a missing
// one is skipped.
func copyEtcEntry(src, dst string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(dst), err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, err := os.Readlink(src)
		if err != nil {
			return fmt.Errorf("read link %s: %w", src, err)
		}
		return replaceSymlink(target, dst)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o004 == 0 {
		return nil // only world-readable plain files
	}
	return copyFile(src, dst)
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(dst), err)
	}
	return writeFileReplace(dst, data, 0o644)
}

// bundleDirName is the bundle directory of sandbox name of the store in storeDir: two state
// directories may hold sandboxes of the same name.
func bundleDirName(storeDir, name string) string {
	return filepath.Join(bundleRoot, strings.TrimPrefix(hostVethName(storeDir, name), "al")+"-"+name)
}
