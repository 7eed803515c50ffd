package ebpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"
)

// Probe reports whether this kernel can run airlock's kernel enforcement: the program
// types, map types and helpers bpf/airlock.c uses, and a cgroup v2 mount. It returns nil, or
// an error wrapping ErrNotSupported that names every missing piece, or another error when
// probing itself failed. Attaching can still fail (e.g. no bpf_link support, or no
// privileges); Open reports that. `airlock run` and `airlock sandbox doctor` call it.
func Probe() error {
	var missing []error
	check := func(what string, err error) {
		switch {
		case err == nil:
		case errors.Is(err, ebpf.ErrNotSupported):
			missing = append(missing, fmt.Errorf("%s: %w", what, err))
		default:
			missing = append(missing, fmt.Errorf("probe %s: %w", what, err))
		}
	}
	for _, pt := range []ebpf.ProgramType{ebpf.CGroupSockAddr, ebpf.CGroupSock, ebpf.CGroupSKB, ebpf.SockOps} {
		check("program type "+pt.String(), features.HaveProgramType(pt))
	}
	for _, mt := range []ebpf.MapType{ebpf.Hash, ebpf.LRUHash, ebpf.LPMTrie, ebpf.Array, ebpf.PerCPUArray, ebpf.RingBuf, ebpf.SkStorage} {
		check("map type "+mt.String(), features.HaveMapType(mt))
	}
	helpers := []struct {
		pt ebpf.ProgramType
		fn asm.BuiltinFunc
	}{
		{ebpf.CGroupSockAddr, asm.FnSkStorageGet},
		{ebpf.CGroupSockAddr, asm.FnRingbufReserve},
		{ebpf.CGroupSockAddr, asm.FnKtimeGetBootNs},
		{ebpf.CGroupSockAddr, asm.FnGetSocketCookie},
		{ebpf.CGroupSockAddr, asm.FnGetCurrentAncestorCgroupId}, // the exempt cgroup (pod mode)
		{ebpf.CGroupSock, asm.FnGetCurrentAncestorCgroupId},
		{ebpf.CGroupSKB, asm.FnSkStorageGet},
		{ebpf.CGroupSKB, asm.FnSkFullsock},
		{ebpf.CGroupSKB, asm.FnSkbAncestorCgroupId},
		{ebpf.SockOps, asm.FnSkStorageGet},
	}
	for _, h := range helpers {
		check(fmt.Sprintf("helper %s in %s programs", h.fn, h.pt), features.HaveProgramHelper(h.pt, h.fn))
	}
	if err := cgroup2Mounted(); err != nil {
		missing = append(missing, err)
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrNotSupported, errors.Join(missing...))
}

// cgroup2Mounted checks that a cgroup v2 hierarchy is mounted somewhere.
func cgroup2Mounted() error {
	if _, err := Cgroup2Root(); err != nil {
		return err
	}
	return nil
}

// Cgroup2Root returns the mount point of the cgroup v2 hierarchy (from
// /proc/self/mountinfo), or an error wrapping ErrNotSupported when none is mounted.
func Cgroup2Root() (string, error) {
	for _, p := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		var st unix.Statfs_t
		if unix.Statfs(p, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return p, nil
		}
	}
	return mountinfoCgroup2()
}

// mountinfoCgroup2 finds a cgroup2 mount in /proc/self/mountinfo.
func mountinfoCgroup2() (string, error) {
	mounts, err := Mounts("cgroup2")
	if err != nil {
		return "", err
	}
	if len(mounts) == 0 {
		return "", fmt.Errorf("no cgroup v2 hierarchy is mounted: %w", ErrNotSupported)
	}
	return mounts[0].Point, nil
}
