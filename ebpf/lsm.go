package ebpf

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// BPFLSMActive reports whether the BPF LSM is among the kernel's active security modules
// (securityfs's "lsm" file), which the packet socket guard needs. When securityfs is not
// mounted, it reads a detached instance (fsopen/fsmount, attached nowhere). An error means
// the answer is unknown.
func BPFLSMActive() (bool, error) {
	data, err := os.ReadFile("/sys/kernel/security/lsm")
	if err != nil {
		if data, err = readDetachedSecurityfs("lsm"); err != nil {
			return false, fmt.Errorf("read the active LSMs: %w", err)
		}
	}
	return slices.Contains(strings.Split(strings.TrimSpace(string(data)), ","), "bpf"), nil
}

// readDetachedSecurityfs reads a file of a securityfs instance that is mounted nowhere.
func readDetachedSecurityfs(name string) ([]byte, error) {
	fsfd, err := unix.Fsopen("securityfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fsopen securityfs: %w", err)
	}
	defer unix.Close(fsfd)
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return nil, fmt.Errorf("create securityfs: %w", err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_RDONLY)
	if err != nil {
		return nil, fmt.Errorf("fsmount securityfs: %w", err)
	}
	defer unix.Close(mfd)
	fd, err := unix.Openat(mfd, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open securityfs %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read securityfs %s: %w", name, err)
	}
	if len(data) == 0 {
		return nil, errors.New("securityfs lsm is empty")
	}
	return data, nil
}

// ProbePacketGuard loads the packet socket guard (an lsm_cgroup program) on its own, with
// throw-away maps, and reports why the kernel refuses it, if it does. Having the BPF LSM
// listed as active is not always enough: some kernels refuse every LSM program.
func ProbePacketGuard() error {
	spec, err := loadAirlock()
	if err != nil {
		return fmt.Errorf("load bpf spec: %w", err)
	}
	var guard struct {
		P *ebpf.Program `ebpf:"packet_guard"`
	}
	if err := spec.LoadAndAssign(&guard, nil); err != nil {
		return fmt.Errorf("load packet socket guard: %w", notSupported(err))
	}
	return guard.P.Close()
}
