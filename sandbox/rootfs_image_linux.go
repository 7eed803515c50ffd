package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// rwDir is the one directory that holds everything a sandbox of an image writes to its root
// filesystem: the overlay's upper and work directories (upper/, work/). With --disk it is on
// the sandbox's disk (ContainerState.writableDir), so the disk's size caps these writes with
// /tmp's and the working directory's; without, in the sandbox's state directory.
func (st *State) rwDir() string {
	if d := st.Container.writableDir(); d != "" {
		return filepath.Join(d, "rootfs")
	}
	return filepath.Join(st.Dir, "rw")
}

// imageRootfs is the mount point of the sandbox's root filesystem in its bundle; lowerStage
// is where the idmapped views of the layers are staged while the overlay is mounted.
func imageRootfs(c *ContainerState) string { return filepath.Join(c.Bundle, "rootfs") }
func lowerStage(c *ContainerState) string  { return filepath.Join(c.Bundle, "lower") }

// writeImageBundle lays out the bundle of a sandbox of an image: its root filesystem is an
// overlay of the image's cached layers (each an idmapped, read-only view, so the image's
// owners are the sandbox's own while the layers stay shared) under the sandbox's own upper
// layer, writable by it. airlock's files (hosts, hostname, resolv.conf, the env file and CA
// bundle) are bound read-only over the image's from bundle/etc.
func writeImageBundle(st *State) error {
	c := st.Container
	if err := mountImageRootfs(st); err != nil {
		return err
	}
	if err := resolveImageUser(c); err != nil {
		return errors.Join(err, unmountImageRootfs(st))
	}
	if err := prepareEtcMountPoints(c); err != nil {
		return errors.Join(err, unmountImageRootfs(st))
	}
	if err := writeImageEtc(st, filepath.Join(c.Bundle, "etc")); err != nil {
		return errors.Join(err, unmountImageRootfs(st))
	}
	return nil
}

// mountImageRootfs mounts the overlay of c's image at the bundle's rootfs: the layers, each
// bound read-only and idmapped by the sandbox's uid range, under rwDir's upper.
func mountImageRootfs(st *State) error {
	c := st.Container
	layers := c.Image.Layers
	if len(layers) == 0 {
		return errors.New("the image has no layers")
	}
	upper, work := filepath.Join(st.rwDir(), "upper"), filepath.Join(st.rwDir(), "work")
	for _, d := range []string{st.rwDir(), upper, work, imageRootfs(c), lowerStage(c)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	// The merged root's owner and mode are the upper directory's: the image's top layer's,
	// shifted into the sandbox's range.
	if err := copyRootAttrs(layers[len(layers)-1], upper, c.IDBase); err != nil {
		return err
	}
	userns, err := usernsOf(c.IDBase)
	if err != nil {
		return err
	}
	defer userns.Close()
	lowers := make([]string, 0, len(layers))
	defer unstageLowers(c)
	for i := len(layers) - 1; i >= 0; i-- { // overlayfs lists the top layer first
		dst := filepath.Join(lowerStage(c), strconv.Itoa(i))
		if err := idmappedBind(layers[i], dst, int(userns.Fd())); err != nil {
			return err
		}
		lowers = append(lowers, dst)
	}
	opts := "lowerdir=" + strings.Join(lowers, ":") + ",upperdir=" + upper + ",workdir=" + work
	if err := unix.Mount("overlay", imageRootfs(c), "overlay", unix.MS_NODEV|unix.MS_NOSUID, opts); err != nil {
		return fmt.Errorf("mount the image's overlay at %s: %w (`airlock sandbox doctor` checks overlayfs)", imageRootfs(c), err)
	}
	return nil
}

// copyRootAttrs gives upper the owner (shifted by base) and mode of the layer's root.
func copyRootAttrs(layer, upper string, base uint32) error {
	var st unix.Stat_t
	if err := unix.Stat(layer, &st); err != nil {
		return fmt.Errorf("image layer %s: %w", layer, err)
	}
	if err := os.Chown(upper, int(base+st.Uid%IDRangeSize), int(base+st.Gid%IDRangeSize)); err != nil {
		return fmt.Errorf("chown %s: %w", upper, err)
	}
	return os.Chmod(upper, os.FileMode(st.Mode&0o777))
}

// usernsOf returns a user namespace that maps 0-65535 to base..base+65535: the one the
// sandbox's container gets, for the idmapped mounts. It is the namespace of a child that
// exits at once (`true`): a zombie keeps its credentials, and with them its namespace, until
// it is reaped, which is after the namespace is opened.
func usernsOf(base uint32) (*os.File, error) {
	bin, err := exec.LookPath("true")
	if err != nil {
		bin = "/bin/true"
	}
	cmd := exec.Command(bin)
	idmap := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(base), Size: IDRangeSize}}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER, UidMappings: idmap, GidMappings: idmap}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("user namespace for the image's idmapped layers: %w", err)
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid))
	werr := cmd.Wait()
	if err != nil {
		return nil, fmt.Errorf("user namespace for the image's idmapped layers: %w", err)
	}
	if werr != nil {
		f.Close()
		return nil, fmt.Errorf("user namespace for the image's idmapped layers: %s: %w", bin, werr)
	}
	return f, nil
}

