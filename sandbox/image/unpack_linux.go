package image

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrUnsafeEntry is a layer entry unpacking refuses: a path or hard link that leaves the
// layer, an absolute path, a parent that is a symbolic link, or a whiteout of "." or "..".
var ErrUnsafeEntry = errors.New("unsafe layer entry")

// OCI whiteouts (image-spec layer.md): ".wh.NAME" hides NAME of the layers below,
// ".wh..wh..opq" hides everything below in its directory; other ".wh..wh." names are aufs
// bookkeeping.
const (
	whiteoutPrefix = ".wh."
	whiteoutMeta   = ".wh..wh."
	whiteoutOpaque = ".wh..wh..opq"
)

// unpackLayer writes the uncompressed layer tar r into the directory root, in overlayfs's
// form: whiteouts become 0/0 character devices, opaque directories get trusted.overlay.opaque.
// Every path is resolved one component at a time below root, never following a symbolic
// link, so no entry writes outside root. Entries it refuses (ErrUnsafeEntry): absolute paths,
// paths and hard-link targets with "..", a parent that is a link, a whiteout of "." or "..".
// Entries it contains: device nodes are skipped, setuid and setgid bits of files dropped,
// extended attributes (file capabilities, overlay's own) ignored. Owners are the tar's.
func unpackLayer(r io.Reader, root string) error {
	rootFd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", root, err)
	}
	defer unix.Close(rootFd)
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read layer: %w", err)
		}
		if err := applyEntry(rootFd, hdr, tr); err != nil {
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
	}
}

// cleanEntryPath is name relative to the layer's root ("." for the root), or ErrUnsafeEntry.
func cleanEntryPath(name string) (string, error) {
	if strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("%w: absolute path", ErrUnsafeEntry)
	}
	p := path.Clean(name)
	if p == ".." || strings.HasPrefix(p, "../") {
		return "", fmt.Errorf("%w: path leaves the layer", ErrUnsafeEntry)
	}
	return p, nil
}

// applyEntry writes one tar entry below rootFd.
func applyEntry(rootFd int, hdr *tar.Header, body io.Reader) error {
	p, err := cleanEntryPath(hdr.Name)
	if err != nil {
		return err
	}
	if p == "." {
		if hdr.Typeflag != tar.TypeDir {
			return fmt.Errorf("%w: the layer's root is not a directory", ErrUnsafeEntry)
		}
		return setAttrs(rootFd, "", hdr)
	}
	dir, base := path.Split(p)
	parent, err := openDir(rootFd, dir, true)
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	if strings.HasPrefix(base, whiteoutPrefix) {
		return applyWhiteout(parent, base)
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return makeDir(parent, base, hdr)
	case tar.TypeReg, tar.TypeGNUSparse: // the reader turns the old TypeRegA into TypeReg
		return writeFile(parent, base, hdr, body)
	case tar.TypeSymlink:
		if err := removeEntry(parent, base); err != nil {
			return err
		}
		if err := unix.Symlinkat(hdr.Linkname, parent, base); err != nil {
			return fmt.Errorf("symlink: %w", err)
		}
		return setAttrs(parent, base, hdr)
	case tar.TypeLink:
		return hardLink(rootFd, parent, base, hdr.Linkname)
	case tar.TypeFifo:
		if err := removeEntry(parent, base); err != nil {
			return err
		}
		if err := unix.Mknodat(parent, base, unix.S_IFIFO|0o600, 0); err != nil {
			return fmt.Errorf("mkfifo: %w", err)
		}
		return setAttrs(parent, base, hdr)
	default:
		// Device nodes (TypeChar, TypeBlock) would be the host's devices in a cache on the
		// host; the sandbox's /dev is its own. Anything else has nothing to write.
		return nil
	}
}

// openDir opens the directory rel (components separated by "/", cleaned, no "..") below
// rootFd without following a symbolic link; with create, missing directories are made (0755,
// root's, as an image tool would).
func openDir(rootFd int, rel string, create bool) (int, error) {
	fd, err := unix.Dup(rootFd)
	if err != nil {
		return -1, fmt.Errorf("dup: %w", err)
	}
	for _, c := range strings.Split(strings.Trim(rel, "/"), "/") {
		if c == "" || c == "." {
			continue
		}
		next, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) && create {
			if err = unix.Mkdirat(fd, c, 0o755); err == nil || errors.Is(err, unix.EEXIST) {
				next, err = unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			}
		}
		unix.Close(fd)
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return -1, fmt.Errorf("%w: %s in its path is a symbolic link or not a directory", ErrUnsafeEntry, c)
		}
		if err != nil {
			return -1, fmt.Errorf("open %s: %w", c, err)
		}
		fd = next
	}
	return fd, nil
}

