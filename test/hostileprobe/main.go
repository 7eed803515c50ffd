//go:build linux

// Command hostileprobe is what the adversarial sandbox tests (test/e2e/sandbox_hostile_test.go)
// run inside a sandbox for the attempts a shell cannot spell: ptrace, mknod, mount, raw
// sockets, open_by_handle_at, a scan of /proc that leaves out its own ancestors. It is built
// static (CGO_ENABLED=0), so it runs on any root filesystem, and handed to the sandbox
// read-only with --mount.
//
// Usage: hostileprobe CMD ARGS...; every attempt prints one line "NAME=ok[:detail]" or
// "NAME=ERRNO" (EPERM, ENOENT, ...). It never writes into a file it opens, sends no signal
// but 0 and SIGCONT, and undoes what succeeds (a node it made, a mount) at once, so running it
// where the isolation is missing harms nothing.
//
// It is a test harness: nothing ships it and nothing imports it.
package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: hostileprobe find PART... | peek PID TAG | mknod DIR | mount DIR | sockets | handle PATH")
		os.Exit(2)
	}
	args := os.Args[2:]
	switch os.Args[1] {
	case "find":
		find(strings.Join(args, ""))
	case "peek":
		if len(args) != 2 {
			fail("peek PID TAG")
		}
		peek(args[0], args[1])
	case "mknod":
		mknod(arg(args))
	case "mount":
		mount(arg(args))
	case "sockets":
		sockets()
	case "handle":
		handle(arg(args))
	case "cross":
		if len(args) != 2 {
			fail("cross PID UID")
		}
		cross(args[0], args[1])
	default:
		fail("unknown command " + os.Args[1])
	}
}

func arg(args []string) string {
	if len(args) != 1 {
		fail("want one argument")
	}
	return args[0]
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "hostileprobe:", msg)
	os.Exit(2)
}

// result prints NAME=ok[:detail] or NAME=ERRNO.
func result(name string, err error, detail string) {
	switch {
	case err == nil && detail != "":
		fmt.Printf("%s=ok:%s\n", name, detail)
	case err == nil:
		fmt.Printf("%s=ok\n", name)
	default:
		fmt.Printf("%s=%s\n", name, errnoName(err))
	}
}

func errnoName(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		if n := unix.ErrnoName(errno); n != "" {
			return n
		}
	}
	return "ERR(" + strings.ReplaceAll(err.Error(), " ", "_") + ")"
}

// find prints found=ok:PID for every process whose command line (NULs as spaces) contains
// marker, leaving out this process and its ancestors (whose command lines may spell the
// marker's parts). The caller passes the marker in parts so that its own command line does
// not hold it whole.
func find(marker string) {
	skip := ancestors()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		result("find", err, "")
		return
	}
	for _, d := range entries {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || skip[pid] {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err == nil && strings.Contains(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})), marker) {
			result("found", nil, strconv.Itoa(pid))
		}
	}
	fmt.Println("find=done")
}

// ancestors is the set of this process and its ancestors, by their /proc/PID/stat.
func ancestors() map[int]bool {
	set := map[int]bool{}
	for pid := os.Getpid(); pid > 0 && !set[pid]; {
		set[pid] = true
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			break
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			break
		}
		pid, _ = strconv.Atoi(f[1])
	}
	return set
}