// idmappedBind mounts a read-only view of dir at dst whose owners are shifted by the user
// namespace usernsFd's map (open_tree, mount_setattr with MOUNT_ATTR_IDMAP, move_mount:
// kernel 5.12 and later; overlayfs takes idmapped layers since 5.19).
func idmappedBind(dir, dst string, usernsFd int) error {
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dst, err)
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open_tree %s: %w", dir, err)
	}
	defer unix.Close(fd)
	attr := &unix.MountAttr{
		Attr_set:  unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOSUID,
		Userns_fd: uint64(usernsFd),
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		return fmt.Errorf("idmap the image layer %s (the filesystem of the state directory must support idmapped mounts: ext4, xfs, btrfs, tmpfs): %w", dir, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mount the image layer at %s: %w", dst, err)
	}
	return nil
}

// probeIdmap mounts an idmapped view of a scratch directory under stateRoot and removes it:
// whether the layer cache's filesystem can give sandboxes the image's owners.
func probeIdmap(stateRoot string) error {
	dir, err := os.MkdirTemp(stateRoot, ".idmap-probe-")
	if err != nil {
		return fmt.Errorf("idmapped mount probe: %w", err)
	}
	defer os.RemoveAll(dir)
	userns, err := usernsOf(DefaultIDBase)
	if err != nil {
		return err
	}
	defer userns.Close()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	if err := os.Mkdir(src, 0o700); err != nil {
		return fmt.Errorf("idmapped mount probe: %w", err)
	}
	if err := idmappedBind(src, dst, int(userns.Fd())); err != nil {
		return err
	}
	return unix.Unmount(dst, unix.MNT_DETACH)
}

// unstageLowers detaches the staged layer views: the overlay holds its own references.
func unstageLowers(c *ContainerState) {
	entries, _ := os.ReadDir(lowerStage(c))
	for _, e := range entries {
		p := filepath.Join(lowerStage(c), e.Name())
		_ = unix.Unmount(p, unix.MNT_DETACH)
		_ = os.Remove(p)
	}
}

// unmountImageRootfs undoes mountImageRootfs and removes what the sandbox wrote (rwDir); a
// missing mount is not an error. It refuses to remove anything while the overlay stays
// mounted.
func unmountImageRootfs(st *State) error {
	c := st.Container
	unstageLowers(c)
	err := unix.Unmount(imageRootfs(c), unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", imageRootfs(c), err)
	}
	if err := os.RemoveAll(st.rwDir()); err != nil {
		return fmt.Errorf("remove %s: %w", st.rwDir(), err)
	}
	return nil
}

// imageEtcFiles are airlock's files bound read-only over the image's, from bundle/etc.
var imageEtcFiles = []string{"hosts", "hostname", "resolv.conf"}

// writeImageEtc writes airlock's files for the image's /etc into dir (outside the root
// filesystem: a sandbox cannot change them).
func writeImageEtc(st *State, dir string) error {
	return writeAirlockEtc(st, dir, nil)
}

// prepareEtcMountPoints makes the image's /etc/hosts, hostname and resolv.conf plain files
// and /etc/airlock a directory, in the sandbox's upper layer, for airlock's files to be bound
// onto: an image's link there (resolv.conf -> /proc/sys/kernel/core_pattern, hosts ->
// ../../etc/shadow) would otherwise have the runtime mount where the link points. An image
// whose /etc is itself a link, or where one of them is a directory, is refused.
func prepareEtcMountPoints(c *ContainerState) error {
	root, err := unix.Open(imageRootfs(c), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the image's root: %w", err)
	}
	defer unix.Close(root)
	if err := unix.Mkdirat(root, "etc", 0o755); err == nil {
		_ = unix.Fchownat(root, "etc", int(c.IDBase), int(c.IDBase), unix.AT_SYMLINK_NOFOLLOW)
	}
	etc, err := unix.Openat(root, "etc", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("the image's /etc is not a directory (a link?): %w", err)
	}
	defer unix.Close(etc)
	for _, name := range append(slices.Clone(imageEtcFiles), "airlock") {
		var st unix.Stat_t
		err := unix.Fstatat(etc, name, &st, unix.AT_SYMLINK_NOFOLLOW)
		isDir := err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
		switch {
		case err == nil && name == "airlock" && isDir, err == nil && name != "airlock" && st.Mode&unix.S_IFMT == unix.S_IFREG:
			continue
		case err == nil && isDir:
			return fmt.Errorf("the image's /etc/%s is a directory", name)
		case err == nil:
			if err := unix.Unlinkat(etc, name, 0); err != nil {
				return fmt.Errorf("replace the image's /etc/%s: %w", name, err)
			}
		case !errors.Is(err, unix.ENOENT):
			return fmt.Errorf("the image's /etc/%s: %w", name, err)
		}
		if name == "airlock" {
			err = unix.Mkdirat(etc, name, 0o755)
		} else {
			var fd int
			if fd, err = unix.Openat(etc, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644); err == nil {
				unix.Close(fd)
			}
		}
		if err == nil {
			err = unix.Fchownat(etc, name, int(c.IDBase), int(c.IDBase), unix.AT_SYMLINK_NOFOLLOW)
		}
		if err != nil {
			return fmt.Errorf("create /etc/%s in the image's root: %w", name, err)
		}
	}
	return nil
}

