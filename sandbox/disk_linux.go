package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// makeDisk builds st's disk (--disk), if it has one: the image file, reserved in full
// (fallocate: the host's free space drops by SIZE now and never again because of the
// sandbox), an ext4 filesystem in it, a loop device and the mount, and the sandbox's tmp and
// work directories on it, owned by its mapped root. Whatever it built before failing is
// removed by releaseDisk (the container step's undo); the loop device is bound with
// autoclear, so it goes with the mount, or with this process if there is no mount yet.
func makeDisk(st *State) error {
	c := st.Container
	d := c.Disk
	if d == nil {
		return nil
	}
	if err := makeBundleDirs(c.Bundle); err != nil {
		return err
	}
	if err := os.Mkdir(d.Mount, 0o711); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("disk: create %s: %w", d.Mount, err)
	}
	if err := makeImage(d); err != nil {
		return err
	}
	loop, err := mountImage(d)
	if err != nil {
		return err
	}
	d.Loop = loop
	for _, sub := range []string{diskTmp, diskWork} {
		p := filepath.Join(d.Mount, sub)
		if err := os.Mkdir(p, 0o700); err != nil {
			return fmt.Errorf("disk: create %s: %w", p, err)
		}
		if err := os.Chmod(p, 0o777|fs.ModeSticky); err != nil {
			return fmt.Errorf("disk: %s: %w", p, err)
		}
		if err := os.Lchown(p, int(c.IDBase), int(c.IDBase)); err != nil {
			return fmt.Errorf("disk: %s: %w", p, err)
		}
	}
	return nil
}

// makeBundleDirs creates the bundle directory and its parents, each traversable (0711) by
// the sandbox's mapped root.
func makeBundleDirs(bundle string) error {
	for _, d := range []string{filepath.Dir(filepath.Dir(bundle)), filepath.Dir(bundle), bundle} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return fmt.Errorf("create bundle %s: %w", d, err)
		}
		if err := os.Chmod(d, 0o711); err != nil {
			return fmt.Errorf("bundle %s: %w", d, err)
		}
	}
	return nil
}

// makeImage creates d's image file (it must not exist), reserves all of it and makes an ext4
// filesystem in it: no reserved blocks (root inside is not root outside, and the cap is the
// sandbox's in full), no journal (the filesystem lives as long as the sandbox; after a host
// crash reap removes it), no discard (which would punch holes into the reservation), inode
// tables left to read as the reservation's zeros.
func makeImage(d *DiskState) error {
	f, err := os.OpenFile(d.Image, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("disk: create image: %w", err)
	}
	err = unix.Fallocate(int(f.Fd()), 0, 0, d.Size)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("disk: reserve %s for %s: %w", formatBytes(d.Size), d.Image, err)
	}
	mkfs, err := findTool("mkfs.ext4", "e2fsprogs")
	if err != nil {
		return err
	}
	cmd := exec.Command(mkfs, "-q", "-F", "-t", "ext4", "-m", "0", "-O", "^has_journal",
		"-E", "nodiscard,lazy_itable_init=1", "-L", "airlock-disk", d.Image)
	cmd.Env, cmd.Dir = []string{"PATH=" + defaultPath}, "/"
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("disk: %s %s: %w: %s", mkfs, d.Image, err, bytes.TrimSpace(out))
	}
	return nil
}

// findTool finds a host tool on PATH or in the system directories root's PATH may lack.
func findTool(name, pkg string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err == nil && fi.Mode().IsRegular() {
			return filepath.Join(dir, name), nil
		}
	}
	return "", fmt.Errorf("%s not found (install it: apt-get install %s)", name, pkg)
}

// mountImage attaches d's image to a free loop device (autoclear: the device is released
// when the last user closes it, the mount or this process) and mounts it, nosuid and nodev,
// at d.Mount. It returns the device.
func mountImage(d *DiskState) (string, error) {
	dev, loop, err := attachLoop(d.Image)
	if err != nil {
		return "", err
	}
	defer loop.Close() // the mount holds the device from here on
	// noinit_itable: the inode tables lie in the reservation, which reads as zeros.
	if err := unix.Mount(dev, d.Mount, "ext4", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, "noinit_itable"); err != nil {
		return "", fmt.Errorf("disk: mount %s (%s) at %s: %w", dev, d.Image, d.Mount, err)
	}
	return dev, nil
}