// applyWhiteout turns an OCI whiteout into overlayfs's: ".wh..wh..opq" marks the directory
// opaque, ".wh.NAME" becomes NAME as a 0/0 character device.
func applyWhiteout(parent int, base string) error {
	if base == whiteoutOpaque {
		if err := unix.Fsetxattr(parent, "trusted.overlay.opaque", []byte("y"), 0); err != nil {
			return fmt.Errorf("mark opaque: %w", err)
		}
		return nil
	}
	if strings.HasPrefix(base, whiteoutMeta) {
		return nil // aufs bookkeeping (.wh..wh.plnk, .wh..wh.aufs): nothing to hide
	}
	target := strings.TrimPrefix(base, whiteoutPrefix)
	if target == "" || target == "." || target == ".." {
		return fmt.Errorf("%w: whiteout of %q", ErrUnsafeEntry, target)
	}
	if err := removeEntry(parent, target); err != nil {
		return err
	}
	if err := unix.Mknodat(parent, target, unix.S_IFCHR, 0); err != nil {
		return fmt.Errorf("whiteout %s: %w", target, err)
	}
	return nil
}

// makeDir creates (or keeps) the directory base and sets its owner, mode and time.
func makeDir(parent int, base string, hdr *tar.Header) error {
	var st unix.Stat_t
	if err := unix.Fstatat(parent, base, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := removeEntry(parent, base); err != nil {
			return err
		}
	}
	if err := unix.Mkdirat(parent, base, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("mkdir: %w", err)
	}
	fd, err := unix.Openat(parent, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer unix.Close(fd)
	return setAttrs(fd, "", hdr)
}

// writeFile writes a regular file, replacing whatever base was (never writing through it).
func writeFile(parent int, base string, hdr *tar.Header, body io.Reader) error {
	if err := removeEntry(parent, base); err != nil {
		return err
	}
	fd, err := unix.Openat(parent, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	f := fdFile(fd, base)
	defer f.Close()
	if _, err := io.Copy(f, body); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return setAttrs(fd, "", hdr)
}

// hardLink links base to target, an entry of this layer: never to a path leaving it, a
// directory, or through a symbolic link.
func hardLink(rootFd, parent int, base, target string) error {
	t, err := cleanEntryPath(target)
	if err != nil || t == "." {
		return fmt.Errorf("%w: hard link to %q", ErrUnsafeEntry, target)
	}
	tdir, tbase := path.Split(t)
	tparent, err := openDir(rootFd, tdir, false)
	if err != nil {
		return fmt.Errorf("hard link to %q: %w", target, err)
	}
	defer unix.Close(tparent)
	var st unix.Stat_t
	if err := unix.Fstatat(tparent, tbase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("hard link to %q (not in this layer): %w", target, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return fmt.Errorf("%w: hard link to the directory %q", ErrUnsafeEntry, target)
	}
	if err := removeEntry(parent, base); err != nil {
		return err
	}
	if err := unix.Linkat(tparent, tbase, parent, base, 0); err != nil {
		return fmt.Errorf("hard link to %q: %w", target, err)
	}
	return nil
}

// removeEntry removes base (a file, link, or empty directory) if it exists.
func removeEntry(parent int, base string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(parent, base, &st, unix.AT_SYMLINK_NOFOLLOW); errors.Is(err, unix.ENOENT) {
		return nil
	} else if err != nil {
		return fmt.Errorf("stat: %w", err)
	}
	flags := 0
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		flags = unix.AT_REMOVEDIR
	}
	if err := unix.Unlinkat(parent, base, flags); err != nil {
		return fmt.Errorf("replace: %w", err)
	}
	return nil
}

// setAttrs sets owner, mode and modification time of base in dirFd (of dirFd itself when
// base is ""), without following a link. Setuid and setgid bits of non-directories are
// dropped: a setuid program in a cache on the host is one for the host, and inside the
// sandbox no_new_privs makes it useless anyway.
func setAttrs(dirFd int, base string, hdr *tar.Header) error {
	flags := unix.AT_SYMLINK_NOFOLLOW
	if base == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	if err := unix.Fchownat(dirFd, base, hdr.Uid, hdr.Gid, flags); err != nil {
		return fmt.Errorf("chown: %w", err)
	}
	if hdr.Typeflag != tar.TypeSymlink {
		mode := uint32(hdr.Mode) & 0o7777
		if hdr.Typeflag != tar.TypeDir {
			mode &^= unix.S_ISUID | unix.S_ISGID
		}
		if err := chmodAt(dirFd, base, mode); err != nil {
			return err
		}
	}
	var err error
	if base == "" {
		tv := unix.NsecToTimeval(hdr.ModTime.UnixNano())
		err = unix.Futimes(dirFd, []unix.Timeval{tv, tv})
	} else {
		ts := unix.NsecToTimespec(hdr.ModTime.UnixNano())
		err = unix.UtimesNanoAt(dirFd, base, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
	}
	if err != nil {
		return fmt.Errorf("set time: %w", err)
	}
	return nil
}

// fdFile wraps a descriptor this package opened.
func fdFile(fd int, name string) *os.File { return os.NewFile(uintptr(fd), name) }

// chmodAt sets the mode of base in dirFd, or of dirFd itself when base is "".
func chmodAt(dirFd int, base string, mode uint32) error {
	var err error
	if base == "" {
		err = unix.Fchmod(dirFd, mode)
	} else {
		err = unix.Fchmodat(dirFd, base, mode, 0)
	}
	if err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	return nil
}