// imageEtcMounts bind airlock's /etc files (writeImageEtc) read-only over the image's.
func imageEtcMounts(c *ContainerState) []specs.Mount {
	var ms []specs.Mount
	for _, name := range imageEtcFiles {
		ms = append(ms, roBind(filepath.Join(c.Bundle, "etc", name), "/etc/"+name))
	}
	return append(ms, roBind(filepath.Join(c.Bundle, "etc", "airlock"), "/etc/airlock"))
}

// resolveImageUser turns the image's USER (name or id, with an optional group) into the
// default ids of the sandbox's commands, and finds the user's home, reading the image's
// /etc/passwd and /etc/group inside the root filesystem (never through a link out of it).
func resolveImageUser(c *ContainerState) error {
	u, g, _ := strings.Cut(c.Image.Config.User, ":")
	ids := &IDs{}
	var home string
	if u != "" {
		uid, gid, h, err := lookupID(c, "passwd", u)
		if err != nil {
			return fmt.Errorf("image USER %q: %w", c.Image.Config.User, err)
		}
		ids.UID, ids.GID, home = uid, gid, h
	} else {
		_, _, home, _ = lookupID(c, "passwd", "0")
	}
	if g != "" {
		gid, _, _, err := lookupID(c, "group", g)
		if err != nil {
			return fmt.Errorf("image USER %q: %w", c.Image.Config.User, err)
		}
		ids.GID = gid
	}
	if ids.UID >= IDRangeSize || ids.GID >= IDRangeSize {
		return fmt.Errorf("image USER %q: the sandbox maps ids 0-%d", c.Image.Config.User, IDRangeSize-1)
	}
	c.User = ids
	for _, kv := range c.Image.Config.Env {
		if h, ok := strings.CutPrefix(kv, "HOME="); ok {
			home = h
		}
	}
	if home == "" {
		home = "/"
	}
	c.Home = home
	return nil
}

// lookupID finds name (or a number) in the image's /etc/passwd or /etc/group: its id, and for
// passwd its group and home. A number missing from the file is taken as is (as Docker does).
func lookupID(c *ContainerState, file, name string) (id, gid int, home string, err error) {
	n, numErr := strconv.Atoi(name)
	f, oerr := openInRoot(imageRootfs(c), "etc/"+file)
	if oerr != nil {
		if numErr == nil {
			return n, n, "", nil
		}
		return 0, 0, "", fmt.Errorf("no /etc/%s in the image to find %q in", file, name)
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 1<<20))
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) < 3 || (fields[0] != name && fields[2] != name) {
			continue
		}
		if id, err = strconv.Atoi(fields[2]); err != nil {
			continue
		}
		gid = id
		if file == "passwd" && len(fields) >= 6 {
			gid, _ = strconv.Atoi(fields[3])
			home = fields[5]
		}
		return id, gid, home, nil
	}
	if numErr == nil {
		return n, n, "", nil
	}
	return 0, 0, "", fmt.Errorf("%q is not in the image's /etc/%s", name, file)
}

// openInRoot opens rel below root as if root were "/": links resolve inside it, never out.
func openInRoot(root, rel string) (*os.File, error) {
	dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dir)
	fd, err := unix.Openat2(dir, rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NONBLOCK,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), path.Join(root, rel))
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s is not a regular file", rel)
	}
	return f, nil
}

// IDs are a uid and a gid inside a sandbox.
type IDs struct {
	UID int `json:"uid"`
	GID int `json:"gid"`
}

// Argv is the command a sandbox of the image runs for cmd, as `docker run IMAGE CMD...`
// does: the image's Entrypoint, then cmd, or the image's Cmd when cmd is empty.
func (img *Image) Argv(cmd []string) []string {
	if len(cmd) == 0 {
		cmd = img.Config.Cmd
	}
	return append(append([]string(nil), img.Config.Entrypoint...), cmd...)
}
