package sandbox

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Paths of /proc and /sys the container sees masked (empty) or read-only: the runtime's usual
// lists, plus the host's cgroup, bpf, debug and tracing filesystems under the read-only /sys.
var (
	maskedPaths = []string{
		"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
		"/sys/firmware", "/sys/devices/virtual/powercap", "/sys/fs/cgroup", "/sys/fs/bpf",
		"/sys/kernel/debug", "/sys/kernel/tracing", "/sys/kernel/security",
	}
	readonlyPaths = []string{
		"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
	}
)

// sysDirs are the host's system directories the sandbox sees read-only (those that exist; a
// symbolic link, as on a merged-/usr system, is copied as a link).
var sysDirs = []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// initArgv is the container's first process: it holds the namespaces open and reaps orphans
// until the container is deleted (sh's wait collects any child it inherits).
var initArgv = []string{"/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 86400 & wait; done"}

// ociVersion is the runtime-spec version config.json declares: the one Debian 12's runc
// (1.0.2-dev) and crun (1.0.0) take; nothing newer is used.
const ociVersion = "1.0.2"

// ociSpec is the config.json of st's container; view lists the host directories to bind in.
// It lists no network namespace: the runtime is started inside the sandbox's (see
// runtimeInNetns), and the container and every `exec` inherit it. (A netns path in the config
// would have runc 1.1 `exec` join it after the user namespace, which the kernel refuses for a
// namespace the host's user namespace owns.)
func ociSpec(st *State, view rootView) (*specs.Spec, error) {
	c := st.Container
	spec := &specs.Spec{
		Version:  ociVersion,
		Root:     &specs.Root{Path: "rootfs", Readonly: c.Image == nil},
		Hostname: st.Name,
		Process: &specs.Process{
			User:            specs.User{UID: 0, GID: 0},
			Args:            initArgv,
			Env:             []string{"PATH=" + defaultPath},
			Cwd:             "/",
			NoNewPrivileges: true,
			Capabilities:    &specs.LinuxCapabilities{},
		},
		Mounts: containerMounts(c, view),
		Linux: &specs.Linux{
			UIDMappings:   []specs.LinuxIDMapping{{ContainerID: 0, HostID: c.IDBase, Size: IDRangeSize}},
			GIDMappings:   []specs.LinuxIDMapping{{ContainerID: 0, HostID: c.IDBase, Size: IDRangeSize}},
			Namespaces:    namespaces(),
			CgroupsPath:   c.CgroupsPath,
			Resources:     resources(st.Limits),
			MaskedPaths:   maskedPaths,
			ReadonlyPaths: readonlyPaths,
		},
	}
	if c.SelfCgroups {
		spec.Linux.CgroupsPath, spec.Linux.Resources = "", nil
	}
	runscSpec(c, spec)
	sc, err := seccomp.GetDefaultProfile(spec)
	if err != nil {
		return nil, fmt.Errorf("default seccomp profile: %w", err)
	}
	nativeABIOnly(sc)
	spec.Linux.Seccomp = sc
	return spec, nil
}

// nativeArch is the seccomp architecture of the machine's own system call ABI.
var nativeArch = map[string]specs.Arch{"amd64": specs.ArchX86_64, "arm64": specs.ArchAARCH64}[runtime.GOARCH]

// nativeABIOnly keeps only the native system call ABI in the profile: Docker's default also
// allows the 32-bit ABIs (i386 and x32 beside x86_64), each a second copy of the whole table
// for a sandbox to reach the kernel through, and a filter for each that the runtime compiles
// with libseccomp on every start (on a 2-core host, a third of runc's init CPU). A sandbox's
// 32-bit binary then gets no system call at all; the filter refuses every call of an ABI it
// does not list, whatever its number.
func nativeABIOnly(sc *specs.LinuxSeccomp) {
	if nativeArch != "" && slices.Contains(sc.Architectures, nativeArch) {
		sc.Architectures = []specs.Arch{nativeArch}
	}
}

func namespaces() []specs.LinuxNamespace {
	return []specs.LinuxNamespace{
		{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
		{Type: specs.MountNamespace}, {Type: specs.UserNamespace}, {Type: specs.CgroupNamespace},
	}
}

// resources are the container's limits; its devices are the runtime's defaults (null, zero,
// full, random, urandom, tty, ptmx and the pts), every other device denied.
func resources(l Limits) *specs.LinuxResources {
	r := &specs.LinuxResources{
		Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
	}
	if l.Memory > 0 {
		mem := l.Memory
		r.Memory = &specs.LinuxMemory{Limit: &mem}
	}
	if l.Pids > 0 {
		r.Pids = &specs.LinuxPids{Limit: int64(l.Pids)}
	}
	if l.CPU > 0 {
		period := uint64(100000)
		quota := int64(l.CPU * float64(period))
		r.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
	}
	return r
}

// containerMounts are the container's filesystems: proc, a small /dev, a read-only /sys, the
// host's system directories read-only, the private /tmp and working directory (size-capped
// tmpfs, world-writable with the sticky bit) and the --mount binds. /etc is the bundle's own
// (the read-only root), with a few host directories bound read-only into it.
func containerMounts(c *ContainerState, view rootView) []specs.Mount {
	tmpOpts := []string{"nosuid", "nodev", "mode=1777", fmt.Sprintf("size=%d", c.TmpSize)}
	ms := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "bind", Source: "/sys", Options: []string{"rbind", "nosuid", "noexec", "nodev", "ro"}},
		writableMount(c, "/tmp", diskTmp, tmpOpts),
	}
	for _, d := range view.sys {
		ms = append(ms, roBind("/"+d, "/"+d))
	}
	for _, d := range view.etc {
		ms = append(ms, roBind(filepath.Join("/etc", d), filepath.Join("/etc", d)))
	}
	workdirMounted := false
	for _, m := range c.Mounts {
		workdirMounted = workdirMounted || m.Dest == c.Workdir
	}
	if !workdirMounted && !c.WorkdirInImage {
		ms = append(ms, writableMount(c, c.Workdir, diskWork, tmpOpts))
	}
	if c.Image != nil {
		ms = append(ms, imageEtcMounts(c)...)
	}
	// Parents before children: a mount under the working directory lands on its tmpfs.
	user := slices.Clone(c.Mounts)
	slices.SortStableFunc(user, func(a, b Mount) int { return strings.Count(a.Dest, "/") - strings.Count(b.Dest, "/") })
	for _, m := range user {
		opts := []string{"rbind", "nosuid", "nodev"}
		if !m.Writable {
			opts = append(opts, "ro")
		}
		ms = append(ms, specs.Mount{Destination: m.Dest, Type: "bind", Source: m.Source, Options: opts})
	}
	return ms
}

func roBind(src, dst string) specs.Mount {
	return specs.Mount{Destination: dst, Type: "bind", Source: src, Options: []string{"rbind", "nosuid", "nodev", "ro"}}
}

// PrepareBundleEncoding builds encoding/json's encoders of config.json's types: the first
// encoding of a type builds them by reflection, milliseconds in a new process, on the way to
// the runtime's create. `exec --ephemeral` calls it in the background while its first steps
// run.
func PrepareBundleEncoding() { _, _ = json.Marshal(&specs.Spec{}) }