// peek tries what one process can do to another, named TAG in the output: signal it (0 and
// SIGCONT, both harmless), read its command line, environment, root and working directory,
// and attach to it with PTRACE_SEIZE (which does not stop it; the exit detaches).
func peek(pidArg, tag string) {
	pid, err := strconv.Atoi(pidArg)
	if err != nil || pid <= 0 {
		fail("peek: bad pid " + pidArg)
	}
	dir := "/proc/" + pidArg
	result(tag+".signal0", unix.Kill(pid, 0), "")
	result(tag+".sigcont", unix.Kill(pid, unix.SIGCONT), "")
	for _, f := range []string{"cmdline", "environ"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		result(tag+"."+f, err, strconv.Quote(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '}))))
	}
	for _, f := range []string{"root", "cwd"} {
		names, err := readDirNames(filepath.Join(dir, f))
		result(tag+"."+f, err, strings.Join(names, ","))
	}
	result(tag+".ptrace", unix.PtraceSeize(pid), "")
}

// cross is what one identity of a sandbox tries on another's process PID, whose uid is UID
// (issue 34): signal 0 and SIGCONT, ptrace, take its stdin with pidfd_getfd, write its
// memory with process_vm_writev (to address 0, which no process maps, so a permitted write
// fails with EFAULT and changes nothing; EPERM is the refusal), become its uid, and mount a
// cgroup2 file system to move itself.
func cross(pidArg, uidArg string) {
	pid, err := strconv.Atoi(pidArg)
	if err != nil || pid <= 0 {
		fail("cross: bad pid " + pidArg)
	}
	uid, err := strconv.Atoi(uidArg)
	if err != nil || uid < 0 {
		fail("cross: bad uid " + uidArg)
	}
	result("cross.signal0", unix.Kill(pid, 0), "")
	result("cross.sigcont", unix.Kill(pid, unix.SIGCONT), "")
	result("cross.ptrace", unix.PtraceSeize(pid), "")
	_, err = os.ReadFile("/proc/" + pidArg + "/environ")
	result("cross.environ", err, "")
	pfd, err := unix.PidfdOpen(pid, 0)
	if err == nil {
		var fd int
		fd, err = unix.PidfdGetfd(pfd, 0, 0)
		if err == nil {
			unix.Close(fd)
		}
		unix.Close(pfd)
	}
	result("cross.pidfd_getfd", err, "")
	b := []byte{0}
	_, err = unix.ProcessVMWritev(pid, []unix.Iovec{{Base: &b[0], Len: 1}}, []unix.RemoteIovec{{Base: 0, Len: 1}}, 0)
	result("cross.process_vm_writev", err, "")
	result("cross.setresuid", unix.Setresuid(uid, uid, uid), "")
	dir, err := os.MkdirTemp("", "cross")
	if err == nil {
		err = unix.Mount("none", dir, "cgroup2", 0, "")
		if err == nil {
			_ = unix.Unmount(dir, unix.MNT_DETACH)
		}
		os.Remove(dir)
	}
	result("cross.mount_cgroup2", err, "")
}

func readDirNames(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names, nil
}

// mknod tries to make a character device (1:3, what /dev/null is) and a block device (the
// host's first virtio disk, 253:0) in dir, and removes what it made.
func mknod(dir string) {
	for _, n := range []struct {
		name string
		mode uint32
		dev  uint64
	}{
		{"char", unix.S_IFCHR | 0o600, unix.Mkdev(1, 3)},
		{"block", unix.S_IFBLK | 0o600, unix.Mkdev(253, 0)},
	} {
		p := filepath.Join(dir, "hostileprobe-"+n.name)
		err := unix.Mknod(p, n.mode, int(n.dev))
		if err == nil {
			os.Remove(p)
		}
		result("mknod."+n.name, err, "")
	}
}

// mount tries a tmpfs and a bind mount of / on dir, unmounting what succeeds.
func mount(dir string) {
	try := func(name, src, fstype string, flags uintptr) {
		err := unix.Mount(src, dir, fstype, flags, "")
		if err == nil {
			_ = unix.Unmount(dir, unix.MNT_DETACH)
		}
		result(name, err, "")
	}
	try("mount.tmpfs", "none", "tmpfs", 0)
	try("mount.bind", "/", "", unix.MS_BIND|unix.MS_REC)
	try("mount.proc", "proc", "proc", 0)
}

// sockets tries the sockets that need CAP_NET_RAW or CAP_NET_ADMIN.
func sockets() {
	for _, s := range []struct {
		name                 string
		domain, typ, protocl int
	}{
		{"socket.raw_icmp", unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP},
		{"socket.raw_tcp6", unix.AF_INET6, unix.SOCK_RAW, unix.IPPROTO_TCP},
		{"socket.packet", unix.AF_PACKET, unix.SOCK_RAW, 0x0300}, // htons(ETH_P_ALL)
	} {
		fd, err := unix.Socket(s.domain, s.typ, s.protocl)
		if err == nil {
			unix.Close(fd)
		}
		result(s.name, err, "")
	}
}

// handle is the open_by_handle_at escape ("shocker"): take a file handle on path's file
// system and ask for the file system's root inode (2 on ext4) by handle, which resolves
// outside any bind mount or chroot. It needs CAP_DAC_READ_SEARCH.
func handle(path string) {
	h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, path, 0)
	if err != nil {
		result("handle.name", err, "")
		return
	}
	mfd, err := unix.Open(path, unix.O_RDONLY, 0)
	if err != nil {
		result("handle.name", err, "")
		return
	}
	defer unix.Close(mfd)
	root := unix.NewFileHandle(h.Type(), []byte{2, 0, 0, 0, 0, 0, 0, 0})
	fd, err := unix.OpenByHandleAt(mfd, root, unix.O_RDONLY|unix.O_DIRECTORY)
	detail := ""
	if err == nil {
		f := os.NewFile(uintptr(fd), "root-by-handle")
		names, _ := f.Readdirnames(50)
		f.Close()
		detail = strings.Join(names, ",")
	}
	result("handle.open_root", err, detail)
}
