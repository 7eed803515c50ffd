package ebpf

import (
	"os"
	"path/filepath"
)

// Host is this machine's kernel as the sandbox manager needs it: the cgroup v2 root, the
// sandboxes' pin directories under DefaultPinRoot, the probes `sandbox doctor` runs, and the
// mount table. Its method set is sandbox.Kernel's, which sandbox declares so that it does not
// link cilium/ebpf; cmd/airlock passes a Host in. The zero value is ready to use.
type Host struct{}

// Cgroup2Root is the mount point of the cgroup v2 hierarchy (Cgroup2Root).
func (Host) Cgroup2Root() (string, error) { return Cgroup2Root() }

// PinDir is the directory under DefaultPinRoot holding sandbox's pinned programs and maps.
func (Host) PinDir(sandbox string) string {
	return filepath.Join(DefaultPinRoot, PinDirName(sandbox))
}

// Pinned reports whether sandbox's pin directory holds anything.
func (h Host) Pinned(sandbox string) bool {
	entries, err := os.ReadDir(h.PinDir(sandbox))
	return err == nil && len(entries) > 0
}

// RemovePins detaches and unpins sandbox's programs and maps (Remove).
func (Host) RemovePins(sandbox string) error { return Remove("", sandbox) }

// Probe checks the kernel's support for the sidecar's programs (Probe).
func (Host) Probe() error { return Probe() }

// ProbePacketGuard loads the BPF LSM packet socket guard alone (ProbePacketGuard).
func (Host) ProbePacketGuard() error { return ProbePacketGuard() }

// BPFLSMActive reports whether the BPF LSM is active (BPFLSMActive).
func (Host) BPFLSMActive() (bool, error) { return BPFLSMActive() }

// MountPoints lists this process's mount points of the given filesystem types.
func (Host) MountPoints(types ...string) ([]string, error) {
	mounts, err := Mounts(types...)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(mounts))
	for _, m := range mounts {
		out = append(out, m.Point)
	}
	return out, nil
}

// AttachDenyAll attaches and pins sandbox's programs on cgroup with no listener and no CIDR,
// then lets go of them: the pins keep the cgroup enforced, every connection refused but to
// the sandbox's own loopback (a local sandbox with --network none is in a network namespace
// of its own that holds only lo, and has no sidecar to attach the programs).
func (Host) AttachDenyAll(sandbox, cgroup string) error {
	e, err := Open(Config{Sandbox: sandbox, Cgroup: cgroup, OwnLoopback: true})
	if err != nil {
		return err
	}
	return e.Close()
}