// attachLoop binds image to a free loop device and returns the device's path and an open
// file of it. Another process may take the free device first: then it asks again.
func attachLoop(image string) (string, *os.File, error) {
	img, err := os.OpenFile(image, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", nil, fmt.Errorf("disk: %w", err)
	}
	defer img.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", nil, fmt.Errorf("disk: loop devices: %w", err)
	}
	defer ctl.Close()
	cfg := unix.LoopConfig{Fd: uint32(img.Fd())}
	cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
	copy(cfg.Info.File_name[:unix.LO_NAME_SIZE-1], image)
	var last error
	for range 32 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", nil, fmt.Errorf("disk: find a free loop device: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		f, err := os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", nil, fmt.Errorf("disk: open %s: %w", dev, err)
		}
		last = unix.IoctlLoopConfigure(int(f.Fd()), &cfg)
		if last == nil {
			return dev, f, nil
		}
		f.Close()
		if !errors.Is(last, unix.EBUSY) {
			return "", nil, fmt.Errorf("disk: attach %s to %s: %w", image, dev, last)
		}
	}
	return "", nil, fmt.Errorf("disk: attach %s to a loop device: %w (every free device was taken first)", image, last)
}

// releaseDisk unmounts d (which releases its loop device), then removes the image and the
// mount point; a missing piece is not an error. When the mount cannot be removed it stops
// there: the bundle, which holds the mount point, must then stay too (its removal would walk
// into the disk).
func releaseDisk(d *DiskState) error {
	if d == nil {
		return nil
	}
	if err := unmountDisk(d.Mount); err != nil {
		return err
	}
	if err := os.Remove(d.Image); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("disk: remove %s: %w", d.Image, err)
	}
	if err := os.Remove(d.Mount); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("disk: remove %s: %w", d.Mount, err)
	}
	return nil
}

// unmountDisk unmounts what is mounted at path (it is not followed if a link), until nothing
// is. A mount still busy on the host is detached: it and its loop device go with its last
// user.
func unmountDisk(path string) error {
	for range 8 {
		err := unix.Unmount(path, unix.UMOUNT_NOFOLLOW)
		switch {
		case err == nil:
			continue // another mount may lie below
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil // not a mount point (any more), or gone
		case errors.Is(err, unix.EBUSY):
			if err := unix.Unmount(path, unix.UMOUNT_NOFOLLOW|unix.MNT_DETACH); err != nil {
				return fmt.Errorf("disk: detach %s: %w", path, err)
			}
		default:
			return fmt.Errorf("disk: unmount %s: %w", path, err)
		}
	}
	return fmt.Errorf("disk: %s is still mounted", path)
}

// diskUsage is how many bytes of d's filesystem are in use (its own metadata included), or
// -1 when it is not mounted.
func diskUsage(d *DiskState) int64 {
	var sfs, parent unix.Statfs_t
	if unix.Statfs(d.Mount, &sfs) != nil || unix.Statfs(filepath.Dir(d.Mount), &parent) != nil || sfs.Fsid == parent.Fsid {
		return -1
	}
	return int64(sfs.Blocks-sfs.Bfree) * sfs.Bsize
}

// writableMount is the container's mount at dest: a tmpfs of c.TmpSize, or with a disk, the
// disk's directory sub bound there.
func writableMount(c *ContainerState, dest, sub string, tmpOpts []string) specs.Mount {
	if c.Disk == nil {
		return specs.Mount{Destination: dest, Type: "tmpfs", Source: "tmpfs", Options: tmpOpts}
	}
	return specs.Mount{Destination: dest, Type: "bind", Source: filepath.Join(c.Disk.Mount, sub),
		Options: []string{"rbind", "nosuid", "nodev"}}
}

// checkDisk checks what --disk needs: loop devices and mkfs.ext4. Without them only --disk
// fails, so it warns.
func (m *Manager) checkDisk(context.Context, DoctorOptions) Check {
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return warn("--disk: no /dev/loop-control: "+err.Error(), "modprobe loop")
	}
	mkfs, err := findTool("mkfs.ext4", "e2fsprogs")
	if err != nil {
		return warn("--disk: "+err.Error(), "apt-get install e2fsprogs")
	}
	return pass("--disk: loop devices, " + mkfs)
}
